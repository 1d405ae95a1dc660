"""`pate dpsgd`: per-example clipping against a plain loop, the noise scale (KS test),
Poisson sampling, ScatterNet features, and the command on the tiny config through the
CLI, bad input included."""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from analysis.baselines import sgd_accounting as dpsgd_accounting
from pate.programs import keys, models, scattering
from pate.store import rundir
from pate.config import DpsgdConfig, load_config
from pate.baselines import dpsgd

from conftest import (BAD_RELEASE_OPTIONS, TINY, baseline_run, invoke, leads_with_the_data_set, one_line_error,
                      refused_before_writing, refused_without_overwrite, tiny_dpsgd_cnn)


# --------------------------------------------------------------------------- the DP step


def test_clipped_sum_matches_a_plain_loop():
    model, params, x, y = tiny_dpsgd_cnn()

    def loss_one(p, xi, yi):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, xi[None]), yi[None])[0]

    valid = np.ones(len(y), np.float32)
    valid[-2:] = 0.0  # padding rows count for nothing
    grad_one = jax.jit(jax.grad(loss_one))
    per_example = [jax.tree.map(np.asarray, grad_one(params, x[i], y[i])) for i in range(len(y))]
    # one compiled program for the three clip norms (op by op, the vmapped CNN took ~20 s)
    clipped = jax.jit(lambda p, xs, ys, v, c: dpsgd.clipped_gradient_sum(loss_one, p, xs, ys, v, c))
    for clip in (1e-3, 0.05, 1e3):
        got = clipped(params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(valid), clip)
        want = jax.tree.map(np.zeros_like, params)
        for i, g in enumerate(per_example):
            if not valid[i]:
                continue
            norm = np.sqrt(sum(float(np.sum(np.square(l))) for l in jax.tree.leaves(g)))
            factor = min(1.0, clip / norm)
            assert norm * factor <= clip * (1 + 1e-5)
            want = jax.tree.map(lambda w, gi: w + factor * gi, want, g)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(a), b, rtol=2e-4, atol=1e-7)


def test_step_noise_has_the_calibrated_scale():
    """With an empty batch the SGD update is -lr * N(0, (sigma C)^2) / (q N): a KS test at
    that scale passes; at a scale 10% off it fails."""
    cfg = DpsgdConfig()
    model = models.Linear(10)
    x = np.zeros((4, 40, 50), np.float32)
    params = model.init(jax.random.key(0), jnp.zeros((1, 40, 50)))
    sigma, clip, denominator, lr = 1.7, 0.1, 250.0, 1.0
    tx = optax.sgd(lr)
    step = dpsgd.make_step(model, tx, clip, sigma * clip, denominator)
    before = np.asarray(params["params"]["Dense_0"]["kernel"]).copy()
    new, _ = step(params, tx.init(params), jnp.asarray(x), jnp.zeros(4, jnp.int32),
                  jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4)), keys.noise_key())
    noise = (before - np.asarray(new["params"]["Dense_0"]["kernel"])).ravel() / lr
    assert noise.size == 20000
    scale = sigma * clip / denominator
    assert stats.kstest(noise, "norm", args=(0, scale)).pvalue > 1e-4
    assert stats.kstest(noise, "norm", args=(0, 1.1 * scale)).pvalue < 1e-6
    assert stats.kstest(noise, "norm", args=(0, 0.9 * scale)).pvalue < 1e-6
    del cfg


def test_noise_differs_between_seeds_that_differ_in_high_bits():
    grad = {"w": jnp.zeros(256)}
    a = dpsgd.noisy_mean(grad, keys.noise_key(1), 1.0, 1.0)["w"]
    b = dpsgd.noisy_mean(grad, keys.noise_key(1 + 2**127), 1.0, 1.0)["w"]
    c = dpsgd.noisy_mean(grad, keys.noise_key(1), 1.0, 1.0)["w"]
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(a, c)


