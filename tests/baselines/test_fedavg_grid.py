"""`pate fedavg`'s grid release (analysis.baselines.fedavg_privacy, "Messages on a grid"): the
sensitivity in grid steps against the brute-force search of tests/baselines/test_fedavg.py (a
halved bound, and one without the rounding term, exceeded), the grid's definitions in a
plain loop, the round's pure ε in a plain loop over ℤ², the δ of R rounds by Monte Carlo
with the release's own sampler, dp-accounting's discrete-Laplace parametrisation, and
the released noise against the discrete Laplace pmf."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.baselines import fedavg_privacy as fp
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from pate.baselines import fedavg

from test_fedavg import CLASSES, DIM, RHO, SIZE, C, ETA, _fedavg, _iadmm, _max_change


@pytest.mark.parametrize("algorithm", ["fedavg", "iadmm"])
@pytest.mark.parametrize("resolution", [1, 100])
def test_grid_sensitivity_is_the_brute_force_maximum_with_rounding(algorithm, resolution):
    """round(m/γ) on the public grid: the search stays within Δ_grid = ⌊Δ/γ⌋ + d grid steps,
    exceeds half of it (a halved Δ_grid fails), and at a coarse grid (K = 1) exceeds
    ⌊Δ/γ⌋: the + d for rounding is needed, not slack."""
    d = (DIM + 1) * CLASSES
    if algorithm == "fedavg":
        message, bound = _fedavg(1, "l1"), fp.fedavg_sensitivity(C, ETA, SIZE, 1)
    else:
        message, bound = _iadmm("l1"), fp.iadmm_sensitivity(C, RHO, SIZE)
    step = fp.grid_step(bound, d, resolution)
    units = fp.grid_sensitivity(bound, step, d)
    assert units == math.floor(bound / step) + d
    found = _max_change(message, "l1", step=step)
    assert found == int(found) and found <= units
    assert found > units / 2
    if resolution == 1:
        assert found > math.floor(bound / step)


def test_grid_step_is_a_power_of_two_and_t_the_least_integer():
    """Plain loop over the definitions (analysis.baselines.fedavg_privacy, "Messages on a grid")."""
    for sensitivity, length, k, eps in [(0.5, 90, 100, 0.172), (0.0167, 7850, 100, 0.063), (3.0, 1, 1, 2.0),
                                        (0.25, 12, 7, 0.01)]:
        grid = fp.grid_noise(sensitivity, length, k, eps)
        exponent = math.log2(grid.step)
        assert exponent == int(exponent)
        assert k * length <= sensitivity / grid.step < 2 * k * length
        assert grid.sensitivity == math.floor(sensitivity / grid.step) + length
        assert grid.sensitivity / grid.scale <= eps
        assert grid.scale == 1 or grid.sensitivity / (grid.scale - 1) > eps  # the least such integer
        assert grid.per_round == grid.sensitivity / grid.scale
        # the grid costs at most a factor 1 + 1/K of noise (+ the integer rounding of t)
        assert grid.noise_scale <= sensitivity / eps * (1 + 1 / k) + grid.step
    rng = np.random.default_rng(5)
    m = rng.normal(scale=3.0, size=(4, 50)).astype(np.float32)
    q = fp.quantise(m, 2.0**-10)
    assert q.dtype == np.int64 and np.array_equal(q, [[round(float(v) * 1024) for v in row] for row in m])
    assert fp.quantise(np.array([1e300, -1e300]), 1.0).tolist() == [2**52, -2**52]
    with pytest.raises(PateError, match="fedavg.grid"):
        fp.grid_noise(1.0, 10, 100, 1e-12)


def _log_dlap(k, t):
    q = math.exp(-1.0 / t)
    return math.log((1 - q) / (1 + q)) - np.abs(k) / t


def test_grid_round_is_pure_dp_at_sensitivity_over_t():
    """Plain loop over ℤ² (a window): for every integer shift v with ‖v‖₁ <= Δ_grid, the
    largest log p(k)/p(k − v) of the product discrete Laplace is ‖v‖₁/t <= Δ_grid/t, attained."""
    t, units = 3, 4
    k = np.arange(-40, 41)
    k1, k2 = np.meshgrid(k, k, indexing="ij")
    for v1 in range(-units, units + 1):
        for v2 in range(-(units - abs(v1)), units - abs(v1) + 1):
            loss = (_log_dlap(k1, t) + _log_dlap(k2, t) - _log_dlap(k1 - v1, t) - _log_dlap(k2 - v2, t)).max()
            assert loss == pytest.approx((abs(v1) + abs(v2)) / t, abs=1e-12)
    assert units / t == max(abs(a) + abs(b) for a in range(-units, units + 1) for b in range(-units, units + 1)
                            if abs(a) + abs(b) <= units) / t


@pytest.mark.parametrize("shift", [(4, 0, 0), (2, -1, 1)])
def test_grid_rounds_monte_carlo_delta_is_within_the_accounted_one(shift):
    """Monte Carlo with the release's own sampler: R rounds of a d = 3 grid message whose
    rounded value moves by `shift` (‖·‖₁ = Δ_grid = 4) at t = 3. The hockey-stick
    divergence E_P[(1 − e^{ε − L})₊] at the ε that `fp.total_eps` publishes is at most its δ
    (up to 4 standard errors), and at a fraction of that ε it is more (the check can fail)."""
    from analysis.core.noise import discrete_laplace_array

    t, rounds, delta, n = 3, 5, 1e-2, 40_000
    units = sum(abs(v) for v in shift)
    eps = fp.total_eps("laplace", units / t, rounds, delta)
    y = discrete_laplace_array(NoiseSource(21), t, (n, rounds, len(shift)))
    v = np.array(shift)
    loss = ((np.abs(y - v) - np.abs(y)) / t).sum(axis=(1, 2))  # log p(y)/q(y), y drawn from p
    for target, expect_within in [(eps, True), (0.5 * eps, False)]:
        terms = np.maximum(0.0, 1.0 - np.exp(target - loss))
        estimate, error = terms.mean(), terms.std() / math.sqrt(n)
        if expect_within:
            assert estimate <= delta + 4 * error
        else:
            assert estimate > delta + 4 * error


def test_discrete_laplace_pld_parametrisation_and_our_composition_is_conservative():
    """dp-accounting's `from_discrete_laplace_mechanism(parameter, sensitivity)` is the pmf
    ∝ exp(−parameter·|y|) (parameter = 1/t) shifted by `sensitivity`: its ε at δ = 0 is
    Δ_grid/t, the per-round ε̄ charged. Composed over R rounds as the scalar discrete
    Laplace it is a little tighter than the pure-DP composition the ledger charges, which
    holds for any ε̄-DP round (analysis.baselines.fedavg_privacy: the d-dimensional dominance it
    would need is not claimed)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    for units, t, rounds in [(4, 3, 5), (30, 200, 20)]:
        one = pld.from_discrete_laplace_mechanism(1.0 / t, sensitivity=units)
        assert one.get_epsilon_for_delta(0.0) == pytest.approx(units / t, abs=2e-4)
        ours = fp.total_eps("laplace", units / t, rounds, 1e-5)
        assert one.self_compose(rounds).get_epsilon_for_delta(1e-5) <= ours * (1 + 1e-6)


