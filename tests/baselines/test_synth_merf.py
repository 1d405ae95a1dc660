"""`pate synth --method merf` (DP-MERF): the release's privacy at proof standard — unit-norm
features held to the integer bound B, the replace-one sensitivity 2B by brute force over
every neighbour of small data sets, the discrete Gaussian noise law by Monte Carlo (a wrong
scale is told apart), the RDP bound and the calibration against plain loops — and the
command on the tiny config through the CLI (one shared run)."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from analysis.mechanisms import composition
from analysis.baselines import merf
from analysis.core.noise import NoiseSource, discrete_gaussian_pmf
from analysis.accounting.rdp import DEFAULT_ORDERS
from conftest import TINY, check_synthetic_release, invoke, spied_synth
from pate.store import rundir
from pate.baselines import merf_generator as synth_merf
from pate.config import load_config
from pate.store.ledger import Ledger
from pate.baselines import dp_merf as merf_step

SHAPE, CLASSES = (2, 2, 1), 3


def _spec(features: int = 6, length_scale: float = 0.5) -> synth_merf.MerfSpec:
    return synth_merf.MerfSpec(SHAPE, CLASSES, features, length_scale, latent_dim=4, generator_hidden=(8,),
                               batch_size=12)


# --------------------------------------------------------------------------- features and their bound


def test_features_have_unit_norm_and_rows_stay_within_the_bound():
    rng = np.random.default_rng(0)
    spec = _spec(features=40)
    phi = np.asarray(synth_merf.features(rng.random((50, *SHAPE)).astype(np.float32),
                                         synth_merf.frequencies(spec)), np.float64)
    assert np.allclose(np.linalg.norm(phi, axis=1), 1.0, atol=1e-6)
    bound = merf.row_bound(40)
    assert bound == merf.GRID + 7  # G + ceil(sqrt(40))
    rows = merf.quantise_rows(phi)
    assert all(int(r @ r) <= bound**2 for r in rows)  # exact integers
    assert np.abs(rows - phi * merf.GRID).max() <= 0.5
    # A floating-point anomaly cannot break the bound: norms far above 1, NaN, infinities.
    bad = np.vstack([np.full(40, 1.0), phi[0] * 1.5, np.full(40, np.nan), np.full(40, np.inf)])
    held = merf.quantise_rows(bad)
    assert all(int(r @ r) <= bound**2 for r in held) and held.dtype == np.int64


def test_frequencies_and_length_scale_are_public():
    """ω depends on the spec (config seed, D, shape, ℓ) alone; ℓ on the public images given."""
    a, b = synth_merf.frequencies(_spec()), synth_merf.frequencies(_spec())
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(synth_merf.frequencies(_spec(length_scale=0.7))))
    pool = np.stack([np.zeros(SHAPE), np.ones(SHAPE), np.full(SHAPE, 0.5)]).astype(np.float32)
    assert synth_merf.median_length_scale(pool) == pytest.approx(1.0)  # distances 2, 1, 1


# --------------------------------------------------------------------------- sensitivity by brute force


def _norm2(a: np.ndarray) -> int:
    return sum(int(v) * int(v) for v in a.ravel())  # exact, Python integers


def test_replace_one_sensitivity_by_brute_force():
    """Every replace-one neighbour of small data sets (each position, each candidate point
    and class): ‖S − S'‖₂ ≤ 2B, the bound is reached within 30 % and exceeds B (so a
    sensitivity of 1/n instead of 2/n would be wrong). The sums are the pipeline's own
    (`pate.baselines.merf_generator.private_sum`)."""
    spec = _spec(features=6, length_scale=0.35)
    omega = synth_merf.frequencies(spec)
    rng = np.random.default_rng(1)
    candidates = np.concatenate([rng.random((10, *SHAPE)), np.zeros((1, *SHAPE)), np.ones((1, *SHAPE))])
    bound = merf.sensitivity(spec.num_features)
    worst = 0
    for trial in range(3):
        pick = rng.choice(len(candidates), 4, replace=False)
        x, y = candidates[pick].astype(np.float32), rng.integers(0, CLASSES, 4)
        base = synth_merf.private_sum(x, y, omega, CLASSES)
        for i, j, c in itertools.product(range(4), range(len(candidates)), range(CLASSES)):
            x2, y2 = x.copy(), y.copy()
            x2[i], y2[i] = candidates[j], c
            worst = max(worst, _norm2(base - synth_merf.private_sum(x2, y2, omega, CLASSES)))
    assert worst <= bound**2
    assert worst > (bound // 2) ** 2 and worst > (0.7 * bound) ** 2


# --------------------------------------------------------------------------- the noise


def test_noise_law_by_monte_carlo():
    """S̃ − S follows N_ℤ(0, s²): a chi-square test against the pmf passes at s = 3 and fails
    at s = 1/3 · 9 (σ²), 6 (2σ) and 1.5 (σ/2, e.g. sensitivity 1/n)."""
    draws = 8_000
    noise = merf.noisy_sum(np.full(draws, 5, np.int64), Fraction(9), NoiseSource(3, stream=merf_step.NOISE_STREAM))
    noise = noise - 5
    edges = np.arange(-12, 13)
    observed = np.array([np.sum(noise <= edges[0])] + [np.sum(noise == k) for k in edges[1:-1]]
                        + [np.sum(noise >= edges[-1])])

    def pvalue(sigma2):
        pmf = discrete_gaussian_pmf(np.arange(-400, 401), sigma2)
        ks = np.arange(-400, 401)
        probs = np.array([pmf[ks <= edges[0]].sum()] + [pmf[ks == k].sum() for k in edges[1:-1]]
                         + [pmf[ks >= edges[-1]].sum()])
        keep = probs * draws >= 5
        expected = probs[keep] / probs[keep].sum() * observed[keep].sum()
        return stats.chisquare(observed[keep], expected).pvalue

    assert pvalue(9.0) > 1e-4
    for wrong in (1.0 / 9.0, 81.0, 36.0, 2.25):
        assert pvalue(wrong) < 1e-12, wrong


def test_noise_scale_at_the_real_sensitivity():
    """At the release's own variance (m · 2B)², the sample standard deviation is m · 2B,
    not m · B (sensitivity 1/n) nor 2 m · 2B."""
    m, d = 0.53, 64
    variance = merf.noise_variance(m, d)
    assert variance == (Fraction(m) * 2 * merf.row_bound(d)) ** 2
    draws = merf.noisy_sum(np.zeros(3000, np.int64), variance, NoiseSource(4, stream=merf_step.NOISE_STREAM))
    scale = math.sqrt(float(variance))
    assert abs(np.std(draws) / scale - 1.0) < 0.05
    assert abs(np.mean(draws)) / scale < 0.1


# --------------------------------------------------------------------------- accounting


def _log_sum_exp(values) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _renyi_plain(shift: int, s2: float, alpha: float) -> float:
    """D_α(N_ℤ(shift, s²) ‖ N_ℤ(0, s²)) summed term by term over the integers (in logs)."""
    reach = int(40 * math.sqrt(s2)) + abs(shift) + 40
    ks = range(-reach, reach + 1)
    log_p = [-((k - shift) ** 2) / (2 * s2) for k in ks]
    log_q = [-(k**2) / (2 * s2) for k in ks]
    zp, zq = _log_sum_exp(log_p), _log_sum_exp(log_q)
    terms = [alpha * (a - zp) + (1 - alpha) * (b - zq) for a, b in zip(log_p, log_q)]
    return _log_sum_exp(terms) / (alpha - 1)


@pytest.mark.parametrize("shift, s2", [(1, 0.3), (2, 1.0), (3, 4.0), (1, 0.1)])
def test_discrete_gaussian_renyi_bound_against_a_plain_sum(shift, s2):
    """The bound the release's RDP rests on: D_α ≤ α Δ²/(2s²) for integer Δ (CKS 2020,
    Proposition 5), checked at small s where the discrete law differs most from the
    continuous one; coordinates add, so a vector shift's divergence is the sum."""
    for alpha in (1.5, 2.0, 5.0, 20.0):
        exact = _renyi_plain(shift, s2, alpha)
        assert exact <= alpha * shift**2 / (2 * s2) * (1 + 1e-12) + 1e-12, (alpha, exact)
    # Two coordinates (shifts 1 and 2): the product's divergence, summed over the 2-D grid.
    s2, alpha = 0.5, 3.0
    ks = range(-25, 26)
    log_z = _log_sum_exp([-(k**2) / (2 * s2) for k in ks])
    terms = [alpha * (-((a - 1) ** 2) - (b - 2) ** 2) / (2 * s2) + (1 - alpha) * (-(a**2) - b**2) / (2 * s2)
             - 2 * log_z for a, b in itertools.product(ks, ks)]
    joint = _log_sum_exp(terms) / (alpha - 1)
    assert joint == pytest.approx(_renyi_plain(1, s2, alpha) + _renyi_plain(2, s2, alpha), rel=1e-9)
    assert joint <= alpha * 5 / (2 * s2)