def test_poisson_batches():
    rng = np.random.default_rng(0)
    n, rate, micro = 5000, 0.02, 32
    sizes = []
    for _ in range(400):
        idx, valid = dpsgd.poisson_batch(rng, n, rate, micro)
        assert idx.shape == valid.shape and idx.shape[1] == micro
        chosen = idx.ravel()[valid.ravel() > 0]
        assert np.unique(chosen).size == chosen.size and (chosen < n).all()
        assert idx.shape[0] == max(1, -(-chosen.size // micro))
        sizes.append(chosen.size)
    # the batch size is Binomial(n, rate): mean and variance
    assert np.mean(sizes) == pytest.approx(n * rate, rel=0.03)
    assert np.var(sizes) == pytest.approx(n * rate * (1 - rate), rel=0.25)


def test_cnn_matches_tramer_boneh_shape():
    cfg = DpsgdConfig()
    model = dpsgd.make_model(cfg, "cnn", 10, (28, 28, 1))
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    assert sum(math.prod(p.shape) for p in jax.tree.leaves(shapes)) == 26010  # their MNIST_CNN
    assert models.cnn_output_side(28, cfg) == 4
    x = jax.random.uniform(jax.random.key(1), (3, 9, 9, 2))
    import flax.linen as nn

    np.testing.assert_allclose(models.max_pool_2x2_stride_1(x),
                                nn.max_pool(x, (2, 2), strides=(1, 1), padding="VALID"))


# --------------------------------------------------------------------------- ScatterNet features


def test_scattering_features_are_per_example():
    rng = np.random.default_rng(0)
    images = rng.random((5, 28, 28, 1), dtype=np.float32)
    raw = scattering.scatter(images, 2, 8)
    feats = scattering.group_normalize(raw, 27)
    assert feats.shape == (5, 7, 7, scattering.scattering_channels(2, 8)) == (5, 7, 7, 81)
    groups = feats.reshape(5, 49, 27, 3)
    raw_var = raw.reshape(5, 49, 27, 3).astype(np.float64).var(axis=(1, 3))
    np.testing.assert_allclose(groups.mean(axis=(1, 3)), 0, atol=1e-4)
    # unit variance, shrunk by GroupNorm's epsilon (1e-5) where the group barely varies
    np.testing.assert_allclose(groups.var(axis=(1, 3)), raw_var / (raw_var + 1e-5), rtol=1e-3)
    # one example's features depend on that example alone (no data statistics)
    alone = scattering.group_normalize(scattering.scatter(images[2:3], 2, 8), 27)
    np.testing.assert_allclose(alone[0], feats[2], rtol=1e-5, atol=1e-5)


def test_scattering_cache(tmp_path):
    images = np.random.default_rng(0).random((3, 8, 8, 1), dtype=np.float32)
    first = scattering.features(images, 1, 8, 9, tmp_path / "cache", "train")
    (cached,) = (tmp_path / "cache").glob("train-*.npy")
    assert cached.stat().st_mode & 0o777 == 0o600  # features of private images: owner-only
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    np.testing.assert_array_equal(scattering.features(images, 1, 8, 9, tmp_path / "cache", "train"), first)


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def tiny_dpsgd(tmp_path_factory):
    return baseline_run(tmp_path_factory, "dpsgd", 2**127 + 987654321987654321)


def test_tiny_run_through_the_cli(tiny_dpsgd):
    workdir, output, seed = tiny_dpsgd
    assert "dpsgd accuracy" in output and "eps" in output
    info = json.loads((workdir / rundir.DPSGD_JSON).read_text())
    for key in ("accuracy", "eps", "delta", "noise_multiplier", "clip_norm", "epochs", "steps",
                "batch_size", "sampling", "accountant", "model", "neighbouring_relation", "eps_replace_one"):
        assert key in info, key
    # its replace-one curve has no dp-accounting event: exported as such, never as add/remove's
    assert "UnsupportedDpEvent" in json.dumps(info["dp_event"]) and info["dp_event"]["read_by"] == []
    # The wall times grow with the realised (private) Poisson batch sizes: printed, never written.
    assert not [key for key in info if "time" in key]
    assert "wall time" in output and "training" in output
    # Each eps names its neighbouring relation; the replace-one one (PATE's, the release's own) is the larger.
    assert info["neighbouring_relation"] == "replace-one" and info["target_relation"] == "add/remove-one"
    assert info["release_eps"] == info["eps_replace_one"] and "PUBLISH: eps" in output
    assert "replace-one" in output and "replacing one example" in info["neighbouring_relation_note"]
    assert info["eps_replace_one"] == pytest.approx(dpsgd_accounting.epsilon_replace_one(
        info["noise_multiplier"], info["sampling_rate"], info["steps"], info["release_delta"]), rel=1e-9)
    assert info["eps_replace_one"] > info["eps_add_remove"]
    assert info["model"] == "cnn" and info["sampling"] == "poisson" and info["accountant"] == "rdp"
    assert info["accuracy"] > 0.5  # 4 classes
    assert info["eps_add_remove"] <= info["target_eps"] == 3.0
    # the reported eps is recomputed from what ran
    assert info["eps_add_remove"] == pytest.approx(dpsgd_accounting.epsilon(
        info["noise_multiplier"], info["sampling_rate"], info["steps"], info["release_delta"]), rel=1e-9)
    assert info["eps_add_remove"] > 2.9
    assert (workdir / rundir.DPSGD_DIR).is_dir() and (workdir / rundir.CONFIG_TOML).exists()
    # the seed is never written
    for path in workdir.rglob("*"):
        if path.is_file():
            assert str(seed) not in path.read_bytes().decode("latin-1"), path


@pytest.mark.slow  # 12 s
def test_scatternet_on_the_tiny_config(tmp_path):
    result = invoke("dpsgd", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress",
                    "--model", "scatternet", "--eps", "2")
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / rundir.DPSGD_JSON).read_text())
    assert info["model"] == "scatternet" and info["eps_add_remove"] <= 2.0 and info["accuracy"] > 0.5
    assert list((tmp_path / "run" / rundir.DPSGD_FEATURES_DIR).glob("train-*.npy"))


