"""`analysis.mechanisms.ddg`: the distributed discrete Gaussian's RDP bound (Kairouz, Liu & Steinke 2021)
against the EXACT Rényi divergence of the n-fold convolution of discrete Gaussian pmfs (1-D integer
shifts where τ matters and where it does not; in 2–3 dimensions by brute force over every integer
shift vector of given norms), composition and calibration round trips, the exact shares' sum against
the convolution (χ²: n shares pass, n − 1 fail), a total with a share missing refused, the
sub-Gaussian tail and the wrap-free modulus."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from analysis.accounting import rdp as rdp_mod
from analysis.accounting.ddg_rdp import rdp as ddg_rdp
from analysis.accounting.ddg_rdp import tau
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import composition
from analysis.mechanisms import ddg

ORDERS = (1.5, 2.0, 2.5, 5.0, 10.0)


def sum_pmf(sigma2: float, clients: int, reach: int) -> np.ndarray:
    """The pmf of the sum of `clients` independent N_ℤ(0, σ²) on [−n·reach, n·reach] (each share's pmf
    summed exactly on [−reach, reach], then convolved)."""
    x = np.arange(-reach, reach + 1)
    one = np.exp(-(x * x) / (2.0 * sigma2) - logsumexp(-(x * x) / (2.0 * sigma2)))
    out = one
    for _ in range(clients - 1):
        out = np.convolve(out, one)
    return out


def exact_divergences(sigma2: float, clients: int, shifts, orders) -> np.ndarray:
    """D_α(Z + v ‖ Z) for Z the sum of the shares, every shift v (rows) and order α (columns): summed over
    a window that holds the tilted measure's peak (at α v) and all but a negligible tail."""
    reach = int(max(orders) * max(abs(v) for v in shifts) + 30 * math.sqrt(clients * sigma2) + 30)
    pmf = sum_pmf(sigma2, clients, reach)
    centre = clients * reach
    x = np.arange(-reach, reach + 1)
    with np.errstate(divide="ignore"):
        log_q = np.log(pmf[x + centre])
        out = np.zeros((len(shifts), len(orders)))
        for i, v in enumerate(shifts):
            log_p = np.log(pmf[x - v + centre])
            ok = np.isfinite(log_p) & np.isfinite(log_q)
            for j, a in enumerate(orders):
                out[i, j] = 0.0 if v == 0 else logsumexp(a * log_p[ok] + (1 - a) * log_q[ok]) / (a - 1)
    return out


@pytest.mark.parametrize("sigma,clients", [(0.6, 2), (0.6, 4), (1.0, 3), (2.0, 2), (6.0, 3)])
def test_the_bound_dominates_the_exact_divergence_in_one_dimension(sigma, clients):
    shifts = (1, 2, 3)
    exact = exact_divergences(sigma * sigma, clients, shifts, ORDERS)
    for (i, v), (j, a) in itertools.product(enumerate(shifts), enumerate(ORDERS)):
        bound = float(ddg_rdp([a], v, v * v, sigma * sigma, clients, 1)[0])
        assert exact[i, j] <= bound * (1 + 1e-9), (v, a, exact[i, j], bound)
        if sigma >= 2:  # τ ~ 0: the sum is a discrete Gaussian of variance nσ² to float precision, and so tight
            assert bound <= exact[i, j] * (1 + 1e-6)


def test_tau_is_needed_where_the_shares_are_narrow():
    """At σ 0.6 the central term alone, α v²/(2nσ²), lies below the exact divergence: without τ the
    bound would be false (the test above can fail)."""
    sigma2, clients = 0.36, 3
    exact = exact_divergences(sigma2, clients, (1, 2), ORDERS)
    central = np.array([[a * v * v / (2 * clients * sigma2) for a in ORDERS] for v in (1, 2)])
    assert (exact > central * 1.005).any() and tau(sigma2, clients) > 0.3
    assert tau(4.0, 1) == 0.0 and tau(0.36, 3) == pytest.approx(10 * sum(math.exp(-2 * math.pi**2 * 0.36 * k / (k + 1))
                                                                         for k in (1, 2)))


@pytest.mark.parametrize("dim", [2, 3])
def test_the_bound_dominates_every_integer_shift_vector_of_given_norms(dim):
    """Brute force: every v ∈ ℤ^d with ‖v‖₂² <= L2SQ and ‖v‖₁ <= L1; the divergence of the product law
    is the sum over coordinates (van Erven & Harremoës 2014, Theorem 28)."""
    sigma2, clients, r = 0.64, 3, 3
    table = exact_divergences(sigma2, clients, tuple(range(-r, r + 1)), ORDERS).T  # (orders, shifts)
    vectors = np.array(list(itertools.product(range(-r, r + 1), repeat=dim)))
    per_order = table[:, vectors + r].sum(axis=2)  # (orders, vectors)
    for l2sq, l1 in ((2, 2), (4, 2), (5, 3), (9, 3 * dim)):
        inside = ((vectors ** 2).sum(axis=1) <= l2sq) & (np.abs(vectors).sum(axis=1) <= l1)
        for i, order in enumerate(ORDERS):
            worst = per_order[i, inside].max()
            bound = float(ddg_rdp([order], l1, l2sq, sigma2, clients, dim)[0])
            assert worst <= bound * (1 + 1e-9), (l2sq, l1, order, worst, bound)


