"""A data set of embeddings: an .npz whose `x_*` arrays are 2-D (rows x features) loads, splits and
partitions as images do, its teachers are vmapped heads (linear or MLP) on the rows, and `pate
run` takes it through train-teachers, label, train-student and analyze."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import EMBEDDING_CLASSES as CLASSES, EMBEDDING_FEATURES as FEATURES, embedding_sets as sets_for
from conftest import invoke, one_line_error, write_embeddings
from pate import data
from pate.config import DataConfig

def test_a_2d_npz_is_a_data_set_of_embeddings(tmp_path):
    path = write_embeddings(tmp_path / "e.npz")
    raw = np.load(path)
    ds = data.load_dataset(DataConfig(name="npz", path=path))
    assert ds.x_train.shape == (480, FEATURES) and ds.x_train.dtype == np.float32
    assert data.is_embedding(ds.x_train) and not data.is_embedding(np.zeros((2, 3, 3, 1)))
    np.testing.assert_array_equal(ds.x_train, raw["x_train"])  # no scaling: embeddings keep their range
    assert ds.x_train.min() < 0 and ds.x_train.max() > 1 and ds.num_classes == CLASSES
    splits = data.split(ds, 200)
    assert splits.pool_x.shape == (200, FEATURES) and splits.eval_x.shape == (100, FEATURES)
    part = data.partition(splits.train_x.shape[0], 7, seed=0)
    assert part.shard_size == 68 and splits.train_x[part.indices].shape == (7, 68, FEATURES)


@pytest.mark.parametrize("arrays, message", [
    (dict(x_train=np.full((4, 3), np.nan)), "NaN or infinite"),
    (dict(x_test=np.zeros((2, 5), np.float32)), r"train embeddings \(3,\) and test inputs \(5,\) differ"),
    (dict(x_test=np.zeros((2, 3, 3), np.float32)), "differ in shape"),
    (dict(x_train=np.zeros((4, 0), np.float32)), "has no features"),
    (dict(x_train=np.zeros((4, 3), bool)), "must hold numbers"),
    (dict(x_train=np.zeros((4,), np.float32)), r"images \(N, H, W\[, C\]\) or embeddings \(N, F\)"),
])
def test_bad_embeddings_are_refused_in_one_line(tmp_path, arrays, message):
    base = dict(x_train=np.zeros((4, 3), np.float32), y_train=np.array([0, 1, 0, 1]),
                x_test=np.zeros((2, 3), np.float32), y_test=np.array([0, 1]))
    np.savez(tmp_path / "bad.npz", **{**base, **arrays})
    with pytest.raises(PateError, match=message):
        data.load_npz(str(tmp_path / "bad.npz"))


@pytest.mark.parametrize("value, dtype, shown", [(1e300, np.float64, "1e+300"), (-1e30, np.float32, "1e+30"),
                                                  (2**62, np.int64, "4.61e+18"), (np.inf, np.float64, None)])
def test_rows_past_the_feature_bound_are_refused_in_one_line_without_a_warning(tmp_path, value, dtype, shown):
    """1e300 was cast to inf with a RuntimeWarning, 1e30 loaded and overflowed float32 downstream: every
    reader of an .npz's rows (whole, the pool, rows by index, as a stream) refuses them, with the reason."""
    import warnings

    rng = np.random.default_rng(0)
    x_train, x_test = rng.normal(size=(6, 3)).astype(dtype), rng.normal(size=(4, 3)).astype(dtype)
    x_train[2, 1] = x_test[1, 0] = value
    np.savez(tmp_path / "big.npz", x_train=x_train, y_train=np.arange(6) % 2, x_test=x_test, y_test=np.arange(4) % 2)
    cfg = DataConfig(name="npz", path=str(tmp_path / "big.npz"), public_size=2)
    readers = (data.load_dataset, data.load_public, lambda c: data.load_pool(c, 2),
               lambda c: data.load_train_rows(c, [2]), lambda c: list(data.train_chunks(c)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the test
        for read in readers:
            with pytest.raises(PateError) as err:
                read(cfg)
            line = str(err.value)
            assert "\n" not in line and str(tmp_path / "big.npz") in line
            assert (f"holds a value of magnitude {shown}, past 1e+06" in line and "standardise" in line
                    if shown else "NaN or infinite" in line), line
        x_train[2, 1] = x_test[1, 0] = -data.MAX_FEATURE  # the bound itself is a feature
        np.savez(tmp_path / "edge.npz", x_train=x_train, y_train=np.arange(6) % 2, x_test=x_test,
                 y_test=np.arange(4) % 2)
        assert data.load_dataset(DataConfig(name="npz", path=str(tmp_path / "edge.npz"))).x_train.min() == -1e6


@pytest.mark.parametrize("sets, message", [
    (["teachers.model=\"cnn\""], "teachers.model = 'cnn' needs images"),
    (["teachers.augment_shift=2"], "teachers.augment_shift = 2 augments images"),
    (["teachers.augment_flip=true"], "teachers.augment_flip = True augments images"),
    (["teachers.eval_flip=true"], "teachers.eval_flip"),
])
def test_image_settings_on_embeddings_are_refused_before_anything_is_written(tmp_path, sets, message):
    path = write_embeddings(tmp_path / "e.npz", train=120, test=40)
    extra = [a for s in sets for a in ("--set", s)]
    result = invoke("train-teachers", "--config", "configs/tiny.toml", "--workdir", tmp_path / "run", "--no-progress",
                    *sets_for(path), "--set", "data.public_size=20", *extra)
    assert message in one_line_error(result, 1)
    assert not (tmp_path / "run" / "teachers.json").exists() and not (tmp_path / "run" / "teachers").exists()


def test_the_student_refuses_image_augmentation_on_embeddings():
    from pate.config import StudentConfig
    from pate.programs.models import check_input

    check_input(StudentConfig(model="mlp", cutout=0, augment_shift=0), (FEATURES,))
    check_input(StudentConfig(), (8, 8, 1))  # images: anything goes
    with pytest.raises(PateError, match="student.cutout = 8 augments images"):
        check_input(StudentConfig(model="mlp", augment_shift=0), (FEATURES,))
    with pytest.raises(PateError, match="student.model = 'wrn' needs images"):
        check_input(StudentConfig(model="wrn"), (FEATURES,))


def test_pate_run_on_embeddings_end_to_end(tmp_path):
    """The single end-to-end check: linear teachers (one vmapped program; their stacked
    heads are (T, F, C)), LNMax labels, an MLP student on the rows, the privacy report."""
    from pate.programs.teacher_training import load_teachers

    path = write_embeddings(tmp_path / "e.npz")
    run = tmp_path / "run"
    result = invoke("run", "--config", "configs/tiny.toml", "--workdir", run, "--no-progress", "--seed", 0,
                    *sets_for(path))
    assert result.exit_code == 0, result.output
    teachers = json.loads((run / "teachers.json").read_text())
    assert teachers["image_shape"] == [FEATURES] and teachers["ensemble_accuracy"] > 0.8
    loaded = load_teachers(run)
    kernels = [leaf.shape for leaf in __import__("jax").tree.leaves(loaded.params) if leaf.ndim == 3]
    assert kernels == [(6, FEATURES, CLASSES)]
    student = json.loads((run / "student.json").read_text())
    assert student["image_shape"] == [FEATURES] and student["accuracy"] > 0.8
    assert json.loads((run / "release.json").read_text())["release_eps"] > 0
    # the run's other readers: the audit (its classes from teachers.json: the npz config names
    # none), the ledger, and a plan on the same data set
    audit = invoke("audit", "--workdir", run, "--trials", 500, "--seed", 0)
    assert audit.exit_code == 0 and f"{CLASSES} classes" in audit.output, audit.output
    ledger = invoke("ledger", "--workdir", run)
    assert ledger.exit_code == 0 and "2 releases" in ledger.output, ledger.output
    plan = invoke("plan", "--config", "configs/tiny.toml", *sets_for(path), "--target-eps", 20,
                  "--set", "aggregation.mechanism=\"confident-gnmax\"", "--set", "aggregation.threshold=4.0",
                  "--set", "aggregation.sigma_threshold=2.0", "--set", "aggregation.sigma=2.0")  # what label takes
    assert plan.exit_code == 0 and "P[this release's eps <= 20]" in plan.output, plan.output


def _dpsgd_on_embeddings(tmp_path) -> list:
    path = write_embeddings(tmp_path / "e.npz")
    return ["--config", "configs/tiny.toml", "--no-progress", "--seed", 1, *sets_for(path),
            "--set", "dpsgd.linear_batch_size=96", "--set", "dpsgd.linear_epochs=5",
            "--set", "dpsgd.linear_learning_rate=2.0"]


def test_dpsgd_on_embeddings_refuses_image_models(tmp_path):
    """`pate dpsgd` on a 2-D npz: the CNN and ScatterNet are refused in one line before anything
    is charged."""
    common = _dpsgd_on_embeddings(tmp_path)
    for model in ("cnn", "scatternet"):
        refused = invoke("dpsgd", "--workdir", tmp_path / model, "--model", model, *common)
        assert "needs images but the data are embeddings" in one_line_error(refused, 1)
        assert not (tmp_path / model / "dpsgd.json").exists()


@pytest.mark.slow  # 8 s; DP-SGD's linear model on rows stays fast in tests/baselines/test_dpsgd_map.py
def test_dpsgd_on_embeddings_trains_a_linear_head(tmp_path):
    """`pate dpsgd` on a 2-D npz: a linear head on the rows, charged to the data set's ledger."""
    common = _dpsgd_on_embeddings(tmp_path)
    result = invoke("dpsgd", "--workdir", tmp_path / "run", "--model", "linear", *common)
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / "dpsgd.json").read_text())
    assert info["input_shape"] == [FEATURES] and info["features"] == "the rows as given"
    assert info["accuracy"] > 0.6 and info["data_set"]["releases"] == 1


