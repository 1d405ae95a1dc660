"""`pate dpsgd` on a public feature map (`[dpsgd] features`, the teachers' `InputMap`): a linear
classifier trained with DP-SGD on each input's row under the map, the map and its scale fitted
on the public pool alone, rows cached owner-only, one charge per model; the ScatterNet map gives
the ScatterNet model's very run; bad maps are refused in one line before anything is written."""

from __future__ import annotations

import dataclasses
import json
import stat

import numpy as np
import pytest

from conftest import TINY, invoke, one_line_error, run_entries
from pate.baselines import dpsgd
from pate.programs.cluster import Cluster
from pate.config import load_config, parse_override
from pate.data import load_dataset, split
from pate.store import rundir

#: ScatterNet settings small enough for 8 x 8 images, the same for the map ([fine_grained]'s) and
#: for the ScatterNet model ([dpsgd]'s), and the linear model trained as the tiny ScatterNet is.
SCATTERING = ["fine_grained.scattering_j=1", "fine_grained.scattering_l=4", "fine_grained.groups=1",
              "dpsgd.scattering_j=1", "dpsgd.scattering_l=4", "dpsgd.groups=1", "dpsgd.linear_batch_size=96",
              "dpsgd.linear_learning_rate=2.0", "dpsgd.linear_epochs=5.0"]


def _sets(*items: str) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def _dpsgd(workdir, *args) -> dict:
    result = invoke("dpsgd", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 11, *args)
    assert result.exit_code == 0, result.output
    return json.loads((workdir / rundir.DPSGD_JSON).read_text())


def test_dpsgd_on_a_map_trains_on_its_rows_and_charges_once(tmp_path):
    """The map "pixels": a linear model on the flattened images times the pool's scale (not 1:
    pixels in [0, 1]); one charge, as for every model; the printed summary names the map."""
    result = invoke("dpsgd", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress", "--seed", 11,
                    "--model", "linear", "--features", "pixels")
    assert result.exit_code == 0, result.output
    assert "dpsgd: linear on the public map 'pixels'" in result.output
    info = json.loads((tmp_path / "run" / rundir.DPSGD_JSON).read_text())
    assert info["features_map"] == "pixels" and info["input_shape"] == [64] and info["features_scale"] > 1.0
    assert info["accuracy"] > 0.5 and info["eps_add_remove"] <= 3.0  # 4 classes
    entries = run_entries(tmp_path / "run")
    assert [e["kind"] for e in entries] == ["dpsgd"]
    assert "on the public map pixels" in entries[0]["mechanism"]["describe"]


@pytest.mark.slow  # two ScatterNet runs, 12 s each
def test_the_scattering_map_is_the_scatternet_model(tmp_path):
    """The map "scattering" computes the ScatterNet model's features (the same transform, the same
    per-example group norm), and the pool's scale of group-normalised rows is 1 up to the norm's
    epsilon: with one seed, the two runs make the same model, and each charges the ledger once."""
    scatternet = _dpsgd(tmp_path / "scatternet", "--model", "scatternet", *_sets(*SCATTERING))
    assert len(run_entries(tmp_path / "scatternet")) == 1
    mapped = _dpsgd(tmp_path / "map", "--model", "linear", "--features", "scattering", *_sets(*SCATTERING))
    entries = run_entries(tmp_path / "map")
    assert len(entries) == 2 and entries[-1]["kind"] == "dpsgd"  # one data set: one charge per model
    assert mapped["features_map"] == "scattering" and scatternet["features_map"] == ""
    assert mapped["features_scale"] == pytest.approx(1.0, abs=1e-3)
    assert "fitted on the public pool" in mapped["features"]
    assert mapped["input_shape"] == [5 * 4 * 4] and mapped["model"] == "linear"
    for key in ("noise_multiplier", "steps", "eps_replace_one", "release_eps", "accuracy", "accuracy_test"):
        assert mapped[key] == pytest.approx(scatternet[key], abs=1e-9), key
    cache = tmp_path / "map" / rundir.DPSGD_FEATURES_DIR
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["eval", "pool", "train"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache.iterdir())


def test_a_learned_concatenation_trains_caches_and_reads_its_cache(tmp_path, tiny_encoder):
    """DP-SGD on "learned+pixels": the encoder's rows are cached (owner-only) beside nothing else
    that costs time; a second run of the same seed reads them and makes the same model."""
    sets = _sets(f"features.weights={json.dumps(str(tiny_encoder))}")
    first = _dpsgd(tmp_path / "run", "--model", "linear", "--features", "learned+pixels", *sets)
    assert first["features_map"] == "learned+pixels" and "learned weights sha256" in first["features"]
    assert first["input_shape"][0] > 64 and first["accuracy"] > 0.5  # 4 classes
    cache = tmp_path / "run" / rundir.DPSGD_FEATURES_DIR
    learned = sorted(p.name for p in cache.iterdir())
    assert [n.split("-")[:2] for n in learned] == [["eval", "learned"], ["pool", "learned"], ["train", "learned"]]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache.iterdir())
    # The cache is what a second run reads: damaging nothing, the same model.
    times = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    again = _dpsgd(tmp_path / "run", "--model", "linear", "--features", "learned+pixels", "--overwrite", *sets)
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == times
    assert again["accuracy"] == first["accuracy"] and len(run_entries(tmp_path / "run")) == 2