def _eps_plain(multiplier: float, delta: float) -> float:
    """ε of one release at m: RDP α/(2m²) converted order by order (Balle et al. 2020,
    Theorem 21) in a loop over the project's orders, the smallest kept."""
    best = math.inf
    for alpha in DEFAULT_ORDERS:
        rho = alpha / (2 * multiplier**2)
        eps = rho + math.log((alpha - 1) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)
        best = min(best, max(eps, 0.0))
    return best


@pytest.mark.parametrize("eps", [0.3, 1.0, 10.0])
def test_calibration_against_a_plain_loop(eps):
    delta = 1e-5
    m = merf.calibrate_multiplier(eps, delta)
    assert _eps_plain(m, delta) <= eps + 1e-9  # sound
    assert _eps_plain(m / 1.001, delta) > eps  # the least noise that fits
    cost = merf.cost(m)
    assert cost.kind == "discrete-gaussian" and cost.params["mu2"] == pytest.approx(1 / m**2, rel=1e-12)
    assert composition.pld(cost) is None  # RDP only: no continuous PLD claimed for discrete noise
    assert merf.release_eps(m, delta) == pytest.approx(_eps_plain(m, delta), rel=1e-9)
    gaussian = composition.Cost("gaussian", {"mu2": 1 / m**2})
    assert composition.single_eps(gaussian, delta) <= merf.release_eps(m, delta)