def _only_data(tmp_path, features: int) -> str:
    """A config that names only `[data]`: an npz of embeddings of `features` columns (issue 53)."""
    path = write_embeddings(tmp_path / f"e{features}.npz", train=240, test=150, features=features)
    config = tmp_path / f"only-data-{features}.toml"
    config.write_text(f'[data]\nname = "npz"\npath = {json.dumps(path)}\npublic_size = 100\n')
    return str(config)


def _resolved(run) -> dict:
    import tomllib

    return tomllib.loads((run / "config.toml").read_text())


FINE = ["--set", "aggregation.mechanism=\"fine-grained\"", "--set", "student.steps=5"]


@pytest.mark.parametrize("features", [16, 300])
def test_rows_of_any_width_plan_their_defaults_from_a_config_that_names_only_data(tmp_path, features):
    """The data decides the defaults: no image map, a pca within the rows' width and the pool, a
    smoothing that fits a 100-point pool; `plan` says which."""
    plan = invoke("plan", "--config", _only_data(tmp_path, features), *FINE)
    assert plan.exit_code == 0 and f"defaults for rows of {features} features, a pool of 100" in plan.output, plan.output
    assert f'features.map = "none", fine_grained.pca = {min(features, 100)}, fine_grained.smoothing = 10' in plan.output