@pytest.mark.parametrize("whiten", [False, True])
def test_the_map_and_its_scale_see_the_public_pool_alone(tmp_path, whiten):
    """Replacing private rows changes neither the map's part scales (whitened: each part's pool
    PCA) nor DP-SGD's pool scale nor any other row: each private row is a function of that row
    and public values."""
    config = load_config(TINY, {"dpsgd.model": "linear", "dpsgd.features": "scattering+pixels",
                                "features.whiten": whiten, "fine_grained.pca": 6,
                                **dict(parse_override(s) for s in SCATTERING[:3])})
    splits = split(load_dataset(config.data), config.data.public_size)
    changed = splits.train_x.copy()
    changed[10:] = np.random.default_rng(1).random(changed[10:].shape, dtype=np.float32)

    alone = Cluster(0, 1, gather=lambda x: np.asarray(x)[None])

    def inputs(data, cache):
        train, scale, view, pool = dpsgd.train_inputs(config, data, cache, alone)
        return train, dpsgd._test_inputs(config, data, cache, view, scale, pool)[0], scale

    train, test, scale = inputs(splits, tmp_path / "a")
    train2, test2, scale2 = inputs(dataclasses.replace(splits, train_x=changed), tmp_path / "b")  # caches apart
    assert scale == scale2 and scale != 1.0
    np.testing.assert_array_equal(test2, test)  # the pool and evaluation rows: public values only
    np.testing.assert_allclose(train2[:10], train[:10], rtol=1e-5, atol=1e-6)  # FFT: batch shapes may differ
    pool_rows = test[: len(splits.pool_x)].astype(np.float64)
    assert np.mean(pool_rows ** 2) == pytest.approx(1.0, rel=1e-4)  # the pool at the scale clip_norm was set for
    # whitened: the fine-grained release's map, each part's 6 whitened directions to unit norm
    assert train.shape[1] == (12 if whiten else train.shape[1])
    if whiten:
        parts = train[:, :6].astype(np.float64), train[:, 6:].astype(np.float64)
        norms = [np.linalg.norm(p, axis=1) for p in parts]
        np.testing.assert_allclose(norms[0], norms[1], rtol=1e-5)  # each part to the same (unit, scaled) norm


@pytest.mark.parametrize("args, code, needle", [
    (["--model", "linear", "--features", "wavelets"], 2, "--features"),
    (["--set", 'dpsgd.model="linear"', "--set", 'dpsgd.features="wavelets"'], 1,
     "dpsgd.features must be one of scattering, pixels, none, learned"),
    (["--model", "cnn", "--features", "scattering"], 1, 'set dpsgd.model = "linear"'),
    (["--model", "linear", "--features", "learned"], 1, "features.weights is empty"),
    (["--model", "linear", "--features", "learned", "--set", 'features.weights="/nonexistent/enc"'], 1,
     "features.weights = '/nonexistent/enc': recipe.json not found"),
    (["--model", "linear", "--features", "none"], 1, "dpsgd.features = 'none': none takes rows of features"),
])
def test_a_bad_map_is_one_line_and_writes_nothing(tmp_path, args, code, needle):
    workdir = tmp_path / "run"
    line = one_line_error(invoke("dpsgd", "--config", TINY, "--workdir", workdir, "--no-progress", *args), code)
    assert needle in line
    assert not workdir.exists() or not any(workdir.iterdir())


@pytest.mark.parametrize("shape", [(12,), (3, 3, 2)])
def test_the_linear_models_closed_form_is_the_per_example_clipped_sum(shape):
    """`linear_clipped_gradient_sum` against `clipped_gradient_sum` (vmapped per-example
    gradients, itself tested against a plain loop), at clip norms that clip every, some and no
    example, padding rows counting for nothing."""
    import jax
    import jax.numpy as jnp
    import optax

    from pate.programs.models import Linear

    rng = np.random.default_rng(3)
    model = Linear(5)
    x = rng.normal(size=(16, *shape)).astype(np.float32)
    y = rng.integers(0, 5, 16).astype(np.int32)
    params = model.init(jax.random.key(0), jnp.zeros((1, *shape)))
    params = jax.tree.map(lambda p: p + 0.3 * rng.normal(size=p.shape).astype(np.float32), params)
    valid = np.ones(16, np.float32)
    valid[-3:] = 0.0

    def loss_one(p, xi, yi):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, xi[None]), yi[None])[0]

    for clip in (1e-3, 1.0, 1e3):
        want = dpsgd.clipped_gradient_sum(loss_one, params, x, y, valid, clip)
        got = dpsgd.linear_clipped_gradient_sum(params, x, y, valid, clip)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-7)  # float32 sums
