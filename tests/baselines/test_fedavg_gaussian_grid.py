"""`pate fedavg`'s Gaussian messages on the grid (analysis.baselines.fedavg_privacy, "Gaussian
messages on a grid"): the squared l2 sensitivity in grid steps, rounding included, against
brute force over small cases (the bound without the rounding term exceeded, the + d attained)
and over the real messages' replace-one neighbours; the grid's definitions in a plain loop;
the R rounds' ε against a plain-loop RDP conversion and a Monte-Carlo hockey stick with the
release's own sampler; the exact sampler at the variances the grid takes (σ² = t(t − 1), up to
σ ≈ 7.4e5); every released message on the grid with the discrete Gaussian's law; the refusal
beyond the sampler in one line."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from analysis.baselines import fedavg_privacy as fp
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource, discrete_gaussian_pmf
from analysis.mechanisms import fine_grained as fg
from pate.baselines import fedavg
from pate.store import rundir

from conftest import TINY, chi_square_pvalue, invoke, one_line_error
from test_fedavg import CLASSES, DIM, RHO, SIZE, C, ETA, _fedavg, _iadmm, _messages, _rounds


# --------------------------------------------------------------------------- sensitivity, brute force


def _rounding_brute_force(d: int, radius: float, lattice: int = 4) -> int:
    """max ‖round(a + x) − round(a)‖₂² (`fp.quantise`, step 1) over a in {0, 1/4, …, 7/4}^d (half
    integers included: rint rounds them to even) and x on the lattice (1/4)ℤ^d with ‖x‖₂ <= radius."""
    offsets = np.arange(2 * lattice) / lattice
    reach = math.floor(radius * lattice)
    steps = np.arange(-reach, reach + 1) / lattice
    xs = np.array([x for x in itertools.product(steps, repeat=d) if sum(v * v for v in x) <= radius**2])
    best = 0
    for a in itertools.product(offsets, repeat=d):
        a = np.array(a)
        v = fp.quantise(a + xs, 1.0) - fp.quantise(a[None], 1.0)
        best = max(best, int((v * v).sum(axis=1).max()))
    return best


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("radius", [0.5, 0.75, 1.0, 1.5, 2.25])
def test_rounding_adds_at_most_the_bound_and_the_plus_d_is_attained(d, radius):
    """S₂ = M + 2 min(M, ⌊√(dM)⌋) + d bounds every case; below one step (M = 0) every
    coordinate crosses a boundary and d is attained; ⌊D²⌋ alone (no rounding term) is always
    exceeded."""
    found = _rounding_brute_force(d, radius)
    bound = fp.gaussian_grid_sensitivity(radius, 1.0, d)
    assert found <= bound
    assert found > math.floor(radius**2)
    if radius < 1:
        assert found == bound == d


@pytest.mark.parametrize("message, sensitivity", [
    (_fedavg(1, "l2"), fp.fedavg_sensitivity(C, ETA, SIZE, 1, norm="l2")),
    (_iadmm("l2"), fp.iadmm_sensitivity(C, RHO, SIZE)),
])
@pytest.mark.parametrize("resolution", [1, 100])
def test_grid_sensitivity_bounds_the_real_messages_brute_force(message, sensitivity, resolution):
    """round(m/γ) of the clients' messages over replace-one neighbours (tests/baselines/test_fedavg.py's
    search): the squared l2 change in grid steps stays within S₂, is more than a quarter of it,
    and at K = 1 exceeds ⌊(Δ₂/γ)²⌋: the rounding term is needed."""
    d = (DIM + 1) * CLASSES
    step = fp.gaussian_grid_step(sensitivity, d, resolution)
    bound = fp.gaussian_grid_sensitivity(sensitivity, step, d)
    found = 0
    for out in _messages(message, 6):
        q = fp.quantise(out, step)
        diff = q[:, None, :] - q[None, :, :]
        found = max(found, int((diff * diff).sum(-1).max()))
    assert found <= bound
    assert found > bound / 4
    if resolution == 1:
        assert found > math.floor((sensitivity / step) ** 2)


def test_grid_definitions_in_a_plain_loop():
    """γ a power of two with D = Δ₂/γ in [K√d, 2K√d); S₂ from its formula; t the least integer
    with S₂/(t(t − 1)) <= μ̄²; the charge μ̄' >= √(S₂/σ²), <= μ̄; the noise at most (1 + 1/K) of the
    continuous mechanism's plus one step."""
    for sensitivity, length, k, mu in [(0.001, 39700, 50, 0.067), (0.5, 90, 100, 0.172), (3.0, 1, 1, 2.0),
                                       (0.25, 12, 7, 0.01), (0.0167, 7850, 100, 0.063)]:
        grid = fp.gaussian_grid_noise(sensitivity, length, k, mu)
        exponent = math.log2(grid.step)
        assert exponent == int(exponent)
        assert k * math.sqrt(length) <= sensitivity / grid.step < 2 * k * math.sqrt(length) * (1 + 1e-12)
        m = math.floor(Fraction(sensitivity / grid.step) ** 2)
        assert grid.sensitivity2 == m + 2 * min(m, math.isqrt(length * m)) + length
        t = grid.scale
        assert grid.sigma2 == t * (t - 1)
        assert Fraction(grid.sensitivity2, t * (t - 1)) <= Fraction(mu) ** 2
        assert t == 2 or Fraction(grid.sensitivity2, (t - 1) * (t - 2)) > Fraction(mu) ** 2
        assert Fraction(grid.per_round) ** 2 >= Fraction(grid.sensitivity2, grid.sigma2) and grid.per_round <= mu
        assert grid.noise_scale <= sensitivity / mu * (1 + 1 / k) + 2 * grid.step
        assert grid.cost(10).kind == "discrete-gaussian"
        assert Fraction(grid.cost(10).params["mu2"]) >= 10 * Fraction(grid.per_round) ** 2