def test_the_ledger_composes_the_discrete_gaussian_by_rdp_only():
    """With a GNMax label release (μ² = 0.5): the RDP route adds the curves (μ² summed), the
    PLD route takes the discrete cost as its own ε at a share of δ; the record round-trips."""
    delta, m = 1e-5, 4.0
    labels = composition.Cost("gaussian", {"mu2": 0.5})
    total = composition.compose([merf.cost(m), labels], delta)
    assert total.routes["rdp"] == pytest.approx(_rdp_eps(0.5 + 1 / m**2, delta), rel=1e-9)
    assert total.routes["pld"] >= merf.release_eps(m, delta / 2) - 1e-12
    assert composition.Cost.from_json(merf.cost(m).to_json()) == merf.cost(m)
    assert composition.compose([merf.cost(m)], delta).eps == pytest.approx(merf.release_eps(m, delta))


def _rdp_eps(mu2: float, delta: float) -> float:
    return _eps_plain(1 / math.sqrt(mu2), delta)


@pytest.mark.slow  # 8.5 s of Adam steps; the release's privacy tests stay fast
def test_the_generator_learns_the_target_embedding():
    """Post-processing works: the tiny config's generator (the CLI run's spec and step count,
    so the compiled step is shared), trained on the noise-free embedding of the tiny data,
    gets several times closer to it."""
    from pate.data import load_dataset, split
    from pate.baselines.synthetic_scores import public_scale

    config = load_config(TINY)
    splits = split(load_dataset(config.data), config.data.public_size)
    scale = synth_merf.median_length_scale(public_scale(splits.pool_x))
    gen = synth_merf.MerfGenerator(synth_merf.MerfSpec.of(config.synth, (8, 8, 1), 4, scale))
    total = synth_merf.private_sum(public_scale(splits.train_x), splits.train_y, gen.omega, 4)
    target = merf.embedding(total, splits.train_x.shape[0])
    before = gen.distance(target)
    gen.train(target, config.synth.merf_steps)
    assert gen.distance(target) < before / 3


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def tiny_merf(tmp_path_factory):
    """`pate synth` (default method: DP-MERF) on the tiny config through the CLI, with spies
    on the private sum, the noisy release, the generator's target and the length-scale."""
    workdir = tmp_path_factory.mktemp("merf") / "run"
    ledger = tmp_path_factory.mktemp("merf-ledger")
    seen = {"sums": [], "released": [], "targets": [], "pools": []}
    real_sum, real_noisy, real_train = synth_merf.private_sum, merf.noisy_sum, synth_merf.MerfGenerator.train
    real_scale = synth_merf.median_length_scale

    def private_sum(*args, **kwargs):
        seen["sums"].append(real_sum(*args, **kwargs))
        return seen["sums"][-1]

    def noisy_sum(total, variance, source):
        seen["released"].append((np.array(total), variance, real_noisy(total, variance, source)))
        return seen["released"][-1][2]

    def train(self, target, steps, on_step=None):
        seen["targets"].append(np.array(target))
        return real_train(self, target, steps, on_step)

    def scale(x, *args):
        seen["pools"].append(np.asarray(x).shape)
        return real_scale(x, *args)

    seed = 2**127 + 123456789123456789
    result = spied_synth(workdir, ledger, seed, [
        (synth_merf, "private_sum", private_sum), (merf, "noisy_sum", noisy_sum),
        (synth_merf.MerfGenerator, "train", train), (synth_merf, "median_length_scale", scale)])
    return workdir, ledger, result.output, seed, seen


