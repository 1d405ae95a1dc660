"""analysis.core.shares and analysis.mechanisms.silos: n silos' exact noise shares sum to the central
discrete Laplace (chi-square passes at the right scale and fails at a wrong one), each share is the
negative binomial it claims, the secure sum's modulus never wraps but with its stated probability,
and fewer shares than planned are refused, their ε bounded."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource, bernoulli, bernoulli_exp, discrete_laplace_pmf
from analysis.core.shares import geometric_array, laplace_share, negative_binomial_array, negative_binomial_pmf
from analysis.mechanisms import fine_grained as fg
from analysis.mechanisms import silos


def chi_square_pvalue(samples, pmf) -> float:
    """Pearson's test of integer samples against a pmf on the integers (cells of expectation < 5
    pooled with the mass outside the observed range)."""
    samples = np.asarray(samples).ravel()
    low, high = int(samples.min()) - 5, int(samples.max()) + 5
    support = np.arange(low, high + 1)
    expected = pmf(support) * samples.size
    observed = np.bincount(samples - low, minlength=support.size).astype(float)
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], max(samples.size - expected[keep].sum(), 0.0))
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("parts", [2, 5, pytest.param(10, marks=pytest.mark.slow)])  # 10 parts: 6 s
def test_the_sum_of_the_shares_has_the_central_discrete_laplace_law(parts):
    scale = Fraction(5, 2)
    source = NoiseSource(seed=54 + parts)
    total = sum(laplace_share(source, scale, parts, 20_000) for _ in range(parts))
    assert chi_square_pvalue(total, lambda y: discrete_laplace_pmf(y, 2.5)) > 1e-3
    assert chi_square_pvalue(total, lambda y: discrete_laplace_pmf(y, 2.5 * 1.25)) < 1e-4  # a wrong scale fails
    assert chi_square_pvalue(total, lambda y: discrete_laplace_pmf(y, 2.5 / 1.25)) < 1e-4


def test_fewer_shares_than_planned_are_not_the_central_law():
    source = NoiseSource(seed=7)
    short = sum(laplace_share(source, 2, 5, 20_000) for _ in range(4))  # 4 of the 5 shares
    assert chi_square_pvalue(short, lambda y: discrete_laplace_pmf(y, 2.0)) < 1e-4


@pytest.mark.parametrize("r, scale", [(Fraction(1, 10), 2), (Fraction(1, 3), Fraction(7, 3)), (Fraction(1), 4)])
def test_a_share_is_the_negative_binomial_it_claims(r, scale):
    draws = negative_binomial_array(NoiseSource(seed=3), r, scale, 30_000)
    assert draws.min() >= 0
    assert chi_square_pvalue(draws, lambda y: negative_binomial_pmf(np.maximum(y, 0), r, scale) * (y >= 0)) > 1e-3
    wrong = min(1.0, float(r) * 1.4)
    other = scale * 1.4 if wrong == float(r) else scale
    assert chi_square_pvalue(draws, lambda y: negative_binomial_pmf(np.maximum(y, 0), wrong, other) * (y >= 0)) < 1e-4


def negative_binomial_loop(source, r: Fraction, scale: Fraction) -> int:
    """A second implementation, one value by plain loops: a geometric count of Bernoulli(e^{-1/b})
    heads (scalar exact coins), accepted by the rational coins (j + r)/(j + 1), else again."""
    while True:
        g = 0
        while bernoulli_exp(source, 1 / scale):
            g += 1
        if all(bernoulli(source, (j + r) / (j + 1)) for j in range(g)):
            return g


@pytest.mark.parametrize("r, scale", [(Fraction(1, 5), Fraction(3)), (Fraction(1, 2), Fraction(5, 4))])
def test_the_vectorised_share_has_the_plain_loops_law(r, scale):
    source = NoiseSource(seed=21)
    loop = np.array([negative_binomial_loop(source, r, scale) for _ in range(4000)])
    vectorised = negative_binomial_array(source, r, scale, 4000)
    top = int(max(loop.max(), vectorised.max())) + 1
    table = np.stack([np.bincount(loop, minlength=top), np.bincount(vectorised, minlength=top)])
    table = table[:, table.sum(axis=0) >= 10]
    assert stats.chi2_contingency(table).pvalue > 1e-3
    shifted = np.stack([np.bincount(loop + 1, minlength=top + 1), np.bincount(vectorised, minlength=top + 1)])
    shifted = shifted[:, shifted.sum(axis=0) >= 10]
    assert stats.chi2_contingency(shifted).pvalue < 1e-3  # the comparison can fail


def test_the_geometric_draw_has_ratio_exp_minus_one_over_the_scale():
    scale = Fraction(9, 4)
    draws = geometric_array(NoiseSource(seed=5), scale, 30_000)
    p = math.exp(-4 / 9)
    assert chi_square_pvalue(draws, lambda y: (1 - p) * p ** np.maximum(y, 0) * (y >= 0)) > 1e-3


def test_shares_are_reproducible_with_a_seed_and_refuse_bad_parameters():
    a = laplace_share(NoiseSource(seed=11), 3, 4, (5, 6))
    assert a.shape == (5, 6) and a.dtype == np.int64
    assert np.array_equal(a, laplace_share(NoiseSource(seed=11), 3, 4, (5, 6)))
    for bad in (0, -1, True, 2.5):
        with pytest.raises(PateError):
            laplace_share(NoiseSource(seed=1), 3, bad, 4)
    for scale in (0, -2, Fraction(2**41), float("nan")):
        with pytest.raises(PateError):
            laplace_share(NoiseSource(seed=1), scale, 2, 4)
    for r in (0, Fraction(3, 2), -1):
        with pytest.raises(PateError):
            negative_binomial_array(NoiseSource(seed=1), r, 2, 4)


# --------------------------------------------------------------------------- the modulus


def test_the_chernoff_tail_bounds_the_exact_negative_binomial_tail():
    for order in (0.1, 1.0, 2.5, 10.0):
        for scale in (1.5, 8.0, 40.0):
            p = math.exp(-1 / scale)
            for a in range(1, 2000, 7):
                exact = stats.nbinom.sf(a - 1, order, 1 - p)  # P[Y >= a]
                assert math.exp(silos.log_tail(a, order, scale)) >= exact * (1 - 1e-9), (order, scale, a)


def test_the_secure_sum_mod_the_modulus_decodes_to_the_true_total():
    source = NoiseSource(seed=2)
    noise = fg.laplace_noise(1.0, votes=2)  # scale 4
    num_silos, records_each, pool, classes = 5, 40, 30, 3
    rng = np.random.default_rng(0)
    histograms = []
    for _ in range(num_silos):
        neighbours = np.stack([rng.choice(pool, 2, replace=False) for _ in range(records_each)])
        histograms.append(fg.vote_histogram(neighbours, rng.integers(0, classes, records_each), pool, classes))
    modulus = silos.wrap_free_modulus(num_silos * records_each, noise, num_silos, pool * classes, failure=1e-6)
    assert modulus.modulus == num_silos * records_each + 2 * modulus.reach + 1 and modulus.failure <= 1e-6
    shares = [laplace_share(source, noise.parameter, num_silos, (20, pool, classes)) for _ in range(num_silos)]  # 20 draws
    inputs = [np.mod(h + z, modulus.modulus) for h, z in zip(histograms, shares)]  # what each silo sends
    residue = np.mod(sum(inputs), modulus.modulus)  # what the secure sum shows
    assert np.array_equal(silos.decode(residue, modulus), sum(histograms) + sum(shares))


def test_the_stated_failure_probability_holds_by_monte_carlo():
    noise = fg.Noise.laplace(3, votes=1)
    modulus = silos.wrap_free_modulus(10, noise, silos=4, cells=1, failure=0.05, needed=2)  # 4 shares of 1/2
    source = NoiseSource(seed=9)
    total = sum(laplace_share(source, 3, 2, 40_000) for _ in range(4))
    outside = np.mean(np.abs(total) > modulus.reach)
    assert outside <= modulus.failure <= 0.05
    assert modulus.reach <= 2 * np.quantile(np.abs(total), 0.95)  # the bound is not vacuous
    tighter = silos.wrap_free_modulus(10, noise, silos=4, cells=1, failure=0.05 / 1000, needed=2)
    looser = silos.wrap_free_modulus(10, noise, silos=4, cells=1, failure=0.05 / 1000, needed=4)
    assert tighter.reach > modulus.reach and looser.reach < tighter.reach  # more planned noise: a wider reach


def test_a_modulus_too_large_is_refused_in_one_line():
    noise = fg.laplace_noise(0.01, votes=10)
    with pytest.raises(PateError) as err:
        silos.wrap_free_modulus(2**32 - 10, noise, 10, 600_000)
    assert "\n" not in str(err.value) and "modulus" in str(err.value)
    assert silos.wrap_free_modulus(2**32 - 10, noise, 10, 600_000, max_modulus=2**40).modulus > 2**32
    for bad in ({"records": 0}, {"silos": 0}, {"cells": -1}, {"failure": 0}, {"failure": 1.5}, {"needed": 11}):
        args = {"records": 5, "noise": noise, "silos": 10, "cells": 4} | bad
        with pytest.raises(PateError):
            silos.wrap_free_modulus(**args)
    with pytest.raises(PateError):
        silos.wrap_free_modulus(5, fg.Noise.gaussian(4, votes=1), 3, 4)


# --------------------------------------------------------------------------- the trust model


def test_the_planned_shares_guarantee_the_central_eps_and_fewer_are_refused():
    noise = fg.laplace_noise(1.0, votes=3)
    assert silos.guaranteed_eps(noise, present=10, needed=10) == noise.eps() == 1.0
    assert silos.guaranteed_eps(noise, present=12, needed=10) == 1.0
    silos.check_shares_present(10, 10)
    silos.check_shares_present(11, 10)
    with pytest.raises(PateError) as err:
        silos.check_shares_present(9, 10)
    assert "\n" not in str(err.value) and "9 of the 10" in str(err.value)
    eps = [silos.guaranteed_eps(noise, m, 10) for m in range(10, 0, -1)]
    assert eps == sorted(eps) and eps[-1] == pytest.approx(1.0 + 6 * math.log(10))
    assert silos.guaranteed_eps(noise, 5, 10) == pytest.approx(1.0 + 6 * math.log(2))
    assert silos.guaranteed_eps(noise, 0, 10) == math.inf
    assert silos.share_order(10) == Fraction(1, 10) and silos.share_order(10, 7) == Fraction(1, 7)


@pytest.mark.parametrize("present, needed, scale", [(1, 2, 2.0), (3, 10, 4.0), (1, 10, 1.5), (9, 10, 3.0)])
def test_fewer_shares_leak_no_more_than_the_smaller_discrete_laplace(present, needed, scale):
    """The exact pmf of D = Y − Y', Y, Y' ~ NB(present/needed, p): every unit shift's log ratio is
    at most 1/b + ln(needed/present), the bound guaranteed_eps charges per unit of Δ₁."""
    s, p = present / needed, math.exp(-1 / scale)
    ys = np.arange(0, 4000)
    nb = stats.nbinom.pmf(ys, s, 1 - p)
    xs = np.arange(0, 40)
    pmf = np.array([np.dot(nb[x:], nb[: nb.size - x]) for x in xs])  # P[D = x], x >= 0 (symmetric)
    worst = np.max(np.abs(np.diff(np.log(pmf))))
    bound = 1 / scale + math.log(needed / present)
    assert worst <= bound + 1e-12
    noise = fg.Noise.laplace(Fraction(scale), votes=1)
    assert silos.guaranteed_eps(noise, present, needed) == pytest.approx(2 * bound)


def test_a_power_of_two_modulus_decodes_the_same_window_and_each_share_stays_in_its_reach():
    noise = fg.laplace_noise(1.0, votes=1)  # scale 2
    exact = silos.wrap_free_modulus(100, noise, 3, 50, failure=1e-3)
    flower = silos.wrap_free_modulus(100, noise, 3, 50, failure=1e-3, power_of_two=True)
    assert flower.modulus == 1 << (exact.modulus - 1).bit_length() >= exact.modulus and flower.reach == exact.reach
    totals = np.arange(-exact.reach, 100 + exact.reach + 1)
    assert np.array_equal(silos.decode(np.mod(totals, flower.modulus), flower), totals)
    assert np.array_equal(silos.decode(np.mod(totals, exact.modulus), exact), totals)
    one = silos.share_reach(noise, silos=3, cells=50, failure=0.05)
    source = NoiseSource(seed=12)
    draws = np.stack([laplace_share(source, noise.parameter, 3, (400, 50)) for _ in range(3)], axis=1)
    outside = np.mean(np.abs(draws).max(axis=(1, 2)) > one.reach)  # P[some share of some silo leaves the reach]
    assert outside <= one.failure <= 0.05
    assert one.reach < exact.reach
