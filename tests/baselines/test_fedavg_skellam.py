"""`pate fedavg` with distributed noise (Skellam; the exact distributed discrete Gaussian): the clients'
JAX program against the numpy quantiser, the server's step on the decoded sum (DP-FedSGD: the central clipped mean gradient up
to quantisation), and the command on the tiny config (what fedavg.json, the summary and the
ledger say; the settings it refuses)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from analysis.mechanisms import ddg
from analysis.mechanisms import skellam as sk
from analysis.mechanisms import composition
from pate.baselines import fedavg, secure_fedavg
from pate.config import load_config
from pate.store import rundir
from pate.store.ledger import Ledger

from conftest import TINY, invoke, one_line_error


def _problem(seed=0, clients=3, size=40, dim=5, classes=3):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(clients, size, dim)).astype(np.float32)
    ys = rng.integers(0, classes, size=(clients, size))
    theta = rng.normal(scale=0.3, size=(dim + 1, classes)).astype(np.float32)
    return xs, ys, theta


def _per_example_clipped(theta, x, y, clip):
    """Each record's clipped gradient (p − e_y) x̃ᵀ min(1, C/‖·‖), float64, flattened."""
    xt = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1).astype(np.float64)
    logits = xt @ theta.astype(np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    r = p - np.eye(theta.shape[1])[y]
    g = xt[:, :, None] * r[:, None, :]
    norms = np.linalg.norm(g.reshape(len(x), -1), axis=1)
    return (g * np.minimum(1.0, clip / norms)[:, None, None]).reshape(len(x), -1)


def test_the_clients_program_is_the_numpy_quantiser_summed():
    xs, ys, theta = _problem()
    record = sk.SkellamSum.of(0.8, theta.size, 8, 3, 120, 3.0, 10, 1e-5)
    sums = np.asarray(secure_fedavg.quantised_sums(record)(jnp.asarray(theta), jnp.asarray(xs), jnp.asarray(ys)))
    assert sums.dtype == np.int32 and sums.shape == (3, *theta.shape)
    for p in range(3):
        ref = record.quantiser.quantise(_per_example_clipped(theta, xs[p], ys[p], 0.8)).sum(axis=0)
        # float32 against float64: a coordinate a hair from .5 may round the other way, by one per record at most
        diff = np.abs(sums[p].reshape(-1).astype(np.int64) - ref)
        assert diff.max() <= 2 and (diff == 0).mean() > 0.9


@pytest.mark.parametrize("poison", [np.nan, np.inf, 1e38])
def test_a_record_whose_gradient_is_not_finite_contributes_nothing(poison):
    """The enforced bound must hold for whatever the float32 program computes. A NaN survives the
    clip, and its cast to int32 is the backend's choice (XLA on CPU gives 0; INT_MIN would square to
    0 in int32 and pass the norm check), so non-finite values are zeroed before rounding."""
    xs, ys, theta = _problem(clients=1, size=6)
    record = sk.SkellamSum.of(0.8, theta.size, 8, 1, 6, 3.0, 10, 1e-5)
    sums = secure_fedavg.quantised_sums(record)
    clean = np.asarray(sums(jnp.asarray(theta), jnp.asarray(xs), jnp.asarray(ys)))[0].astype(np.int64)
    bad = xs.copy()
    bad[0, 2, 1] = poison  # one record's row overflows the float32 logits, or is NaN
    one = np.asarray(sums(jnp.asarray(theta), jnp.asarray(bad[:, 2:3]), jnp.asarray(ys[:, 2:3])))[0].astype(np.int64)
    assert np.sum(one * one) <= record.quantiser.bound2  # within the bound the sensitivity assumes
    rest = np.asarray(sums(jnp.asarray(theta), jnp.asarray(np.delete(xs, 2, axis=1)),
                           jnp.asarray(np.delete(ys, 2, axis=1))))[0].astype(np.int64)
    assert np.all(np.abs(clean - rest) <= np.sqrt(record.quantiser.bound2))


def test_the_server_steps_on_the_decoded_sum_alone(monkeypatch):
    """With the shares replaced by zeros the round is one step of central full-batch clipped gradient
    descent up to quantisation (≤ √d/2 per record in scaled units); a total that lacks a client's
    message (its share) is refused, not stepped on."""
    xs, ys, theta = _problem(seed=1)
    record = sk.SkellamSum.of(0.8, theta.size, 8, 3, 120, 3.0, 10, 1e-5)  # the program above's, compiled once
    step = secure_fedavg.secure_round(record, 0.5)
    central = np.asarray(fedavg.clipped_mean_gradient(jnp.asarray(theta), jnp.asarray(xs.reshape(120, -1)),
                                                      jnp.asarray(ys.reshape(-1)), 0.8, "l2"))
    monkeypatch.setattr(sk.SkellamSum, "shares", lambda self, source, shape: np.zeros((3, *shape), np.int64))
    new, lam = step(theta.astype(np.float64), "dual", jnp.asarray(xs), jnp.asarray(ys), None)
    assert lam == "dual"
    quantisation = np.sqrt(theta.size) / 2 / record.quantiser.scale  # per record, in gradient units
    assert np.linalg.norm((theta - new) / 0.5 - central) <= quantisation + 1e-4
    # the server reads the decoded total alone: a total short of a client's message is refused
    monkeypatch.setattr(sk.SkellamSum, "encode", lambda self, sums, shares: np.mod(sums[:2], self.modulus))
    with pytest.raises(Exception, match="only 2 of the 3 noise shares"):
        step(theta.astype(np.float64), None, jnp.asarray(xs), jnp.asarray(ys), None)


def test_tiny_run_with_distributed_skellam_noise(tmp_path, ledger_dir):
    workdir = tmp_path / "run"
    result = invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--mechanism", "skellam",
                    "--seed", 5, "--set", "fedavg.grid=20")
    assert result.exit_code == 0, result.output
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    clients = load_config(TINY).teachers.num_teachers
    assert info["mechanism"] == "skellam" and info["clients"] == clients
    assert f"{clients} shares" in info["noise"] and "one central release's noise" in info["noise"]
    assert "in-process exact modular sum" in info["noise"] and "Skellam" in info["accounting"]
    assert f"distributed Skellam noise, {clients} shares" in result.output
    assert "the sum carries one central release's noise" in result.output
    assert "distributed noise under an exact secure sum" in result.output
    assert info["averaged_model_eps"] is None and "carries the noise of one central full-batch" not in result.output
    grid = info["grid"]
    assert grid["kind"] == "skellam" and grid["shares"] == clients and grid["resolution"] == 20
    cost = composition.Cost.from_json(info["cost"])
    assert cost == sk.cost(grid["mu"], grid["l1_steps"], grid["l2sq_steps"], info["rounds"])
    assert 2.99 < info["release_eps"] <= 3.0 == info["target_eps"]
    assert info["release_eps"] == pytest.approx(composition.single_eps(cost, info["release_delta"]))
    assert info["accuracy"] > 0.5  # it learns (4 classes)
    entries = Ledger.for_config(load_config(TINY)).entries()
    assert [e["kind"] for e in entries] == ["fedavg"] and entries[0]["cost"]["kind"] == "skellam"
    # `pate ledger --import` rebuilds the same charge from fedavg.json's public values (and skips it: charged)
    from pate.steps.ledger_import import _fedavg_cost

    assert _fedavg_cost(info) == cost


