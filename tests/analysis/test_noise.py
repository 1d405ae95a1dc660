"""analysis.core.noise: where release randomness comes from, the float64 samplers, the exact
discrete samplers (goodness of fit against their pmf) and the proofs built on them."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

from analysis.sanitised import gnss
from analysis.sanitised import lnmax_release
from analysis.core.errors import PateError
from conftest import chi_square_pvalue
from analysis.core.noise import (
    KOLMOGOROV_BOUND,
    LABELS_STREAM,
    RELEASE_STREAM,
    NoiseSource,
    bernoulli_exp,
    bernoulli_exp_array,
    discrete_gaussian,
    discrete_gaussian_pmf,
    discrete_laplace,
    discrete_laplace_array,
    discrete_laplace_pmf,
    log_theta_ratio,
    randbelow_array,
    sampling_delta,
)


# --------------------------------------------------------------------------- sources


def test_seeded_streams_are_reproducible_and_disjoint():
    a = NoiseSource(7, LABELS_STREAM).uint64(4)
    assert np.array_equal(a, NoiseSource(7, LABELS_STREAM).uint64(4))
    assert not np.array_equal(a, NoiseSource(7, RELEASE_STREAM).uint64(4))
    assert not np.array_equal(NoiseSource().uint64(4), NoiseSource().uint64(4))


def test_randbelow_is_uniform_on_large_and_small_ranges():
    source = NoiseSource(1)
    small = [source.randbelow(6) for _ in range(6000)]
    assert stats.chisquare(np.bincount(small, minlength=6)).pvalue > 1e-3
    big = 3 * 2**100 + 17  # several words, rejection needed
    draws = np.array([source.randbelow(big) / big for _ in range(3000)])
    assert draws.max() < 1 and stats.kstest(draws, "uniform").pvalue > 1e-3


# --------------------------------------------------------------------------- float64 samplers


@pytest.mark.parametrize("kind", ["laplace", "normal"])
def test_float64_samplers_pass_ks_at_the_right_scale_and_fail_at_a_wrong_one(kind):
    x = getattr(NoiseSource(3), kind)((200, 100), 2.5)
    dist = "laplace" if kind == "laplace" else "norm"
    assert x.dtype == np.float64 and x.shape == (200, 100)
    assert stats.kstest(x.ravel(), dist, args=(0, 2.5)).pvalue > 1e-3
    assert stats.kstest(x.ravel(), dist, args=(0, 3.0)).pvalue < 1e-6


@pytest.mark.parametrize("kind", ["laplace", "normal"])
def test_float64_samplers_invert_the_cdf_on_the_grid(kind):
    """Plain loop: each sample is the inverse CDF at its grid point V = (2k+1) 2^-53 (up to
    float error), so the sampled law is within the stated Kolmogorov distance of the ideal."""
    source = NoiseSource(11)
    raw = NoiseSource(11).uint64(500)
    x = getattr(source, kind)(500)
    for r, value in zip(raw, x):
        r = int(r)
        v = (2 * (r >> 12) + 1) / 2.0**53
        sign = -1.0 if r & 1 else 1.0
        # The CDF of the magnitude at |x| equals 1 - V (Exp) or 1 - V (half-normal).
        magnitude_cdf = -math.expm1(-abs(value)) if kind == "laplace" else math.erf(abs(value) / math.sqrt(2))
        assert abs((1.0 - magnitude_cdf) - v) <= 1e-12 * v + 4 * 2.0**-53
        assert math.copysign(1.0, value) == sign or value == 0
    assert KOLMOGOROV_BOUND == 2.0**-50


def test_sampling_delta_matches_its_formula():
    for q, c, eps in [(1000, 11, 2.0), (1, 2, 0.1), (10_000, 151, 8.0)]:
        plain = (1 + math.exp(eps)) * q * c * c * 2.0**-50 / 2
        assert sampling_delta(q, c, eps) == pytest.approx(plain, rel=1e-12)
    assert sampling_delta(1000, 11, 2.0) < 1e-9
    # A probability: a huge eps (the tiny config's LNMax gave 1.45e25) or an infinite one gives 1.
    assert sampling_delta(100, 4, 60.0) == 1.0
    assert sampling_delta(100, 4, math.inf) == 1.0


# --------------------------------------------------------------------------- exact samplers


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_frequency(gamma):
    source = NoiseSource(2)
    n = 20_000
    hits = sum(bernoulli_exp(source, gamma) for _ in range(n))
    p = math.exp(-float(gamma))
    assert abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("scale", [0.4, 2.5, 37.3])
def test_discrete_laplace_fits_its_pmf(scale):
    source = NoiseSource(4)
    samples = [discrete_laplace(source, scale) for _ in range(8000)]
    reach = int(10 * scale) + 3
    support = np.arange(-reach, reach + 1)
    assert chi_square_pvalue(samples, lambda y: discrete_laplace_pmf(y, scale), support) > 1e-3
    # ... and a wrong scale is rejected.
    assert chi_square_pvalue(samples, lambda y: discrete_laplace_pmf(y, scale * 1.3), support) < 1e-3


@pytest.mark.parametrize("sigma2", [0.3, 4.0, 150.7])
def test_discrete_gaussian_fits_its_pmf(sigma2):
    source = NoiseSource(5)
    samples = [discrete_gaussian(source, sigma2) for _ in range(8000)]
    reach = int(8 * math.sqrt(sigma2)) + 3
    support = np.arange(-reach, reach + 1)
    assert chi_square_pvalue(samples, lambda y: discrete_gaussian_pmf(y, sigma2), support) > 1e-3
    assert chi_square_pvalue(samples, lambda y: discrete_gaussian_pmf(y, sigma2 * 1.6), support) < 1e-3


def test_exact_samplers_refuse_bad_parameters():
    with pytest.raises(PateError):
        discrete_laplace(NoiseSource(0), 0.0)
    with pytest.raises(PateError):
        discrete_gaussian(NoiseSource(0), float("inf"))


# --------------------------------------------------------------------------- the proofs, checked exactly


def _dlap(k, t):
    q = math.exp(-1.0 / t)
    return (1 - q) / (1 + q) * np.exp(-np.abs(k) / t)


@pytest.mark.parametrize("beta,delta,s_units,shift,up", [
    (0.09, 1e-5, 30.0, 30, True), (0.09, 1e-5, 30.0, -27, False), (0.2, 1e-3, 5.0, 5, True),
    (0.05, 1e-2, 200.0, -150, True), (0.3, 1e-4, 2.0, 1, False), (0.3, 1e-4, 1.0, 1, True),
])
def test_discrete_laplace_release_is_eps_delta_dp_on_worst_neighbours(beta, delta, s_units, shift, up):
    """The LNMax release's proof (lnmax_release.sanitized_eps): for neighbours with values Δ ≤ S̃ apart
    and scales e^{±β} apart, the exact hockey-stick divergence Σ max(0, P − e^ε Q) ≤ δ."""
    eps = lnmax_release.release_eps_cost(beta, delta)
    s_x = s_units
    s_y = s_units * math.exp(beta if up else -beta)
    assert abs(shift) <= min(s_x, s_y)  # |Δ| ≤ LS at both ends ≤ S̃ at both ends
    t_x, t_y = 2 * s_x / eps, 2 * s_y / eps
    reach = int(60 * max(t_x, t_y)) + abs(shift) + 10
    k = np.arange(-reach, reach + 1)
    for (tp, mp), (tq, mq) in [((t_x, 0), (t_y, shift)), ((t_y, shift), (t_x, 0))]:
        p = _dlap(k - mp, tp)
        q = _dlap(k - mq, tq)
        assert np.sum(np.maximum(0.0, p - math.exp(eps) * q)) <= delta


def test_release_cost_refuses_meaningless_beta_and_delta():
    with pytest.raises(PateError, match="--beta"):
        lnmax_release.release_eps_cost(1e308, 1e-5)
    with pytest.raises(PateError, match="delta"):
        lnmax_release.release_eps_cost(0.1, 0.99)  # beta > (e^beta - 1) ln(2/delta): dilation fails


def _log_dgauss(k, mu, s2):
    reach = int(60 * math.sqrt(s2)) + 60
    norm = special.logsumexp(-np.arange(-reach, reach + 1) ** 2 / (2 * s2))
    return -(k - mu) ** 2 / (2 * s2) - norm


@pytest.mark.parametrize("order,sigma_ss,beta", [(12.0, 0.6, 0.1 / 12), (4.0, 0.4, 0.05), (30.0, 1.0, 0.1 / 30)])
def test_discrete_gaussian_gnss_cost_covers_exact_renyi_divergence(order, sigma_ss, beta):
    """The GNSS cost with discrete Gaussians (rdp_gnss + gnss_discrete_correction) bounds the
    exact Rényi divergence, summed over the integers, of neighbouring releases at the smallest
    scale (S̃ = 1 grid step, where the correction is largest) and other smooth pairs."""
    bound = float(gnss.rdp_gnss([order], beta, sigma_ss)[0]) + gnss.gnss_discrete_correction(order, sigma_ss)
    worst = 0.0
    for s0_units in (1.0, 1.5, 3.0):
        for ratio in (math.exp(-beta), 1.0, math.exp(beta)):
            s1_units = s0_units * ratio
            if s1_units < 1.0:
                continue
            delta_max = int(min(s0_units, s1_units))
            for shift in range(-delta_max, delta_max + 1):
                s0, s1 = (sigma_ss * s0_units) ** 2, (sigma_ss * s1_units) ** 2
                reach = int(80 * math.sqrt(max(s0, s1))) + 80
                k = np.arange(-reach, reach + 1, dtype=float)
                log_terms = order * _log_dgauss(k, 0, s0) + (1 - order) * _log_dgauss(k, shift, s1)
                worst = max(worst, float(special.logsumexp(log_terms)) / (order - 1))
    assert worst <= bound + 1e-12
    assert gnss.gnss_discrete_correction(order, sigma_ss) > 0


def test_theta_ratio_matches_a_direct_sum():
    for s2 in (0.05, 0.3, 1.0, 10.0):
        reach = 2000
        direct = math.log(np.exp(-np.arange(-reach, reach + 1) ** 2 / (2 * s2)).sum() / math.sqrt(2 * math.pi * s2))
        assert log_theta_ratio(1 / s2) == pytest.approx(direct, rel=1e-9, abs=1e-15)


# --------------------------------------------------------------------------- exact samplers, vectorised


def test_randbelow_array_is_uniform_for_every_bound_in_one_call():
    source = NoiseSource(12)
    bounds = np.array([1, 2, 6, 7, 8, 9, 2**40 + 3])
    draws = randbelow_array(source, np.tile(bounds, (6000, 1)))
    assert draws.shape == (6000, bounds.size) and draws.dtype == np.int64
    assert np.all(draws >= 0) and np.all(draws < bounds)
    assert np.all(draws[:, 0] == 0)
    for j, n in enumerate(bounds[1:6], start=1):
        assert stats.chisquare(np.bincount(draws[:, j], minlength=n)).pvalue > 1e-3, n
    assert stats.kstest(draws[:, -1] / bounds[-1], "uniform").pvalue > 1e-3
    with pytest.raises(PateError):
        randbelow_array(source, [3, 0])


@pytest.mark.parametrize("u, t", [(0, 7), (1, 3), (5, 7), (7, 7), (123, 1000)])
def test_bernoulli_exp_array_frequency(u, t):
    n = 40_000
    hits = bernoulli_exp_array(NoiseSource(13), np.full(n, u), t).sum()
    p = math.exp(-u / t)
    assert abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("scale", [1, 3, 37, 5000])
def test_discrete_laplace_array_fits_its_pmf(scale):
    samples = discrete_laplace_array(NoiseSource(14), scale, (200, 300))
    assert samples.shape == (200, 300) and samples.dtype == np.int64
    support = np.arange(-(10 * scale + 3), 10 * scale + 4) if scale < 100 else None
    if support is None:  # a large scale: the pmf on bins of 1000 grid steps
        edges = np.arange(-40_500, 40_501, 1000)
        cdf = lambda y: _dlap_cdf(y, scale)  # noqa: E731
        expected = np.diff(cdf(edges - 0.5)) * samples.size
        observed = np.histogram(samples, edges - 0.5)[0]
        keep = expected > 5
        assert stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()
                               ).pvalue > 1e-3
        wrong = np.diff(_dlap_cdf(edges - 0.5, scale * 1.05)) * samples.size
        assert stats.chisquare(observed[keep], wrong[keep] * observed[keep].sum() / wrong[keep].sum()
                               ).pvalue < 1e-3
        return
    assert chi_square_pvalue(samples.ravel(), lambda y: discrete_laplace_pmf(y, scale), support) > 1e-3
    assert chi_square_pvalue(samples.ravel(), lambda y: discrete_laplace_pmf(y, scale * 1.1), support) < 1e-3


def _dlap_cdf(x, t):
    """P[Y <= x] of the discrete Laplace of scale t, for half-integer x (closed form)."""
    q = math.exp(-1.0 / t)
    x = np.floor(np.asarray(x, float))
    below = q ** (-x) / (1 + q)  # x < 0: Σ_{y <= x} c q^{-y} = q^{-x}/(1+q)
    above = 1 - q ** (x + 1) / (1 + q)
    return np.where(x < 0, below, above)


@pytest.mark.parametrize("scale", [2, 37])
def test_discrete_laplace_array_has_the_scalar_samplers_law(scale):
    """The two samplers against each other (two-sample chi-square on a contingency table)."""
    vector = discrete_laplace_array(NoiseSource(15), scale, 6000)
    scalar_source = NoiseSource(16)
    scalar = np.array([discrete_laplace(scalar_source, scale) for _ in range(3000)])
    edges = np.unique(np.quantile(np.concatenate([vector, scalar]), np.linspace(0, 1, 12)))
    edges[-1] += 1
    table = np.array([np.histogram(vector, edges)[0], np.histogram(scalar, edges)[0]])
    table = table[:, table.min(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > 1e-3
    shifted = np.array([np.histogram(vector, edges)[0], np.histogram(scalar + scale // 2 + 1, edges)[0]])
    shifted = shifted[:, shifted.min(axis=0) > 0]
    assert stats.chi2_contingency(shifted).pvalue < 1e-3  # the comparison can fail


def test_discrete_laplace_array_is_reproducible_with_a_seed_and_refuses_bad_scales():
    a = discrete_laplace_array(NoiseSource(17), 9, 50)
    assert np.array_equal(a, discrete_laplace_array(NoiseSource(17), 9, 50))
    assert not np.array_equal(a, discrete_laplace_array(NoiseSource(18), 9, 50))
    for bad in (0, 2.5, 2**41, True, -3):
        with pytest.raises(PateError, match="scale"):
            discrete_laplace_array(NoiseSource(0), bad, 3)