@pytest.mark.parametrize("features", [16, pytest.param(300, marks=pytest.mark.slow)])  # 300: 9 s of the fast suite
def test_rows_of_any_width_run_fine_grained_from_a_config_that_names_only_data(tmp_path, features):
    """`run` takes the defaults `plan` showed, says which once, and trains a row student."""
    config, run = _only_data(tmp_path, features), tmp_path / "run"
    result = invoke("run", "--config", config, "--workdir", run, "--no-progress", "--seed", 0, *FINE)
    assert result.exit_code == 0, result.output
    assert result.output.count("defaults for rows") == 1
    written = _resolved(run)
    assert written["features"]["map"] == "none" and written["fine_grained"]["pca"] == min(features, 100)
    assert written["fine_grained"]["smoothing"] == 10 and written["student"]["model"] == "mlp"
    assert json.loads((run / "student.json").read_text())["image_shape"] == [features]
    labels = np.load(run / "labels.npz")
    assert str(labels["feature_map"]) == "none"  # labels.npz records the map: the rows' own space


def test_rows_train_row_teachers_from_a_config_that_names_only_data(tmp_path):
    """`teachers.model = 'cnn' needs images` was the first of four refusals; the rows now pick
    linear heads, and the teachers' batch and epochs follow their shards."""
    config, run = _only_data(tmp_path, 16), tmp_path / "run"
    result = invoke("train-teachers", "--config", config, "--workdir", run, "--no-progress",
                    "--set", "teachers.num_teachers=3", "--set", "teachers.epochs=2")
    assert result.exit_code == 0, result.output
    written = _resolved(run)["teachers"]
    assert written["model"] == "linear" and written["epochs"] == 2 and written["batch_size"] == 24
    assert json.loads((run / "teachers.json").read_text())["image_shape"] == [16]


def test_plan_refuses_a_pca_wider_than_the_rows_as_label_does(tmp_path):
    """`pate plan --config` did not catch `fine_grained.pca = 128` on 16 features; `label` did."""
    config = _only_data(tmp_path, 16)
    result = invoke("plan", "--config", config, "--set", "aggregation.mechanism=\"fine-grained\"",
                    "--set", "fine_grained.pca=128")
    assert "fine_grained.pca = 128 but the public pool gives at most 16 principal directions" in \
        one_line_error(result, 1)
    result = invoke("plan", "--config", config, "--set", "aggregation.mechanism=\"fine-grained\"",
                    "--set", "features.map=\"scattering\"")
    assert "features.map = 'scattering': scattering takes images" in one_line_error(result, 1)


@pytest.mark.slow
@pytest.mark.parametrize("features", [16, 300])
def test_rows_of_any_width_run_the_teacher_ensemble_from_a_config_that_names_only_data(tmp_path, features):
    """`pate run` of the teacher ensemble from `[data]` alone (sizes kept small by --set; the
    models, map, pca and augmentation are the data's)."""
    config, run = _only_data(tmp_path, features), tmp_path / "run"
    result = invoke("run", "--config", config, "--workdir", run, "--no-progress", "--seed", 0,
                    "--set", "teachers.num_teachers=3", "--set", "teachers.epochs=3", "--set", "student.steps=20",
                    "--set", "aggregation.queries=40",
                    "--set", "aggregation.allow_near_chance=true")  # 3 teachers: what is tested is the defaults
    assert result.exit_code == 0, result.output
    written = _resolved(run)
    assert (written["teachers"]["model"], written["student"]["model"]) == ("linear", "mlp")
    assert written["student"]["cutout"] == 0 and written["student"]["augment_shift"] == 0
    assert json.loads((run / "student.json").read_text())["image_shape"] == [features]
    assert json.loads((run / "release.json").read_text())["release_eps"] > 0
