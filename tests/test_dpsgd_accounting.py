"""DP-SGD accounting: the dp_accounting event against a plain-loop RDP of the
Poisson-subsampled Gaussian, calibration, the PLD accountant, and a Monte-Carlo
estimate of the privacy curve below the accountant's bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

from analysis.errors import PateError
from pate import dpsgd_accounting as acc

INT_ORDERS = list(range(2, 129))


def loop_rdp(q: float, sigma: float, order: int) -> float:
    """RDP of one Poisson-subsampled Gaussian step at an integer order, by the binomial
    expansion of Mironov, Talwar & Zhang (2019), Sec. 3.3:
    A = sum_k C(a, k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 sigma^2)), RDP = log A / (a - 1).
    Summed in log space term by term."""
    logs = []
    for k in range(order + 1):
        log_term = (math.lgamma(order + 1) - math.lgamma(k + 1) - math.lgamma(order - k + 1)
                    + (order - k) * math.log1p(-q) + (k * math.log(q) if k else 0.0)
                    + (k * k - k) / (2 * sigma**2))
        logs.append(log_term)
    top = max(logs)
    log_a = top + math.log(sum(math.exp(t - top) for t in logs))
    return log_a / (order - 1)


def loop_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """eps from the loop RDP composed over `steps` at integer orders, converted with the
    improved bound (Canonne, Kamath & Steinke 2020, Prop. 12):
    eps = rdp + log(1 - 1/a) - (log delta + log a) / (a - 1), minimised over a."""
    best = math.inf
    for a in INT_ORDERS:
        r = steps * loop_rdp(q, sigma, a)
        best = min(best, r + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return max(best, 0.0)


CASES = [(q, s, t) for q, s, t in zip(
    np.random.default_rng(0).uniform(0.001, 0.3, 6),
    np.random.default_rng(1).uniform(0.7, 4.0, 6),
    np.random.default_rng(2).integers(1, 3000, 6))]


@pytest.mark.parametrize("q,sigma,steps", CASES)
def test_event_matches_the_plain_loop_rdp(q, sigma, steps):
    accountant = dp_rdp.RdpAccountant(orders=INT_ORDERS)
    accountant.compose(acc.dp_event(sigma, q, int(steps)))
    eps = accountant.get_epsilon(1e-5)
    assert eps == pytest.approx(loop_epsilon(q, sigma, int(steps), 1e-5), rel=1e-6)
    # the default accountant searches more (fractional) orders: never worse
    assert acc.epsilon(sigma, q, int(steps), 1e-5) <= eps * (1 + 1e-9)


@pytest.mark.parametrize("target", [1.0, 2.0, 3.0])
def test_calibration_meets_the_target_and_is_tight(target):
    q, steps, delta = 2048 / 60000, 600, 1e-5
    sigma = acc.calibrate_noise(target, delta, q, steps)
    assert acc.epsilon(sigma, q, steps, delta) <= target
    assert acc.epsilon(sigma * 0.995, q, steps, delta) > target  # not much more noise than needed
    # an independent computation (integer orders only, so a little looser) agrees
    assert loop_epsilon(q, sigma, steps, delta) == pytest.approx(target, rel=0.03)


def test_pld_is_tighter_and_calibrates_less_noise():
    q, steps, delta = 0.05, 200, 1e-5
    eps_rdp = acc.epsilon(1.2, q, steps, delta, "rdp")
    eps_pld = acc.epsilon(1.2, q, steps, delta, "pld")
    assert 0.6 * eps_rdp < eps_pld <= eps_rdp
    sigma_pld = acc.calibrate_noise(2.0, delta, q, steps, "pld")
    assert acc.epsilon(sigma_pld, q, steps, delta, "pld") <= 2.0
    assert acc.epsilon(sigma_pld * 0.99, q, steps, delta, "pld") > 2.0
    assert sigma_pld < acc.calibrate_noise(2.0, delta, q, steps, "rdp")


def test_monte_carlo_privacy_curve_lies_below_the_bound():
    """delta(eps) = E_P[(1 - e^(eps - L))_+] of T composed subsampled Gaussians, estimated
    by sampling the privacy loss L; the accountant's (eps, delta) must not claim less."""
    q, sigma, steps = 0.2, 1.0, 10
    rng = np.random.default_rng(0)
    n = 400_000

    def loss(x):  # log P/Q, P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2)
        return np.log1p(q * np.expm1((2 * x - 1) / (2 * sigma**2)))

    # add one example: samples from P
    draws = rng.normal(0.0, sigma, (n, steps)) + (rng.random((n, steps)) < q)
    total = loss(draws).sum(axis=1)
    for eps0 in (1.0, 2.0):
        delta_mc = np.mean(np.maximum(0.0, 1.0 - np.exp(eps0 - total)))
        se = np.std(np.maximum(0.0, 1.0 - np.exp(eps0 - total))) / math.sqrt(n)
        delta_low = max(delta_mc - 4 * se, 1e-12)
        # at a delta the true curve exceeds, eps must be at least eps0
        assert acc.epsilon(sigma, q, steps, delta_low) >= eps0 * 0.999


@pytest.mark.parametrize("kwargs,match", [
    (dict(target_eps=0.0), "eps"), (dict(target_eps=-1.0), "eps"),
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(sampling_rate=0.0), "sampling rate"), (dict(steps=0), "steps"),
])
def test_bad_arguments(kwargs, match):
    args = dict(target_eps=1.0, delta=1e-5, sampling_rate=0.01, steps=10)
    args.update(kwargs)
    with pytest.raises(PateError, match=match):
        acc.calibrate_noise(**args)