def test_tiny_run_through_the_cli(tiny_merf):
    workdir, ledger, output, seed, _ = tiny_merf
    cfg = load_config(TINY)
    info = json.loads((workdir / rundir.SYNTH_JSON).read_text())
    m = merf.calibrate_multiplier(cfg.synth.eps, cfg.privacy.delta)
    assert info["method"] == "merf" and info["neighbouring_relation"] == "replace-one"
    assert info["mechanism"]["noise_multiplier"] == pytest.approx(m)
    assert 0.99 * cfg.synth.eps < info["release_eps"] <= cfg.synth.eps and info["release_delta"] == cfg.privacy.delta
    assert info["sampling_delta"] == 0.0 and info["features"] == cfg.synth.merf_features
    tstr = info["train_on_synthetic_test_on_real"]
    assert 0 <= tstr["logistic_regression"] <= 1 and 0 <= tstr["cnn"] <= 1
    assert info["research_seed"] is True and not [k for k in info if "time" in k]
    entries = check_synthetic_release(workdir, ledger, seed, cfg.synth.samples)
    labels = rundir.read_npz(workdir / rundir.SYNTHETIC_NPZ, ("labels",))["labels"]
    assert np.bincount(labels).tolist() == [cfg.synth.samples // 4] * 4  # balanced, public
    assert entries[0]["cost"] == {"kind": "discrete-gaussian", "mu2": pytest.approx(1 / m**2)}
    assert "synth eps" in output and "DP-MERF" in output


def test_one_noisy_release_is_all_the_generator_sees(tiny_merf):
    """The private sum is computed once, noised once at (m · 2B)², and the generator's target
    is exactly that release divided by n G; the length-scale comes from the public pool."""
    workdir, _, _, _, seen = tiny_merf
    cfg = load_config(TINY)
    m = merf.calibrate_multiplier(cfg.synth.eps, cfg.privacy.delta)
    assert len(seen["sums"]) == len(seen["released"]) == len(seen["targets"]) == 1
    total, variance, released = seen["released"][0]
    assert np.array_equal(total, seen["sums"][0]) and total.dtype == np.int64
    assert total.shape == (cfg.synth.merf_features, 4)
    assert variance == merf.noise_variance(m, cfg.synth.merf_features)
    assert not np.array_equal(released, total)
    n = cfg.data.synthetic_train_size
    assert np.array_equal(seen["targets"][0], released / (n * merf.GRID))
    assert seen["pools"] == [(cfg.data.public_size, 8, 8, 1)]
    stored = b"".join(p.read_bytes() for p in workdir.rglob("*") if p.is_file())
    assert total.tobytes() not in stored and released.tobytes() not in stored


def test_bad_options_and_config_are_one_line_errors(tmp_path):
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "r", "--method", "vae")
    assert result.exit_code == 2 and "--method" in result.output
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "r", "--set", "synth.merf_features=7")
    assert result.exit_code == 1 and "synth.merf_features" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r" / rundir.SYNTH_JSON).exists()


