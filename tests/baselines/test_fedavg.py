"""`pate fedavg`: the clipped gradient against autodiff, the sensitivities of
`analysis.baselines.fedavg_privacy` against a brute-force search over replace-one neighbours (and
a halved one exceeded), APPFL's defects pinned, the accounting against a plain-loop
exact composition, the noise scale (KS test), and the command on the tiny config
through the CLI, bad input and the ledger included."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats
from scipy.special import gammaln, ndtr

from analysis.mechanisms import composition
from analysis.baselines import fedavg_privacy as fp
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from pate.programs import projection
from pate.store import rundir
from pate.config import load_config
from pate.store.ledger import Ledger
from pate.baselines import fedavg

from conftest import (BAD_RELEASE_OPTIONS, TINY, baseline_run, invoke, leads_with_the_data_set, one_line_error,
                      refused_before_writing, refused_without_overwrite)


C, ETA, RHO = 1.0, 0.5, 2.0
DIM, CLASSES, SIZE = 3, 3, 4


# --------------------------------------------------------------------------- the client's step


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_clipped_mean_gradient_matches_a_plain_autodiff_loop(norm):
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(DIM + 1, CLASSES)).astype(np.float32)
    x = rng.random((6, DIM), dtype=np.float32) * 3
    y = rng.integers(0, CLASSES, 6)

    def loss(t, xi, yi):
        logits = jnp.append(xi, 1.0) @ t
        return optax.softmax_cross_entropy_with_integer_labels(logits[None], jnp.array([yi]))[0]

    total = np.zeros_like(theta)
    grad = jax.jit(jax.grad(loss))
    for xi, yi in zip(x, y):
        g = np.asarray(grad(jnp.asarray(theta), jnp.asarray(xi), int(yi)))
        size = np.abs(g).sum() if norm == "l1" else np.sqrt((g ** 2).sum())
        total += g * min(1.0, 0.7 / size)
    got = fedavg.clipped_mean_gradient(jnp.asarray(theta), jnp.asarray(x), jnp.asarray(y), 0.7, norm)
    np.testing.assert_allclose(np.asarray(got), total / 6, rtol=1e-4, atol=1e-6)


def test_clipping_is_enforced_and_local_steps_are_plain_gd():
    """APPFL: clipping skipped with DP on, the batch mean clipped instead of each example,
    Adam moving every coordinate by ~lr whatever C. Here each example is clipped (one huge
    example moves the mean by at most C/I) and a local step is w − η ḡ exactly."""
    rng = np.random.default_rng(1)
    theta = jnp.asarray(rng.normal(size=(DIM + 1, CLASSES)), jnp.float32)
    x = rng.random((SIZE, DIM), dtype=np.float32)
    y = jnp.asarray(rng.integers(0, CLASSES, SIZE))
    base = fedavg.clipped_mean_gradient(theta, jnp.asarray(x), y, C, "l1")
    x[0] *= 1e6
    huge = fedavg.clipped_mean_gradient(theta, jnp.asarray(x), y, C, "l1")
    assert float(jnp.abs(huge - base).sum()) <= 2 * C / SIZE + 1e-5
    step = fedavg.fedavg_message(theta, jnp.asarray(x), y, clip=C, learning_rate=ETA, local_steps=1, norm="l1")
    np.testing.assert_allclose(np.asarray(step), np.asarray(theta - ETA * huge), rtol=1e-6)


# --------------------------------------------------------------------------- brute-force sensitivity


def _candidates():
    """Replacement points: every vertex of [0, 1]^DIM and a few random points, each with
    every label."""
    rng = np.random.default_rng(2)
    points = [np.array(v, np.float32) for v in itertools.product([0.0, 1.0], repeat=DIM)]
    points += list(rng.random((4, DIM), dtype=np.float32))
    xs = np.array([p for p in points for _ in range(CLASSES)])
    ys = np.array([c for _ in points for c in range(CLASSES)], np.int32)
    return jnp.asarray(xs), jnp.asarray(ys)


def _messages(message, trials: int):
    """For each of `trials` random public models (and duals) and client data: the message
    for every replacement of the client's first point (the mean is symmetric in the
    points), as a (replacements, d) float64 array."""
    cx, cy = _candidates()

    @jax.jit
    def every(theta, lam, rest_x, rest_y):
        def one(xj, yj):
            return message(theta, lam, jnp.concatenate([xj[None], rest_x]), jnp.concatenate([yj[None], rest_y]))

        return jax.vmap(one)(cx, cy).reshape(cx.shape[0], -1)

    rng = np.random.default_rng(3)
    for trial in range(trials):
        theta = jnp.asarray(rng.normal(scale=[0.3, 1.0, 3.0][trial % 3], size=(DIM + 1, CLASSES)), jnp.float32)
        lam = jnp.asarray(rng.normal(size=(DIM + 1, CLASSES)), jnp.float32)
        rest_x = jnp.asarray(rng.random((SIZE - 1, DIM), dtype=np.float32))
        rest_y = jnp.asarray(rng.integers(0, CLASSES, SIZE - 1), jnp.int32)
        yield np.asarray(every(theta, lam, rest_x, rest_y), np.float64)


def _max_change(message, norm: str, trials: int = 6, step: float | None = None) -> float:
    """max over public models w, client data and replacements of ‖message(D) − message(D')‖
    for D, D' differing in the client's first point; with a grid `step`, of
    ‖round(message(D)/γ) − round(message(D')/γ)‖₁ in grid steps (`fp.quantise`)."""
    best = 0.0
    for out in _messages(message, trials):
        if step is not None:
            out = fp.quantise(out, step)
        diff = (out[:, None, :] - out[None, :, :]).astype(np.float64)
        best = max(best, float((np.abs(diff).sum(-1) if norm == "l1" else np.sqrt((diff ** 2).sum(-1))).max()))
    return best


def _fedavg(k, norm, lr=ETA):
    return lambda t, lam, x, y: fedavg.fedavg_message(t, x, y, clip=C, learning_rate=lr, local_steps=k, norm=norm)


def _iadmm(norm):
    return lambda t, lam, x, y: fedavg.iadmm_message(t, lam, x, y, clip=C, rho=RHO, norm=norm)


LIP = {n: fp.linear_lipschitz(DIM + 1, 1.0, math.sqrt(DIM + 1), n) for n in ("l1", "l2")}


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_fedavg_one_step_sensitivity_is_the_brute_force_maximum(norm):
    bound = fp.fedavg_sensitivity(C, ETA, SIZE, 1, norm=norm)
    assert bound == pytest.approx(2 * C * ETA / SIZE)
    found = _max_change(_fedavg(1, norm), norm)
    assert found <= bound * (1 + 1e-5)
    assert found > bound / 2  # a halved sensitivity would be exceeded: the search can fail


def test_iadmm_sensitivity_is_the_brute_force_maximum():
    bound = fp.iadmm_sensitivity(C, RHO, SIZE)
    assert bound == pytest.approx(2 * C / (RHO * SIZE))
    found = _max_change(_iadmm("l1"), "l1")
    assert bound / 2 < found <= bound * (1 + 1e-5)


@pytest.mark.parametrize("lipschitz", [None, LIP["l1"]])
def test_fedavg_several_local_steps_stay_below_the_trajectory_bound(lipschitz):
    """K = 3 local steps: the other examples' gradients change along the trajectory. The
    bound that counts each step as 2Cη/I (APPFL: K ignored altogether) is exceeded by
    the search; the recursion of `fedavg_sensitivity` is not."""
    lr = 4.0  # large steps: the trajectories part
    bound = fp.fedavg_sensitivity(C, lr, SIZE, 3, norm="l1", lipschitz=lipschitz)
    found = _max_change(_fedavg(3, "l1", lr), "l1")
    assert found <= bound * (1 + 1e-5)
    assert found > 2 * C * lr / SIZE  # the one-step sensitivity APPFL calibrates to
    assert fp.fedavg_sensitivity(C, lr, SIZE, 3, norm="l1") >= bound  # Lipschitz only tightens


def test_iadmm_dual_comes_from_released_values_only():
    """APPFL's IIADMM keeps the last noiseless clipped gradient as the dual (so the next
    z holds two data-dependent gradients, Δ up to 4C/(ρI) by the triangle inequality,
    noised for 2C/(ρI)); ICEADMM sends its dual unnoised. Here the dual is updated from
    the noisy messages and the public model only: the server computes the same λ_p, and
    given λ_p the message moves by 2C/(ρI) (the brute-force test above)."""
    rng = np.random.default_rng(4)
    noisy = rng.normal(size=(5, DIM + 1, CLASSES))
    lam = rng.normal(size=(5, DIM + 1, CLASSES))
    lam -= lam.mean(0)
    theta, new = fedavg.server_update("iadmm", noisy, lam, RHO)
    np.testing.assert_allclose(theta, noisy.mean(0))
    np.testing.assert_allclose(new, lam + RHO * (theta[None] - noisy))
    np.testing.assert_allclose(new.sum(0), 0.0, atol=1e-9)
    assert fedavg.server_update("fedavg", noisy, lam, RHO)[1] is lam


def test_server_momentum_is_fedavgm_on_the_released_averages():
    """FedAvgM against a plain loop over rounds (v ← βv + (w − w̄), w ← w − v) from the noisy
    averages alone; β = 0 is plain averaging (w ← w̄)."""
    rng = np.random.default_rng(5)
    averages = rng.normal(size=(6, DIM + 1, CLASSES))
    for beta in (0.0, 0.5, 0.9):
        theta, velocity = np.zeros((DIM + 1, CLASSES)), np.zeros((DIM + 1, CLASSES))
        w, v = theta.copy(), velocity.copy()
        for avg in averages:
            theta, velocity = fedavg.server_momentum(theta, avg, velocity, beta)
            step = w - avg
            v = beta * v + step
            w = w - v
            np.testing.assert_allclose(theta, w)
            if beta == 0.0:
                np.testing.assert_allclose(theta, avg)


def _rounds(algorithm: str, seed: int, rounds: int = 5, clients: int = 4, grid: int = 0):
    """`train_rounds` of a small Gaussian run on synthetic data: the final global model and
    its plan (float64 noise, or with `grid` > 0 the exact grid release)."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(clients * 8, DIM)).astype(np.float32)
    y = rng.integers(0, CLASSES, clients * 8)
    cfg = dataclasses.replace(load_config(TINY).fedavg, algorithm=algorithm, mechanism="gaussian", eps=5.0,
                              rounds=rounds, learning_rate=2.0, rho=0.5, local_steps=1, clip_norm=C,
                              server_momentum=0.0, grid=grid)
    plan = fedavg.Plan.of(cfg, 8, None, 1e-5, (DIM + 1) * CLASSES)
    shards = np.arange(clients * 8).reshape(clients, 8)
    theta, _ = fedavg.train_rounds(cfg, plan, shards, x, y, CLASSES, NoiseSource(seed, stream=fedavg.NOISE_STREAM),
                                   False, lambda *_: None)
    return theta, plan


def test_iadmm_global_model_is_fedavg_at_learning_rate_one_over_rho_draw_for_draw():
    """The duals sum to zero after every round, so IADMM's global model is FedAvg's with
    η = 1/ρ, the same Δ and the same noise (analysis.baselines.fedavg_privacy, "What the averaged model
    carries"): with the same noise draws the two runs end at the same model, and a different
    draw does not (float64 noise: on a grid the two messages round differently)."""
    theta_admm, plan_admm = _rounds("iadmm", 11)
    theta_avg, plan_avg = _rounds("fedavg", 11)
    assert plan_admm.sensitivity == plan_avg.sensitivity and plan_admm.scale == plan_avg.scale
    np.testing.assert_allclose(theta_admm, theta_avg, rtol=1e-4, atol=1e-5 * plan_avg.scale)
    assert np.abs(_rounds("fedavg", 12)[0] - theta_avg).max() > 0.1 * plan_avg.scale


def test_averaged_model_carries_the_noise_of_central_gd_at_mu_over_root_p():
    """P equal clients' Gaussian messages averaged: noise std σ/√P, which for the full-batch
    step of all N = P·I points (sensitivity 2Cη/N) is the noise of a central plan at
    `averaged_model_eps` (calibrated independently); the empirical mean of P noised zero
    messages has that law (KS), and not the law of one client's noise. No identity for
    Laplace or several local steps. Float64 noise (grid = 0) for the exact law; on the silos'
    grid (K = 50, messages of 39 700) the per-round μ̄ is the discrete Gaussian's, smaller."""
    base = dataclasses.replace(load_config(TINY).fedavg, mechanism="gaussian", eps=3.0, rounds=100,
                               learning_rate=3.0, clip_norm=1.0, local_steps=1, grid=0)
    clients, size, delta = 10, 6000, 1e-5
    plan = fedavg.Plan.of(base, size, None, delta, 50)
    central = fp.averaged_model_eps("gaussian", "fedavg", 1, plan.per_round, base.rounds, clients, delta)
    assert central == pytest.approx(0.835, abs=0.002)  # float64 noise: the figure before the grid
    silos = fedavg.Plan.of(dataclasses.replace(base, grid=50), size, None, delta, 3970 * clients)
    on_grid = fp.averaged_model_eps("gaussian", "fedavg", 1, silos.per_round, base.rounds, clients, delta)
    assert on_grid == pytest.approx(0.772, abs=0.002)  # the silos' figure quoted in the docs
    one = fedavg.Plan.of(dataclasses.replace(base, eps=central), clients * size, None, delta, 50)
    assert one.scale == pytest.approx(plan.scale / math.sqrt(clients), rel=3e-3)
    noise = fedavg.add_noise(np.zeros((clients, 20_000)), NoiseSource(8, stream=fedavg.NOISE_STREAM), "gaussian",
                             plan.scale).mean(axis=0)
    assert stats.kstest(noise, lambda v: stats.norm.cdf(v, scale=one.scale)).pvalue > 1e-3
    assert stats.kstest(noise, lambda v: stats.norm.cdf(v, scale=plan.scale)).pvalue < 1e-6
    assert fp.averaged_model_eps("gaussian", "iadmm", 3, plan.per_round, 100, clients, delta) == central
    assert fp.averaged_model_eps("gaussian", "fedavg", 1, plan.per_round, 100, 1, delta) == pytest.approx(3.0, rel=2e-3)
    assert fp.averaged_model_eps("laplace", "fedavg", 1, 0.01, 100, clients, delta) is None
    assert fp.averaged_model_eps("gaussian", "fedavg", 2, plan.per_round, 100, clients, delta) is None


# --------------------------------------------------------------------------- accounting


def _exact_pure_composition_eps(eps0, k, delta):
    """Plain loop: the optimal composition of k eps0-DP mechanisms (Kairouz, Oh, Viswanath
    2015: k-fold randomized response), ε at δ by bisection."""
    p = math.exp(eps0) / (1 + math.exp(eps0))

    def delta_of(eps):
        total = 0.0
        for i in range(k + 1):
            loss = (k - 2 * i) * eps0
            if loss > eps:
                w = gammaln(k + 1) - gammaln(i + 1) - gammaln(k - i + 1) + (k - i) * math.log(p) + i * math.log1p(-p)
                total += math.exp(w) * -math.expm1(eps - loss)
        return total

    lo, hi = 0.0, k * eps0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return hi


def _exact_gaussian_eps(mu, delta):
    """Plain loop: Balle & Wang 2018, Theorem 8, by bisection."""
    lo, hi = 0.0, 100.0
    for _ in range(200):
        eps = (lo + hi) / 2
        d = ndtr(-eps / mu + mu / 2) - math.exp(eps) * ndtr(-eps / mu - mu / 2)
        lo, hi = (eps, hi) if d > delta else (lo, eps)
    return hi


@pytest.mark.parametrize("eps0, rounds", [(1.0, 100), (0.1, 100), (0.3, 20)])
def test_laplace_rounds_compose_as_the_exact_optimal_composition(eps0, rounds):
    exact = _exact_pure_composition_eps(eps0, rounds, 1e-5)
    got = fp.total_eps("laplace", eps0, rounds, 1e-5)
    assert exact * (1 - 1e-6) <= got <= exact * 1.01 + 1e-3
    assert got > 3 * eps0 or rounds * eps0 < 3  # far above the per-round figure APPFL reports


def test_gaussian_rounds_and_calibration():
    got = fp.total_eps("gaussian", 0.2, 50, 1e-5)
    exact = _exact_gaussian_eps(0.2 * math.sqrt(50), 1e-5)
    assert exact * (1 - 1e-6) <= got <= exact * 1.01
    for mechanism in ("laplace", "gaussian"):
        x = fp.calibrate_per_round(mechanism, 2.0, 30, 1e-5)
        assert 1.9 < fp.total_eps(mechanism, x, 30, 1e-5) <= 2.0
        assert fp.total_eps(mechanism, x * 1.05, 30, 1e-5) > 2.0


@pytest.mark.parametrize("mechanism, cdf", [("laplace", stats.laplace.cdf), ("gaussian", stats.norm.cdf)])
def test_noise_has_the_calibrated_scale(mechanism, cdf):
    scale = fp.noise_scale(mechanism, 0.05, 0.2)
    assert scale == pytest.approx(0.25)
    noise = fedavg.add_noise(np.zeros((40, 250)), NoiseSource(7, stream=fedavg.NOISE_STREAM), mechanism, scale)
    assert noise.dtype == np.float64
    assert stats.kstest(noise.ravel(), lambda v: cdf(v, scale=scale)).pvalue > 1e-3
    assert stats.kstest(noise.ravel(), lambda v: cdf(v, scale=2 * scale)).pvalue < 1e-6


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def tiny_fedavg(tmp_path_factory):
    return baseline_run(tmp_path_factory, "fedavg", 2**127 + 123456789123456789)


def test_tiny_run_through_the_cli(tiny_fedavg, ledger_dir):
    workdir, output, seed = tiny_fedavg
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    for key in ("accuracy", "eps", "delta", "neighbouring_relation", "per_round_eps", "rounds", "clients",
                "sensitivity", "algorithm", "mechanism", "data_set"):
        assert key in info, key
    assert not [key for key in info if "time" in key]
    assert info["dp_event"]["event"]["class_name"] == "ComposedDpEvent"  # its own, for dp-accounting
    cfg = load_config(TINY)
    assert info["neighbouring_relation"] == "replace-one"
    assert info["clients"] == cfg.teachers.num_teachers  # the teachers' shards
    assert info["client_size"] == cfg.data.synthetic_train_size // cfg.teachers.num_teachers
    assert info["sensitivity"] == pytest.approx(2 * cfg.fedavg.clip_norm * cfg.fedavg.learning_rate
                                                / info["client_size"])
    assert 2.9 < info["release_eps"] <= info["target_eps"] == 3.0
    assert info["release_eps"] == pytest.approx(fp.total_eps("laplace", info["per_round_eps"], info["rounds"],
                                                             info["release_delta"]))
    assert info["per_round_eps"] < info["release_eps"] / 5  # what per-round accounting would publish
    # the default Laplace release is on the grid: Δ_grid = ⌊Δ/γ⌋ + d steps, t the least integer
    grid = info["grid"]
    assert grid["resolution"] == cfg.fedavg.grid == 100 and grid["message_length"] == info["num_params"]
    assert grid["sensitivity_steps"] == math.floor(info["sensitivity"] / grid["step"]) + info["num_params"]
    assert info["per_round_eps"] == grid["sensitivity_steps"] / grid["scale_steps"]
    assert info["noise_scale"] == grid["scale_steps"] * grid["step"]
    assert info["sensitivity"] / info["per_round_eps"] <= info["noise_scale"] <= \
        info["sensitivity"] / info["per_round_eps"] * 1.01 + grid["step"]
    assert info["noise"].startswith("exact discrete laplace on a grid") and "grid of" in output
    assert info["averaged_model_eps"] is None and "carries the noise" not in output  # Laplace: no identity
    assert "per round eps" in output and "APPFL" in output
    assert (workdir / rundir.FEDAVG_DIR).is_dir() and (workdir / rundir.CONFIG_TOML).exists()
    for path in workdir.rglob("*"):
        if path.is_file():
            assert str(seed) not in path.read_bytes().decode("latin-1"), path


def test_server_momentum_runs_fedavgm_at_the_same_charge(tiny_fedavg, tmp_path):
    """The tiny run again with server momentum 0.5: FedAvgM, charged exactly what the plain
    run was (the server step is post-processing of the released averages)."""
    plain = json.loads((tiny_fedavg[0] / rundir.FEDAVG_JSON).read_text())
    workdir = tmp_path / "run"
    result = invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 3,
                    "--set", "fedavg.server_momentum=0.5")
    assert result.exit_code == 0, result.output
    assert "server momentum 0.5" in result.output and "server momentum" not in tiny_fedavg[1]
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    assert info["release_eps"] == plain["release_eps"] and info["cost"] == plain["cost"]


def test_tiny_run_is_charged_to_the_ledger(tmp_path):
    workdir = tmp_path / "run"
    result = invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--algorithm", "iadmm",
                    "--mechanism", "gaussian", "--eps", "40", "--rounds", "30", "--clients", "2")
    assert result.exit_code == 0, result.output
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    assert info["algorithm"] == "iadmm" and info["mechanism"] == "gaussian" and info["clients"] == 2
    assert info["accuracy"] > 0.9  # little noise: the algorithm learns
    assert info["averaged_model_eps"] == pytest.approx(fp.averaged_model_eps(
        "gaussian", "iadmm", 1, info["per_round_mu"], 30, 2, info["release_delta"]))
    assert info["averaged_model_eps"] < info["release_eps"] and "carries the noise of one central" in result.output
    # the Gaussian messages too are released exactly on the grid (analysis.baselines.fedavg_privacy,
    # "Gaussian messages on a grid"): S₂ in grid steps², σ² = t(t − 1), μ̄² >= S₂/σ², zCDP rounds
    grid = info["grid"]
    assert info["noise"].startswith("exact discrete gaussian on a grid") and "not defended" not in result.output
    assert grid["sensitivity2_steps"] == fp.gaussian_grid_sensitivity(info["sensitivity"], grid["step"],
                                                                     grid["message_length"])
    t = round((1 + math.sqrt(1 + 4 * grid["sigma2_steps"])) / 2)
    assert grid["sigma2_steps"] == t * (t - 1) and info["noise_scale"] == math.sqrt(t * (t - 1)) * grid["step"]
    assert info["per_round_mu"] ** 2 >= grid["sensitivity2_steps"] / grid["sigma2_steps"]
    assert "discrete Gaussian" in info["accounting"] and "exact discrete Gaussian of sigma" in result.output
    assert 39.0 < info["release_eps"] <= 40.0
    entries = Ledger.for_config(load_config(TINY)).entries()
    assert [e["kind"] for e in entries] == ["fedavg"]
    assert entries[0]["cost"] == {"kind": "discrete-gaussian", "mu2": pytest.approx(30 * info["per_round_mu"] ** 2)}
    assert info["data_set"]["cumulative_eps"] == pytest.approx(info["release_eps"], rel=1e-6)
    # over the budget: refused before anything is written
    other = tmp_path / "other"
    line = one_line_error(invoke("fedavg", "--config", TINY, "--workdir", other, "--no-progress",
                                 "--set", "privacy.total_budget=30"), 1)
    assert "total_budget" in line and not (other / rundir.FEDAVG_JSON).exists()


def test_ledger_import_of_a_fedavg_run_charges_it_once(tiny_fedavg, ledger_dir):
    """`pate ledger --import` once refused a fedavg run; now it charges its model once, with
    the cost `pate fedavg` charges (from fedavg.json's public values)."""
    from pate.steps.ledger_import import import_run

    workdir, _, _ = tiny_fedavg
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    written = import_run(workdir, echo=lambda *_: None)
    assert [e["kind"] for e in written] == ["fedavg"]
    assert composition.Cost.from_json(written[0]["cost"]) == fp.round_cost("laplace", info["per_round_eps"],
                                                                            info["rounds"])
    assert import_run(workdir, echo=lambda *_: None) == []


def test_existing_result_needs_overwrite(tiny_fedavg):
    refused_without_overwrite("fedavg", tiny_fedavg[0], rundir.FEDAVG_JSON)


@pytest.mark.parametrize("args,code,needle", [
    *BAD_RELEASE_OPTIONS,
    (["--rounds", "0"], 2, "rounds"),
    (["--clients", "0"], 2, "clients"),
    (["--algorithm", "adam"], 2, "algorithm"),
    (["--mechanism", "exponential"], 2, "mechanism"),
    (["--set", "fedavg.clip_norm=0"], 1, "clip_norm"),
    (["--set", "fedavg.local_steps=0"], 1, "local_steps"),
    (["--set", "fedavg.grid=-1"], 1, "grid"),
    (["--set", "fedavg.server_momentum=1"], 1, "server_momentum"),
    (["--set", "fedavg.server_momentum=-0.1"], 1, "server_momentum"),
    (["--algorithm", "iadmm", "--set", "fedavg.server_momentum=0.5"], 1, "fedavg\" only"),
    (["--clients", "100000"], 1, "clients"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, code, needle):
    refused_before_writing("fedavg", tmp_path / "run", args, code, needle)


# --------------------------------------------------------------------------- the public projection


def test_public_projection_uses_the_pool_only_and_bounds_the_box():
    rng = np.random.default_rng(3)
    pool = rng.random((40, 12))
    proj = projection.public_projection(pool, 4)
    # principal directions of the pool: orthogonal, descending variance, mean l1 norm 1 on the pool
    v = proj["components"].astype(np.float64)
    scale = 1.0 / np.linalg.norm(v[0])
    assert v @ v.T == pytest.approx(np.eye(4) / scale ** 2, abs=1e-5)
    z = projection.project(proj, pool)
    assert np.mean(np.abs(z).sum(axis=1)) == pytest.approx(1.0, rel=1e-5)
    assert np.all(np.diff(z.var(axis=0)) <= 1e-6)
    # no private value enters: the same pool gives the same projection whatever else exists
    assert projection.public_projection(pool.copy(), 4)["components"] == pytest.approx(proj["components"])
    # projected_box is the exact max |z_i| over the box: attained at a corner, never exceeded
    box = projection.projected_box(proj, 0.0, 1.0)
    corners = np.array(list(itertools.product([0.0, 1.0], repeat=12)))
    reach = np.abs(projection.project(proj, corners)).max(axis=0)
    assert reach == pytest.approx(box, rel=1e-5)
    assert np.all(np.abs(projection.project(proj, rng.random((500, 12)))) <= box * (1 + 1e-6))
    with pytest.raises(PateError, match="fedavg.pca"):
        projection.public_projection(pool, 13)


def test_a_whitened_projection_gives_the_pool_unit_variance_along_the_same_directions():
    rng = np.random.default_rng(4)
    pool = rng.random((60, 12)) * np.linspace(0.1, 3.0, 12)
    plain, white = projection.public_projection(pool, 5), projection.public_projection(pool, 5, whiten=True)
    z = projection.project(white, pool).astype(np.float64)
    assert z.std(axis=0) == pytest.approx(np.ones(5), rel=1e-4) and z.mean(axis=0) == pytest.approx(0, abs=1e-5)
    # the same directions, rescaled: each whitened row is a multiple of the plain one
    for u, v in zip(plain["components"], white["components"]):
        assert abs(np.dot(u, v)) / (np.linalg.norm(u) * np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-5)
    assert projection.public_projection(pool.copy(), 5, whiten=True)["components"] == pytest.approx(white["components"])


def test_tiny_run_with_a_public_projection(tmp_path, ledger_dir):
    workdir = tmp_path / "run"
    result = invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--set", "fedavg.pca=5",
                    "--set", "fedavg.local_steps=2", "--set", "fedavg.grid=0")
    assert result.exit_code == 0, result.output
    info = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    # grid = 0: the float64 Laplace, said so
    assert info["grid"] is None and info["noise"].startswith("float64 laplace, not on a grid")
    assert info["noise_scale"] == pytest.approx(info["sensitivity"] / info["per_round_eps"])
    assert info["num_params"] == 6 * info["num_classes"] and "principal directions" in info["features"]
    from pate.store import checkpoints
    tree = checkpoints.restore_params(workdir / rundir.FEDAVG_DIR, None)
    proj = {k: np.asarray(v) for k, v in tree["projection"].items()}
    assert proj["components"].shape[0] == 5
    # the Lipschitz bound of K = 2 steps is the projected pixel box's (public), not the raw pixels'
    box = projection.projected_box(proj, 0.0, 1.0)
    assert info["lipschitz"] == pytest.approx(fp.linear_lipschitz(box.sum() + 1, max(box.max(), 1.0),
                                                                  math.sqrt(np.sum(box ** 2) + 1), "l1"))
    pixels = proj["components"].shape[1]
    assert info["lipschitz"] < fp.linear_lipschitz(pixels + 1, 1.0, math.sqrt(pixels + 1), "l1")


def test_fedavg_json_leads_with_what_the_data_set_has_spent(tmp_path):
    """fedavg.json led with the model's own eps; after an earlier release of the same data set
    its first key is now the data set's cumulative eps, larger than the model's own
    (``release_eps``, beside it), and the printed summary starts with it."""
    info = leads_with_the_data_set("fedavg", rundir.FEDAVG_JSON, tmp_path / "run")
    assert info["release_eps"] <= info["target_eps"]
