"""`analysis.mechanisms.skellam`: the Skellam mechanism's RDP bound against the exact Rényi divergence
(scipy's Skellam pmf summed; in small dimensions by brute force over every integer shift vector of
given l1/l2 norms), composition and calibration round trips, the quantisation's norm bounds by
brute force, the shares' sum against the Skellam pmf (χ²: n shares pass, n − 1 fail), a total with
a share missing refused, and the wrap-free modulus."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from analysis.accounting import rdp as rdp_mod
from analysis.accounting.skellam_rdp import rdp as skellam_rdp
from analysis.mechanisms import quantised_sum as qs
from analysis.mechanisms import skellam as sk
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import composition

ORDERS = (1.5, 2.0, 3.0, 5.0, 8.0, 20.0)


def exact_divergence(shift: int, mu: float, order: float) -> float:
    """D_α(Sk(μ) + v ‖ Sk(μ)), summed from scipy's pmf over a window holding all but ~1e-30 of it."""
    if shift == 0:
        return 0.0
    width = int(60 * math.sqrt(2 * mu) + 40 * abs(shift) + 200)
    k = np.arange(-width, width + 1)
    log_p = stats.skellam.logpmf(k - shift, mu, mu)
    log_q = stats.skellam.logpmf(k, mu, mu)
    ok = np.isfinite(log_p) & np.isfinite(log_q)  # scipy's pmf underflows far out: terms below 1e-300
    return float(logsumexp(order * log_p[ok] + (1 - order) * log_q[ok])) / (order - 1)


@pytest.mark.parametrize("mu", [3.0, 20.0, 200.0])
def test_the_bound_dominates_the_exact_divergence_in_one_dimension(mu):
    for shift, order in itertools.product((1, 2, 5), ORDERS):
        exact = exact_divergence(shift, mu, order)
        bound = float(skellam_rdp([order], abs(shift), shift * shift, mu)[0])
        assert exact <= bound * (1 + 1e-9), (shift, order, exact, bound)
        if mu >= 200 and float(order).is_integer():  # not absurdly loose where the noise is wide
            assert bound <= 1.2 * exact + 1e-3, (shift, order, exact, bound)


def test_the_bound_dominates_every_integer_shift_vector_of_given_norms():
    """Brute force in 3 dimensions: every v ∈ ℤ³ with ‖v‖₂² <= L2SQ and ‖v‖₁ <= L1; the divergence of the
    product law is the sum over coordinates."""
    mu, r = 4.0, 4
    table = np.array([[exact_divergence(v, mu, a) for v in range(-r, r + 1)] for a in ORDERS])  # (orders, shifts)
    vectors = np.array(list(itertools.product(range(-r, r + 1), repeat=3)))
    per_order = table[:, vectors + r].sum(axis=2)  # (orders, vectors): the divergence of the product law
    for l2sq, l1 in ((4, 2), (8, 4), (9, 5), (16, 6)):
        inside = ((vectors ** 2).sum(axis=1) <= l2sq) & (np.abs(vectors).sum(axis=1) <= l1)
        for i, order in enumerate(ORDERS):
            worst = per_order[i, inside].max()
            bound = float(skellam_rdp([order], l1, l2sq, mu)[0])
            assert worst <= bound * (1 + 1e-9), (l2sq, l1, order, worst, bound)
            assert bound <= 3 * worst + 0.5  # the l1 term's slack at small mu, not an order of magnitude


def test_non_integer_orders_are_charged_at_the_next_integer():
    assert np.array_equal(skellam_rdp([2.5, 3.0], 4, 8, 10.0), skellam_rdp([3.0, 3.0], 4, 8, 10.0))
    with pytest.raises(PateError):
        skellam_rdp([1.0], 4, 8, 10.0)


def test_rounds_compose_and_the_calibration_round_trips():
    l1, l2sq, rounds, delta = 120, 400, 50, 1e-5
    cost = sk.cost(100.0, l1, l2sq, rounds)
    orders = rdp_mod.DEFAULT_ORDERS
    assert np.allclose(composition.rdp(cost, orders), rounds * skellam_rdp(orders, l1, l2sq, 100.0))
    by_hand = float(rdp_mod.eps_from_rdp(orders, rounds * skellam_rdp(orders, l1, l2sq, 100.0), delta, "improved")[0])
    assert sk.total_eps(100.0, l1, l2sq, rounds, delta) == pytest.approx(by_hand)
    assert composition.Cost.from_json(cost.to_json()) == cost and "Skellam" in cost.describe()
    for eps in (0.5, 1.0, 3.0):
        mu = sk.calibrate_mu(eps, l1, l2sq, rounds, delta)
        assert sk.total_eps(mu, l1, l2sq, rounds, delta) <= eps
        assert sk.total_eps(mu / (1 + 3e-6), l1, l2sq, rounds, delta) > eps * (1 - 1e-4)
    assert sk.calibrate_mu(1.0, l1, l2sq, rounds, delta) > sk.calibrate_mu(3.0, l1, l2sq, rounds, delta)


def test_a_coalition_leaves_the_theorem_at_its_remaining_noise():
    mu, l1, l2sq, rounds, delta = 5e4, 200, 900, 20, 1e-5
    central = sk.total_eps(mu, l1, l2sq, rounds, delta)
    assert sk.coalition_eps(mu, l1, l2sq, rounds, delta, 10, 0) == central
    five = sk.coalition_eps(mu, l1, l2sq, rounds, delta, 10, 5)
    assert five == sk.total_eps(mu / 2, l1, l2sq, rounds, delta) > central
    assert sk.coalition_eps(mu, l1, l2sq, rounds, delta, 10, 10) == math.inf