def test_existing_result_needs_overwrite(tiny_dpsgd, tmp_path):
    refused_without_overwrite("dpsgd", tiny_dpsgd[0], rundir.DPSGD_JSON)


@pytest.mark.parametrize("args,code,needle", [
    *BAD_RELEASE_OPTIONS,
    (["--eps", "-1"], 2, "positive"),
    (["--set", "privacy.delta=1.5"], 1, "delta"),
    (["--seed", "-1"], 2, "2**128"),
    (["--set", "data.name=\"npz\"", "--set", "data.path=\"/nonexistent/x.npz\""], 1, "not found"),
    (["--set", "dpsgd.clip_norm=0"], 1, "clip_norm"),
    pytest.param(["--set", "dpsgd.conv_kernels=[9, 9]"], 1, "conv_kernels", marks=pytest.mark.slow),  # 17 s
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, code, needle):
    refused_before_writing("dpsgd", tmp_path / "run", args, code, needle)


def test_refuses_a_run_of_another_data_set(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    other = load_config(TINY, {"data.synthetic_seed": 5})
    rundir.RunDir(workdir).write_config(other)
    line = one_line_error(invoke("dpsgd", "--config", TINY, "--workdir", workdir, "--no-progress"), 1)
    assert "[data]" in line
    assert sorted(os.listdir(workdir)) == [rundir.CONFIG_TOML]


@pytest.mark.slow
def test_scatternet_on_real_fashion_mnist(tmp_path):
    """A short ScatterNet run (3 epochs, eps 3) on the real data: well above chance."""
    from analysis.core.errors import PateError
    from pate.config import DataConfig
    from pate.data import load_dataset

    try:
        load_dataset(DataConfig(name="fashion_mnist"))
    except PateError as err:
        pytest.skip(f"Fashion-MNIST not installed: {err}")
    config = os.path.join(os.path.dirname(TINY), "fashion_mnist.toml")
    result = invoke("dpsgd", "--config", config, "--workdir", tmp_path / "run", "--no-progress",
                    "--model", "scatternet", "--set", "dpsgd.scatternet_epochs=3")
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / rundir.DPSGD_JSON).read_text())
    assert info["eps_add_remove"] <= 3.0 and info["accuracy"] > 0.75


@pytest.mark.slow  # 11 s; the same property stays fast for fedavg.json (tests/baselines/test_fedavg.py)
def test_dpsgd_json_leads_with_what_the_data_set_has_spent(tmp_path):
    """dpsgd.json's first figure was the model's own add/remove eps, while an earlier release of
    the same data set sat in a sub-object. Now the first key is the data set's cumulative eps
    (larger than the model's own after an earlier charge), the model's own beside it, named;
    the printed summary starts with the same figure."""
    info = leads_with_the_data_set("dpsgd", rundir.DPSGD_JSON, tmp_path / "run")
    assert info["release_eps"] == info["eps_replace_one"]
    assert info["release_delta"] == info["delta"] == load_config(TINY).privacy.delta
