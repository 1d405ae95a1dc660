"""analysis.accounting.pld: the PLD (dp-accounting) data-independent ε against the project's RDP
curves, against exact second implementations (plain loops), and the dominating pairs
against Monte-Carlo estimates of the mechanisms themselves."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, stats

from analysis.bounds import gnmax
from analysis.bounds import lnmax
from analysis.accounting import pld
from analysis.core.errors import PateError
from analysis.accounting.rdp import DEFAULT_ORDERS


def test_issue_figures():
    """1000 GNMax answers, σ = 100, δ = 1e-5: classic 2.2478, improved 1.9165, PLD 1.7601."""
    classic = gnmax.data_independent_eps(1000, 100, 1e-5, conversion="classic").eps
    improved = gnmax.data_independent_eps(1000, 100, 1e-5, conversion="improved").eps
    tight = pld.gnmax_eps(1000, 100, 1e-5).eps
    assert (round(classic, 4), round(improved, 4), round(tight, 4)) == (2.2478, 1.9165, 1.7601)


# ------------------------------------------------------------------ second implementations


def hockey_stick_gaussian(mu, eps):
    """δ(ε) = ∫ max(0, p(x) − e^ε q(x)) dx for P = N(μ, 1), Q = N(0, 1): a plain integral."""
    def f(x):
        return max(0.0, stats.norm.pdf(x, loc=mu) - math.exp(eps) * stats.norm.pdf(x))
    # The integrand is positive exactly for x > ε/μ + μ/2.
    start = eps / mu + mu / 2
    return integrate.quad(f, start, start + 40.0, epsabs=1e-14, limit=200)[0]


def hockey_stick_gaussian_closed(mu, eps):
    """The same divergence in closed form (Balle & Wang 2018, Theorem 8), with scipy.stats."""
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def eps_of(delta_fn, delta):
    if delta_fn(0.0) <= delta:
        return 0.0
    hi = 1.0
    while delta_fn(hi) > delta:
        hi *= 2
    return optimize.brentq(lambda e: delta_fn(e) - delta, 0.0, hi, xtol=1e-10)


def hockey_stick_rr(n, eps0, eps):
    """Exact δ(ε) of n composed ε0-DP binary randomized responses, a plain loop over the
    number k of flipped answers: loss (n − 2k)ε0, Pr = C(n,k) p^{n−k}(1−p)^k."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    total = 0.0
    for k in range(n + 1):
        loss = (n - 2 * k) * eps0
        if loss > eps:
            log_pk = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                      + (n - k) * math.log(p) + k * math.log1p(-p))
            total += math.exp(log_pk) * -math.expm1(eps - loss)
    return total


# ------------------------------------------------------------------ GNMax and Confident-GNMax


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 3000), sigma=st.floats(5.0, 300.0), logdelta=st.floats(-9.0, -3.0))
def test_gnmax_pld_below_rdp_and_at_the_exact_value(n, sigma, logdelta):
    delta = 10.0**logdelta
    got = pld.gnmax_eps(n, sigma, delta).eps
    classic = gnmax.data_independent_eps(n, sigma, delta, conversion="classic").eps
    improved = gnmax.data_independent_eps(n, sigma, delta, conversion="improved").eps
    assert got <= improved + 1e-9 and got <= classic + 1e-9
    # n answers at σ are one Gaussian with μ = √(2n)/σ (Dong, Roth, Su 2022): exact ε by
    # a plain integral; the PLD rounds pessimistically, so lies just above.
    mu = math.sqrt(2 * n) / sigma
    exact = eps_of(lambda e: hockey_stick_gaussian_closed(mu, e), delta)
    assert exact - 1e-6 <= got <= exact + 2e-3
    assert hockey_stick_gaussian(mu, got) <= delta * (1 + 1e-6)
    assert got == pytest.approx(pld.gaussian_eps_exact(mu, delta), abs=2e-3)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 2000), sigma=st.floats(5.0, 200.0), ratio=st.floats(0.5, 6.0),
       frac=st.floats(0.0, 1.0), logdelta=st.floats(-8.0, -4.0))
def test_confident_pld_mirrors_the_rdp_composition(n, sigma, ratio, frac, logdelta):
    delta = 10.0**logdelta
    a = int(frac * n)
    s1 = ratio * sigma
    got = pld.gnmax_eps(n, sigma, delta, sigma_threshold=s1, num_answered=a)
    assert got.mechanism == "confident-gnmax" and got.num_answered == a
    for conversion in ("classic", "improved"):
        rdp_eps = gnmax.data_independent_eps(n, sigma, delta, sigma_threshold=s1, num_answered=a,
                                             conversion=conversion).eps
        assert got.eps <= rdp_eps + 1e-9
    # N threshold steps + A answers: μ² = N/σ₁² + 2A/σ₂².
    mu = math.sqrt(n / s1**2 + 2 * a / sigma**2)
    exact = eps_of(lambda e: hockey_stick_gaussian_closed(mu, e), delta)
    assert exact - 1e-6 <= got.eps <= exact + 3e-3
    assert hockey_stick_gaussian(mu, got.eps) <= delta * (1 + 1e-6)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5000), sigma=st.floats(1.0, 300.0), logdelta=st.floats(-10.0, -2.0),
       s1=st.one_of(st.none(), st.floats(1.0, 500.0)))
