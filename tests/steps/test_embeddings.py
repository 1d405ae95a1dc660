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


def test_dpsgd_on_embeddings_trains_a_linear_head_and_refuses_image_models(tmp_path):
    """`pate dpsgd` on a 2-D npz: a linear head on the rows (charged to the data set's ledger);
    the CNN and ScatterNet are refused in one line before anything is charged."""
    path = write_embeddings(tmp_path / "e.npz")
    common = ["--config", "configs/tiny.toml", "--no-progress", "--seed", 1, *sets_for(path),
              "--set", "dpsgd.linear_batch_size=96", "--set", "dpsgd.linear_epochs=5",
              "--set", "dpsgd.linear_learning_rate=2.0"]
    for model in ("cnn", "scatternet"):
        refused = invoke("dpsgd", "--workdir", tmp_path / model, "--model", model, *common)
        assert "needs images but the data are embeddings" in one_line_error(refused, 1)
        assert not (tmp_path / model / "dpsgd.json").exists()
    result = invoke("dpsgd", "--workdir", tmp_path / "run", "--model", "linear", *common)
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / "dpsgd.json").read_text())
    assert info["input_shape"] == [FEATURES] and info["features"] == "the rows as given"
    assert info["accuracy"] > 0.6 and info["data_set"]["releases"] == 1