@pytest.mark.parametrize("dim,resolution", [(1, 1), (2, 3), (3, 1), (4, 2), (6, 5)])
def test_the_quantised_norm_bounds_hold_on_random_clipped_gradients(dim, resolution):
    """‖q‖₂² <= S and ‖q‖₁ <= min(S, ⌊√(dS)⌋) for gradients on and inside the clip ball, no row
    zeroed in float64 (the enforcement never fires where arithmetic is exact), and replace-one moves
    the sum by at most the sensitivities."""
    rng = np.random.default_rng(dim * 10 + resolution)
    clip = 0.7
    q = qs.Quantiser.of(clip, dim, resolution)
    assert q.bound2 == (resolution + 1) ** 2 * dim // 4
    g = rng.normal(size=(4000, dim))
    g *= (clip * rng.uniform(0.0, 1.0, size=(4000, 1)) ** 0.3) / np.linalg.norm(g, axis=1, keepdims=True)
    g[:500] *= clip / np.linalg.norm(g[:500], axis=1, keepdims=True)  # on the sphere
    out = q.quantise(g)
    assert np.array_equal(out, np.rint(g * q.scale).astype(np.int64))
    sq, l1 = (out * out).sum(axis=1), np.abs(out).sum(axis=1)
    assert sq.max() <= q.bound2 and 2 * l1.max() <= q.l1
    diff = out[:2000] - out[2000:]
    assert (diff * diff).sum(axis=1).max() <= q.l2sq and np.abs(diff).sum(axis=1).max() <= q.l1
    # a vector past the ball is clamped or zeroed, never kept with a larger norm
    past = q.quantise(np.full((1, dim), 10 * clip))
    assert (past * past).sum() <= q.bound2


def test_the_sum_of_n_shares_has_the_skellam_law_and_of_fewer_does_not():
    source = NoiseSource(2**100 + 7, stream=5)
    mu, clients, draws = 6.0, 5, 20000
    shares = np.stack([sk.skellam_share(source, mu, clients, draws) for _ in range(clients)])

    def p_value(values, law_mu):
        k = np.arange(-12, 13)
        expected = stats.skellam.pmf(k, law_mu, law_mu)
        counts = np.array([(values == x).sum() for x in k])
        tails = np.array([(values < -12).sum() + (values > 12).sum()])
        expected = np.concatenate([expected, [1 - expected.sum()]]) * values.size
        return stats.chisquare(np.concatenate([counts, tails]), expected).pvalue

    assert p_value(shares.sum(axis=0), mu) > 1e-4
    assert p_value(shares[:-1].sum(axis=0), mu) < 1e-8  # one share short: less noise, seen
    assert p_value(shares[0], mu / clients) > 1e-4  # one share alone: Sk(mu/n)


def test_a_total_with_a_share_missing_is_refused():
    record = sk.SkellamSum.of(1.0, 6, 4, 3, 30, 2.0, 5, 1e-5)
    source = NoiseSource(11, stream=5)
    sums = np.arange(18).reshape(3, 6) - 9
    messages = record.encode(sums, record.shares(source, (6,)))
    assert record.total(messages).shape == (6,)
    with pytest.raises(PateError, match="only 2 of the 3 noise shares"):
        record.total(messages[:2])


def test_the_modulus_never_wraps_and_decodes_the_exact_total():
    record = sk.SkellamSum.of(1.0, 8, 3, 4, 40, 1.0, 10, 1e-5)
    q = record.quantiser
    b = q.coordinate_bound
    reach = (record.modulus - 1) // 2 - record.records * b
    assert reach > 0 and record.modulus % 2 == 1
    # the Chernoff tail: above the true tail, and the reach's union bound meets the failure probability
    for t in (reach // 4, reach // 2, reach):
        assert stats.skellam.sf(t - 1, record.mu, record.mu) <= math.exp(sk.log_tail(t, record.mu)) * (1 + 1e-9)
    assert 2 * q.dim * record.rounds * math.exp(sk.log_tail(reach, record.mu)) <= record.failure * (1 + 1e-6)
    rng = np.random.default_rng(3)
    source = NoiseSource(5, stream=5)
    for extreme in (b, -b):  # every record at the coordinate bound: the sum at ±N b
        sums = np.full((4, 8), extreme * 10, np.int64)
        shares = record.shares(source, (8,))
        assert np.array_equal(record.total(record.encode(sums, shares)), sums.sum(0) + shares.sum(0))
    sums = rng.integers(-10 * b, 10 * b + 1, size=(4, 8))
    shares = record.shares(source, (8,))
    assert np.array_equal(record.total(record.encode(sums, shares)), sums.sum(0) + shares.sum(0))
    assert np.array_equal(qs.decode([0, 1, record.modulus - 1], record.modulus), [0, 1, -1])


def test_impossible_plans_are_refused_in_one_line():
    with pytest.raises(PateError, match="int32"):
        sk.SkellamSum.of(1.0, 10**6, 100, 10, 60000, 3.0, 100, 1e-5)
    with pytest.raises(PateError, match="clients"):
        sk.SkellamSum.of(1.0, 10, 4, 20, 10, 3.0, 10, 1e-5)