@pytest.mark.slow
def test_dp_merf_learns_on_real_fashion_mnist(tmp_path):
    """A short DP-MERF run at eps 1 on the real data (400 generator steps, 2000 samples, 3
    evaluation epochs; the full config scores 0.75 in docs/results.md): far above chance (0.1)."""
    from analysis.core.errors import PateError
    from pate.config import DataConfig
    from pate.data import load_dataset

    try:
        load_dataset(DataConfig(name="fashion_mnist"))
    except PateError as err:
        pytest.skip(f"Fashion-MNIST not installed: {err}")
    config = TINY.parent / "fashion_mnist.toml"
    result = invoke("synth", "--config", config, "--workdir", tmp_path / "run", "--no-progress", "--eps", "1",
                    "--set", "synth.merf_steps=400", "--set", "synth.samples=2000", "--set", "synth.eval_epochs=3")
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / rundir.SYNTH_JSON).read_text())
    assert info["method"] == "merf" and info["release_eps"] <= 1.0
    assert info["train_on_synthetic_test_on_real"]["logistic_regression"] > 0.5


@pytest.mark.slow
def test_killed_synth_overwrite_keeps_the_old_release(tiny_merf, tmp_path):
    """SIGKILL while `pate synth --overwrite` writes its staging folder: the previous synthetic
    release stays whole (the swap never started), and the next command on the run leaves no
    trace of the killed one. (A kill after the ledger's charge over-counts, never under-counts.)"""
    import os
    import shutil
    import signal

    from conftest import ROOT, sigkill_while_staged, snapshot

    workdir, ledger, *_ = tiny_merf
    run = tmp_path / "run"
    shutil.copytree(workdir, run)
    before = {k: v for k, v in snapshot(run).items() if k.split("/")[0] in rundir.SYNTH_ARTIFACTS}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATE_LEDGER_DIR": str(tmp_path / "ledgers")}
    staged, code = sigkill_while_staged(["synth", "--config", TINY, "--workdir", run, "--no-progress", "--overwrite"],
                                        run, "synth", env)
    assert staged and code == -signal.SIGKILL  # killed while writing, not finished or refused
    after = {k: v for k, v in snapshot(run).items() if k.split("/")[0] in rundir.SYNTH_ARTIFACTS}
    assert after == before  # the old release is whole
    r = invoke("synth", "--config", TINY, "--workdir", run, "--no-progress")  # refused: one exists
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert sorted(n for n in os.listdir(run) if n.startswith((".new-", ".old-")) or n.endswith(".tmp")) == []


def test_a_diverged_generator_releases_nothing_and_is_charged_nothing(tmp_path, monkeypatch):
    """NaN samples would become black uint8 pixels that look like a release: `pate synth`
    refuses them in one line, writes no synthetic data and charges nothing."""
    from pate.baselines.synthetic_scores import released_pixels

    assert released_pixels(np.array([[0.2, 1.5, -1.0]]), "x").tolist() == [[51, 255, 0]]
    with pytest.raises(Exception, match="the generator diverged"):
        released_pixels(np.array([0.5, np.nan]), "merf_learning_rate")
    real_sample = synth_merf.MerfGenerator.sample

    def diverged(self, n):
        images, labels = real_sample(self, n)
        return np.full_like(images, np.nan), labels

    monkeypatch.setattr(synth_merf.MerfGenerator, "sample", diverged)
    ledger = tmp_path / "ledger"
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress",
                    "--set", f"privacy.ledger={json.dumps(str(ledger))}")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("synth:")]
    assert len(lines) == 1 and "lower synth.merf_learning_rate" in lines[0], result.output
    assert not (tmp_path / "run" / rundir.SYNTHETIC_NPZ).exists() and not (tmp_path / "run" / rundir.SYNTH_JSON).exists()
    assert Ledger.for_config(load_config(TINY, {"privacy.ledger": str(ledger)})).entries() == []