def test_beyond_the_sampler_is_refused_naming_the_grid_that_fits():
    """The silos' messages at ε 1 over 100 rounds: K = 100 needs σ ≈ 1.4e6 steps; K = 84 (the
    same power-of-two step as 50) fits. A μ̄ that no grid serves names eps / rounds."""
    with pytest.raises(PateError, match="lower fedavg.grid to 84"):
        fp.gaussian_grid_noise(0.001, 39700, 100, 0.0247)
    assert fp.gaussian_grid_noise(0.001, 39700, 84, 0.0247).scale <= fp.MAX_GAUSSIAN_T
    with pytest.raises(PateError, match="raise fedavg.eps or lower fedavg.rounds"):
        fp.gaussian_grid_noise(0.001, 39700, 100, 1e-6)


def test_beyond_the_sampler_is_one_line_through_the_cli(tmp_path, ledger_dir):
    workdir = tmp_path / "run"
    line = one_line_error(invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress",
                                 "--mechanism", "gaussian", "--eps", "0.001", "--set", "fedavg.grid=100000"), 1)
    assert "fedavg.grid" in line and "sampler" in line
    assert not (workdir / rundir.FEDAVG_JSON).exists()


# --------------------------------------------------------------------------- accounting


def _plain_rdp_eps(mu2: float, delta: float) -> float:
    """Plain loop: min over a fine grid of orders of Balle et al. 2020 (Theorem 21)'s conversion
    of the RDP curve α μ²/2."""
    best = math.inf
    for i in range(1, 200_001):
        a = 1.0 + i / 1000.0
        eps = a * mu2 / 2.0 + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        best = min(best, eps)
    return max(best, 0.0)


@pytest.mark.parametrize("mu, rounds, delta", [(0.067, 100, 1e-5), (0.3, 20, 1e-6), (1.0, 3, 1e-3)])
def test_rounds_compose_as_the_plain_rdp_conversion(mu, rounds, delta):
    """R discrete-Gaussian rounds cost the RDP curve α R μ̄²/2 (CKS 2020, Proposition 5, added over
    rounds): the ledger's ε (its order grid) within 1 % above the plain loop's finer one, and
    never below it; calibrate_per_round(exact=True) meets ε within 1e-3."""
    plain = _plain_rdp_eps(rounds * mu * mu, delta)
    ours = fp.total_eps("gaussian", mu, rounds, delta, exact=True)
    assert plain * (1 - 1e-9) <= ours <= plain * 1.01
    assert ours >= fp.total_eps("gaussian", mu, rounds, delta)  # RDP never beats the exact GDP
    x = fp.calibrate_per_round("gaussian", 3.0, rounds, delta, exact=True)
    assert 3.0 * (1 - 1e-3) < fp.total_eps("gaussian", x, rounds, delta, exact=True) <= 3.0


def test_rounds_monte_carlo_delta_is_within_the_accounted_one():
    """Monte Carlo with the release's own sampler: R rounds of a d = 2 grid message whose rounded
    value moves by v = (2, 1) (‖v‖₂² = S₂ = 5) at σ² = 6. The loss of y ~ N_ℤ(0, σ²)^d against
    N_ℤ(v, σ²)^d is Σ((y − v)² − y²)/(2σ²) (equal normalisers at integer shifts); the hockey
    stick E[(1 − e^{ε − L})₊] at the published ε is at most δ (4 standard errors), and at a
    third of it more (the check can fail)."""
    sigma2, rounds, delta, n = 6, 5, 1e-2, 40_000
    shift = np.array([2, 1])
    eps = fp.total_eps("gaussian", math.sqrt(5 / sigma2), rounds, delta, exact=True)
    y = fg.discrete_gaussian_rational(NoiseSource(21), Fraction(sigma2), (n, rounds, 2))
    loss = (((y - shift) ** 2 - y**2) / (2 * sigma2)).sum(axis=(1, 2))
    for target, within in [(eps, True), (eps / 3, False)]:
        terms = np.maximum(0.0, 1.0 - np.exp(target - loss))
        estimate, error = terms.mean(), terms.std() / math.sqrt(n)
        assert (estimate <= delta + 4 * error) if within else (estimate > delta + 4 * error)