@pytest.mark.parametrize("scale_steps", [3, 40])
def test_grid_noise_is_exact_discrete_laplace_on_the_grid(scale_steps):
    """add_noise with a grid: every released value is an integer multiple of γ, and
    value/γ − round(m/γ) fits the discrete Laplace pmf of scale t (and not of 1.2 t)."""
    from analysis.core.noise import discrete_laplace_pmf
    from conftest import chi_square_pvalue

    step = 2.0**-12
    grid = fp.GridNoise(100, step, 1000, scale_steps, 1000 / scale_steps)
    rng = np.random.default_rng(6)
    messages = rng.normal(scale=0.3, size=(60, 500)).astype(np.float32)
    noisy = fedavg.add_noise(messages, NoiseSource(8, stream=fedavg.NOISE_STREAM), "laplace", grid.noise_scale, grid)
    assert noisy.dtype == np.float64
    units = noisy / step
    assert np.array_equal(units, np.rint(units))
    y = (units - fp.quantise(messages, step)).astype(np.int64).ravel()
    bins = np.arange(-10 * scale_steps, 10 * scale_steps + 1)
    assert chi_square_pvalue(y, lambda v: discrete_laplace_pmf(v, scale_steps), bins) > 1e-3
    assert chi_square_pvalue(y, lambda v: discrete_laplace_pmf(v, 1.2 * scale_steps), bins) < 1e-3