def test_rdp_accountant_of_the_events_is_the_improved_conversion(n, sigma, logdelta, s1):
    """dp-accounting's RDP accountant over the same events equals the project's
    `improved` conversion of its own RDP curve (same orders)."""
    from dp_accounting import rdp as dpa_rdp

    delta = 10.0**logdelta
    accountant = dpa_rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(pld.gaussian_events(n, sigma, sigma_threshold=s1))
    ours = gnmax.data_independent_eps(n, sigma, delta, sigma_threshold=s1, conversion="improved")
    assert accountant.get_epsilon(delta) == pytest.approx(ours.eps, rel=1e-9, abs=1e-12)


def test_gnmax_dominating_pair_against_monte_carlo():
    """One GNMax answer on neighbouring vote sets: the Monte-Carlo hockey-stick
    divergence of the output labels lies below the Gaussian(σ/√2) pair's."""
    rng = np.random.default_rng(0)
    sigma, samples = 1.5, 400_000
    d = np.array([3.0, 2.0, 1.0])
    d2 = np.array([2.0, 3.0, 1.0])  # one teacher moved from class 0 to class 1
    def label_freq(v):
        out = np.argmax(v + sigma * rng.standard_normal((samples, 3)), axis=1)
        return np.bincount(out, minlength=3) / samples
    p, q = label_freq(d), label_freq(d2)
    mu = math.sqrt(2) / sigma
    for eps in (0.0, 0.2, 0.5):
        mech = np.maximum(p - math.exp(eps) * q, 0).sum()
        bound = hockey_stick_gaussian(mu, eps)
        assert mech <= bound + 4 * math.sqrt(0.25 / samples) * (1 + math.exp(eps))


# ------------------------------------------------------------------ LNMax


@pytest.mark.parametrize("n,gamma,delta", [(1, 0.05, 1e-5), (100, 0.05, 1e-5), (40, 0.2, 1e-6),
                                           (500, 0.02, 1e-5), (7, 1.0, 1e-3)])
def test_lnmax_pld_is_the_exact_optimal_composition_and_below_moments(n, gamma, delta):
    got = pld.lnmax_eps(n, gamma, delta).eps
    exact = eps_of(lambda e: hockey_stick_rr(n, 2 * gamma, e), delta)
    assert exact - 1e-6 <= got <= exact + 2e-3 * max(1.0, n * 2e-3)
    assert got <= lnmax.data_independent_eps(n, gamma, delta).eps + 1e-9
    assert got <= 2 * gamma * n + 1e-3  # basic composition


def test_lnmax_known_value():
    """100 answers, γ = 0.05, δ = 1e-5: moments accountant 5.303, PLD 4.307."""
    assert round(lnmax.data_independent_eps(100, 0.05, 1e-5).eps, 3) == 5.303
    assert round(pld.lnmax_eps(100, 0.05, 1e-5).eps, 3) == 4.307


def test_lnmax_dominating_pair_against_monte_carlo():
    """One LNMax answer on neighbouring vote sets: the Monte-Carlo hockey-stick
    divergence lies below that of the 2γ binary randomized response."""
    rng = np.random.default_rng(1)
    gamma, samples = 0.5, 400_000
    d = np.array([3.0, 2.0, 2.0])
    d2 = np.array([2.0, 3.0, 2.0])
    def label_freq(v):
        out = np.argmax(v + rng.laplace(scale=1 / gamma, size=(samples, 3)), axis=1)
        return np.bincount(out, minlength=3) / samples
    p, q = label_freq(d), label_freq(d2)
    for eps in (0.0, 0.3, 0.8):
        mech = np.maximum(p - math.exp(eps) * q, 0).sum()
        assert mech <= hockey_stick_rr(1, 2 * gamma, eps) + 4 * math.sqrt(0.25 / samples) * (1 + math.exp(eps))


# ------------------------------------------------------------------ API


def test_zero_queries_and_bad_input():
    """The per-mechanism functions take the record's numbers (no name dispatch here: a
    mechanism name is parsed once, by `analysis.mechanisms.registry`)."""
    from analysis.mechanisms import registry

    assert pld.gnmax_eps(0, 10, 1e-5).eps == 0.0
    assert pld.lnmax_eps(0, 0.1, 1e-5).eps == 0.0
    assert pld.lnmax_eps(10, 0.1, 1e-5).mechanism == "lnmax"
    bad = [lambda: pld.gnmax_eps(10, -1, 1e-5), lambda: pld.gnmax_eps(10, float("nan"), 1e-5),
           lambda: pld.gnmax_eps(10, 1, 0), lambda: pld.gnmax_eps(-1, 1, 1e-5), lambda: pld.gnmax_eps(1.5, 1, 1e-5),
           lambda: pld.gnmax_eps(10, 1, 1e-5, sigma_threshold=1, num_answered=11),
           lambda: registry.record_type("bogus")]
    for call in bad:
        with pytest.raises(PateError):
            call()