@pytest.mark.parametrize("mechanism", ["skellam", "ddg"])
@pytest.mark.parametrize("args,needle", [
    (["--algorithm", "iadmm"], "algorithm"),
    (["--set", "fedavg.local_steps=2"], "local_steps"),
    (["--set", "fedavg.grid=0"], "grid"),
])
def test_settings_the_mechanism_cannot_account_are_refused(tmp_path, args, needle, mechanism):
    workdir = tmp_path / "run"
    line = one_line_error(invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress",
                                 "--mechanism", mechanism, *args), 1)
    assert needle in line and mechanism in line and not (workdir / rundir.FEDAVG_JSON).exists()


def test_tiny_run_with_distributed_discrete_gaussian_noise(tmp_path, ledger_dir):
    """The same command with the exact shares: the record's noise, cost and texts reach fedavg.json, the
    summary and the ledger, and `pate ledger --import` rebuilds the charge."""
    workdir = tmp_path / "run"
    result = invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--mechanism", "ddg",
                    "--seed", 5, "--set", "fedavg.grid=20", "--rounds", 5)  # 5 rounds: the exact sampler's time
    assert result.exit_code == 0, result.output
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    clients = load_config(TINY).teachers.num_teachers
    assert info["mechanism"] == "ddg" and info["averaged_model_eps"] is None
    assert f"{clients} shares, each exact N_Z(0" in info["noise"] and "Kairouz, Liu & Steinke" in info["accounting"]
    assert f"distributed discrete Gaussian noise, {clients} shares" in result.output
    grid = info["grid"]
    assert grid["kind"] == "ddg" and grid["shares"] == clients and grid["resolution"] == 20
    cost = composition.Cost.from_json(info["cost"])
    assert cost == ddg.cost(grid["sigma2_steps"], clients, grid["message_length"], grid["l1_steps"],
                            grid["l2sq_steps"], info["rounds"])
    assert info["release_eps"] <= 3.0 == info["target_eps"]
    assert info["release_eps"] == pytest.approx(composition.single_eps(cost, info["release_delta"]))
    assert info["accuracy"] > 0.5
    entries = Ledger.for_config(load_config(TINY)).entries()
    assert [e["kind"] for e in entries] == ["fedavg"] and entries[0]["cost"]["kind"] == "ddg"
    from pate.steps.ledger_import import _fedavg_cost

    assert _fedavg_cost(info) == cost