# --------------------------------------------------------------------------- the exact sampler and the release


@pytest.mark.parametrize("t", [5, 12])
def test_sampler_at_sigma2_t_times_t_minus_one_fits_its_pmf(t):
    """σ² = t(t − 1): the sampler's constant reduces to 2t(t − 1) (g = gcd(p, t) = t), and the
    law is the discrete Gaussian's (and not at 1.2 σ²)."""
    sigma2 = Fraction(t * (t - 1))
    assert fg._gaussian_denominator(sigma2) == 2 * t * (t - 1)
    z = fg.discrete_gaussian_rational(NoiseSource(30 + t), sigma2, 100_000)
    support = np.arange(-6 * t, 6 * t + 1)
    assert chi_square_pvalue(z, lambda y: discrete_gaussian_pmf(y, float(sigma2)), support) > 1e-3
    assert chi_square_pvalue(z, lambda y: discrete_gaussian_pmf(y, 1.2 * float(sigma2)), support) < 1e-6


def test_sampler_takes_the_largest_t_and_refuses_the_next():
    t = fp.MAX_GAUSSIAN_T
    assert 2 * t * (t - 1) <= 2**40 < 2 * (t + 1) * t
    z = fg.discrete_gaussian_rational(NoiseSource(40), Fraction(t * (t - 1)), 100_000)
    sigma = math.sqrt(t * (t - 1))
    assert abs(z.mean()) < 0.02 * sigma and abs(z.std() / sigma - 1) < 0.01
    with pytest.raises(PateError, match="too fine or too large"):
        fg.discrete_gaussian_rational(NoiseSource(40), Fraction((t + 1) * t), 10)


def test_released_values_lie_on_the_grid_with_the_discrete_gaussian_law():
    """add_noise with a Gaussian grid: every value an integer multiple of γ, float64, and
    value/γ − round(m/γ) fits N_ℤ(0, t(t − 1)) (and not 1.2 σ²)."""
    step, t = 2.0**-12, 9
    grid = fp.GaussianGrid(100, step, 1000, t, math.sqrt(1000 / (t * (t - 1))))
    messages = np.random.default_rng(6).normal(scale=0.3, size=(60, 500)).astype(np.float32)
    noisy = fedavg.add_noise(messages, NoiseSource(8, stream=fedavg.NOISE_STREAM), "gaussian", grid.noise_scale,
                             grid)
    assert noisy.dtype == np.float64
    units = noisy / step
    assert np.array_equal(units, np.rint(units))
    y = (units - fp.quantise(messages, step)).astype(np.int64).ravel()
    support = np.arange(-60, 61)
    assert chi_square_pvalue(y, lambda v: discrete_gaussian_pmf(v, grid.sigma2), support) > 1e-3
    assert chi_square_pvalue(y, lambda v: discrete_gaussian_pmf(v, 1.2 * grid.sigma2), support) < 1e-6


def test_every_message_of_a_run_is_released_on_the_grid(monkeypatch):
    """`train_rounds` with mechanism gaussian and a grid: every noised message the server
    receives is an integer multiple of the public step, each round."""
    seen = []
    real = fedavg.add_noise

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(fedavg, "add_noise", spy)
    theta, plan = _rounds("fedavg", 5, rounds=4, grid=100)
    assert isinstance(plan.grid, fp.GaussianGrid) and plan.cost.kind == "discrete-gaussian"
    assert len(seen) == 4 and np.all(np.isfinite(theta))
    for noisy in seen:
        units = noisy / plan.grid.step
        assert np.array_equal(units, np.rint(units))


def test_ledger_import_charges_the_discrete_gaussian_cost(tmp_path, monkeypatch):
    """`pate ledger --import` of a Gaussian run on the grid charges what `pate fedavg` charged
    (``discrete-gaussian``, RDP), not the float64 mechanism's cheaper ``gaussian`` cost."""
    from pate.config import load_config
    from pate.steps.ledger_import import import_run
    from pate.store.ledger import Ledger

    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "charged"))
    workdir = tmp_path / "run"
    result = invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--mechanism", "gaussian",
                    "--eps", "20", "--rounds", "5", "--seed", 3)
    assert result.exit_code == 0, result.output
    charged = Ledger.for_config(load_config(TINY)).entries()[0]["cost"]
    assert charged["kind"] == "discrete-gaussian"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "imported"))
    written = import_run(workdir, echo=lambda *_: None)
    assert [e["cost"] for e in written] == [charged]