def test_rounds_compose_and_the_calibration_round_trips():
    clients, dim, l1, l2sq, rounds, delta = 5, 40, 120, 400, 50, 1e-5
    cost = ddg.cost(30.0, clients, dim, l1, l2sq, rounds)
    orders = rdp_mod.DEFAULT_ORDERS
    curve = rounds * ddg_rdp(orders, l1, l2sq, 30.0, clients, dim)
    assert np.allclose(composition.rdp(cost, orders), curve)
    by_hand = float(rdp_mod.eps_from_rdp(orders, curve, delta, "improved")[0])
    assert ddg.total_eps(30.0, clients, dim, l1, l2sq, rounds, delta) == pytest.approx(by_hand)
    assert composition.Cost.from_json(cost.to_json()) == cost and "discrete Gaussian" in cost.describe()
    for eps in (0.5, 1.0, 3.0):
        t = ddg.calibrate(eps, clients, dim, l1, l2sq, rounds, delta)
        assert ddg.total_eps(t * (t - 1), clients, dim, l1, l2sq, rounds, delta) <= eps
        assert ddg.total_eps((t - 1) * (t - 2), clients, dim, l1, l2sq, rounds, delta) > eps
    with pytest.raises(PateError, match="exact sampler"):
        ddg.calibrate(1e-3, clients, dim, 10**6, 10**12, rounds, delta)


def test_a_coalition_leaves_the_theorem_at_the_remaining_shares():
    args = (5e3, 10, 30, 200, 900, 20, 1e-5)
    central = ddg.total_eps(*args)
    assert ddg.coalition_eps(*args, 0) == central
    assert ddg.coalition_eps(*args, 5) == ddg.total_eps(5e3, 5, 30, 200, 900, 20, 1e-5) > central
    assert ddg.coalition_eps(*args, 10) == math.inf


def test_a_silos_charge_alone_is_the_theorem_at_its_own_share():
    """`pate silos fedavg` charges a silo's ledger `alone_cost`: its message seen with only its own share."""
    record = ddg.DDGSum.of(1.0, 15, 8, 3, 90, 3.0, 4, 1e-5)
    q, delta = record.quantiser, 1e-5
    alone = composition.single_eps(record.alone_cost(4), delta)
    assert alone == pytest.approx(ddg.coalition_eps(record.sigma2, 3, q.dim, q.l1, q.l2sq, 4, delta, 2), rel=1e-9)
    assert alone > composition.single_eps(record.cost(), delta)  # one share is less noise than the sum
    assert record.alone_cost(1).params["clients"] == 1 and record.alone_cost(1).params["count"] == 1


def test_the_sum_of_n_exact_shares_has_the_convolution_law_and_of_fewer_does_not():
    source = NoiseSource(2**100 + 9, stream=5)
    sigma2, clients, draws = 2, 3, 20000  # t = 2: σ² = t(t − 1)
    shares = np.stack([ddg.ddg_share(source, sigma2, draws) for _ in range(clients)])
    k = np.arange(-8, 9)

    def p_value(values, n):
        reach = 40
        pmf = sum_pmf(sigma2, n, reach)[k + n * reach]
        counts = np.array([(values == x).sum() for x in k] + [(np.abs(values) > 8).sum()])
        expected = np.concatenate([pmf, [1 - pmf.sum()]]) * values.size
        return stats.chisquare(counts, expected).pvalue

    assert p_value(shares.sum(axis=0), clients) > 1e-4
    assert p_value(shares[:-1].sum(axis=0), clients) < 1e-8  # a share short: less noise, seen
    assert p_value(shares[0], 1) > 1e-4  # one share alone: N_Z(0, σ²)
    assert abs(shares.sum(axis=0).var() - clients * sigma2) < 0.3  # variance <= nσ², near it at σ² 2


def test_a_total_with_a_share_missing_is_refused():
    record = ddg.DDGSum.of(1.0, 6, 4, 3, 30, 2.0, 5, 1e-5)
    sums = np.arange(18).reshape(3, 6) - 9
    messages = record.encode(sums, record.shares(NoiseSource(11, stream=5), (6,)))
    assert record.total(messages).shape == (6,)
    with pytest.raises(PateError, match="only 2 of the 3 noise shares"):
        record.total(messages[:2])


def test_the_sub_gaussian_tail_and_the_modulus():
    sigma2, clients = 2, 3
    pmf = sum_pmf(sigma2, clients, 60)
    centre = clients * 60
    for t in (1, 3, 6, 10, 20):
        assert pmf[centre + t:].sum() <= math.exp(ddg.log_tail(t, sigma2, clients)) * (1 + 1e-9)
    record = ddg.DDGSum.of(1.0, 8, 3, 4, 40, 1.0, 10, 1e-5)
    q = record.quantiser
    reach = (record.modulus - 1) // 2 - record.records * q.coordinate_bound
    assert reach > 0 and record.modulus % 2 == 1
    assert 2 * q.dim * record.rounds * math.exp(ddg.log_tail(reach, record.sigma2, 4)) <= record.failure * (1 + 1e-6)
    assert 2 * q.dim * record.rounds * math.exp(ddg.log_tail(reach - 1, record.sigma2, 4)) > record.failure
    source = NoiseSource(5, stream=5)
    for extreme in (q.coordinate_bound, -q.coordinate_bound):  # every record at the bound: the sum at ±N b
        sums = np.full((4, 8), extreme * 10, np.int64)
        shares = record.shares(source, (8,))
        assert np.array_equal(record.total(record.encode(sums, shares)), sums.sum(0) + shares.sum(0))
    assert record.cost() == ddg.cost_from_json(record.to_json(8), record.rounds)
    assert ddg.total_eps(record.sigma2, 4, 8, q.l1, q.l2sq, 10, 1e-5) <= 1.0
