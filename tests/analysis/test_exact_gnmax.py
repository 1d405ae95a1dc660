"""GNMax and Confident-GNMax with exact coins (issue 43; `analysis.mechanisms.exact_gaussian`,
`analysis.bounds.discrete_gnmax`): every bound against a plain-loop second implementation, the
exact pmf (summed and convolved on small σ) and Monte Carlo with the exact sampler; the
data-independent ε against the float64 records'; no sampling δ, no sanitised release, no PLD."""

import math
from fractions import Fraction

import numpy as np
import pytest

from analysis.accounting.rdp import DEFAULT_ORDERS, eps_from_rdp
from analysis.bounds import discrete_gnmax, gnmax
from analysis.bounds.confident import answer_weight, rdp_confident
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource, discrete_gaussian_pmf
from analysis.mechanisms import registry
from analysis.mechanisms.exact_gaussian import ConfidentGNMaxExact, GNMaxExact, float_up, sampler_variance
from analysis.mechanisms.record import UNANSWERED

REACH = 120  # the pmf tables below: σ <= 3, so the mass past 120 is below e^-800


def pmf_table(variance):
    z = np.arange(-REACH, REACH + 1)
    return z, discrete_gaussian_pmf(z, variance)


def histogram(rows, classes, teachers, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.multinomial(teachers, rng.dirichlet(np.full(classes, 0.4))) for _ in range(rows)])


# ------------------------------------------------------------------ q of GNMax


def plain_pair_tail(d, variance, reach):
    """P[X − Y >= d] for X, Y i.i.d. N_Z(0, V), by a double loop over |x|, |y| <= reach."""
    w = {x: math.exp(-x * x / (2 * variance)) for x in range(-reach, reach + 1)}
    norm = sum(w.values())
    return sum(w[x] * w[y] for x in w for y in w if x - y >= d) / norm ** 2


def plain_log_q(votes, variance):
    """log min(1 − 1/m, Σ_{j≠i*} min(exp(−gap²/(4V)), P[X − Y >= gap])), one row at a time."""
    reach = int(14 * math.sqrt(variance)) + 2
    tails = {}
    out = []
    for row in np.asarray(votes).tolist():
        top = row.index(max(row))
        total = 0.0
        for j, n in enumerate(row):
            if j != top:
                gap = row[top] - n
                if gap not in tails:
                    tails[gap] = plain_pair_tail(gap, variance, reach)
                total += min(math.exp(-gap * gap / (4 * variance)), tails[gap])
        out.append(math.log(min(total, 1 - 1 / len(row))) if total > 0 else -math.inf)
    return np.array(out)


def test_log_q_is_the_plain_loop():
    """The same bound up to the pmf table's relative slack (1e-9) and the tail the plain loop
    drops (past 14σ, below e^-98)."""
    votes = histogram(120, 7, 40, seed=3)
    for variance in (1.0, 4.0, 16.0):
        got, want = discrete_gnmax.log_q(votes, variance), plain_log_q(votes, variance)
        kept = want > -80  # where the plain loop's truncation (mass past 14σ, < e^-98) cannot show
        assert kept.sum() > 60
        np.testing.assert_allclose(got[kept], want[kept], rtol=1e-8, atol=1e-8)
        assert np.all(got >= want - 1e-12)  # and everywhere at least the truncated sum


def test_the_pairwise_tail_holds_on_the_convolved_pmf():
    """P[X_j − X_i >= d] for two independent N_Z(0, V), by convolving the pmf, is at most
    exp(−d²/(4V)) (CKS20, Corollary 9) at every d >= 0."""
    for variance in (0.5, 1.0, 2.25, 9.0):
        _, p = pmf_table(variance)
        diff = np.convolve(p, p[::-1])  # the pmf of X_j − X_i on −2R … 2R
        tail = np.cumsum(diff[::-1])[::-1][2 * REACH:]  # P[D >= d] for d = 0 … 2R
        d = np.arange(tail.size)
        assert np.all(tail <= np.exp(-d * d / (4 * variance)) * (1 + 1e-12) + 1e-300)
        bound = np.exp(discrete_gnmax.log_pair_tail_bound(d, variance))
        assert np.all(tail <= bound * (1 + 1e-12))  # the closed form, against the convolution
        close = tail > 1e-100  # deeper, the convolved pmf table itself underflows
        assert np.all(bound[close] <= tail[close] * (1 + 1e-8))


def exact_error(counts, variance):
    """P[argmax_j (n_j + X_j) ≠ i*] (ties to the lowest index) by summing the pmf: i* wins with
    probability Σ_x p(x) Π_{i<i*} P[X < n* + x − n_i] Π_{i>i*} P[X <= n* + x − n_i]."""
    z, p = pmf_table(variance)
    cdf = np.cumsum(p)

    def at_most(k):
        return 0.0 if k < -REACH else 1.0 if k >= REACH else cdf[k + REACH]

    top = int(np.argmax(counts))
    win = 0.0
    for x, px in zip(z, p):
        prod = px
        for i, n in enumerate(counts):
            if i != top:
                prod *= at_most(counts[top] + x - n - (1 if i < top else 0))
        win += prod
    return 1.0 - win


@pytest.mark.parametrize("counts", [[9, 7, 2], [5, 5, 5], [6, 7, 7, 0], [12, 3, 3, 3], [4, 4, 0]])
def test_q_bounds_the_exact_error_and_monte_carlo(counts):
    """The bound is above the exact error probability (summed pmf) and above the seeded exact
    sampler's error rate (30,000 draws, 5 standard errors); the exact law is the sampler's."""
    sigma, draws = 1.5, 30_000
    record = GNMaxExact(sigma)
    variance = float(record.variance)
    bound = math.exp(float(discrete_gnmax.log_q(np.array([counts]), variance)[0]))
    exact = exact_error(counts, variance)
    assert exact <= bound * (1 + 1e-12)
    labels = record.sample(np.tile(counts, (draws, 1)), NoiseSource(7))
    seen = float(np.mean(labels != int(np.argmax(counts))))
    se = math.sqrt(exact * (1 - exact) / draws)
    assert abs(seen - exact) <= 5 * se + 1e-9
    assert seen <= bound + 5 * se


# ------------------------------------------------------------------ the threshold check


def test_the_tail_bound_holds_on_the_pmf_and_is_close_to_it():
    for variance in (0.75, 4.0, 100.0, 250000.0):
        s = math.sqrt(variance)
        reach = int(45 * s) + 5
        z = np.arange(-reach, reach + 1)
        p = discrete_gaussian_pmf(z, variance)
        ks = np.arange(-int(5 * s) - 2, int(5 * s) + 3)
        exact = np.array([p[z >= k].sum() for k in ks])
        bound = np.exp(discrete_gnmax.log_tail_bound(ks.astype(float), variance))
        assert np.all(exact <= bound * (1 + 1e-12))
        assert np.all(bound <= np.maximum(exact * (1 + 1e-8), np.exp(-ks.astype(float) ** 2 / (2 * variance))))
    far = discrete_gnmax.log_tail_bound(np.array([1e6, -1e6, 0.0]), 4.0)
    assert far[0] == pytest.approx(-1e12 / 8) and far[1] == 0.0 and far[2] < 0


def test_the_check_bounds_are_the_plain_loop_and_hold():
    """log p̄₁, log p̄₀ against a loop over rows (k = ⌈T − s⌉, P₁ = P[Z >= k], P₀ = P[Z >= 1 − k])
    and against the pmf; Monte Carlo of the exact check's answer rate."""
    votes = histogram(60, 5, 30, seed=5)
    threshold, sigma1 = 14.5, 2.5
    record = ConfidentGNMaxExact(threshold, sigma1, 2.0)
    v1 = float_up(record.variance_threshold)
    log_p1, log_p0 = discrete_gnmax.log_pr_bounds(threshold, v1, votes)
    z, p = pmf_table(float(record.variance_threshold))
    for row, a, b in zip(votes, log_p1, log_p0):
        k = math.ceil(threshold - max(row))
        assert a == discrete_gnmax.log_tail_bound(np.array([float(k)]), v1)[0]
        assert b == discrete_gnmax.log_tail_bound(np.array([1.0 - k]), v1)[0]
        assert p[z >= k].sum() <= math.exp(a) * (1 + 1e-12)
        assert p[z < k].sum() <= math.exp(b) * (1 + 1e-12)
    counts, draws = [14, 3, 2, 1, 0], 40_000
    labels = record.sample(np.tile(counts, (draws, 1)), NoiseSource(11))
    answered = float(np.mean(labels != UNANSWERED))
    exact = p[z >= math.ceil(threshold - 14)].sum()
    assert abs(answered - exact) <= 5 * math.sqrt(exact * (1 - exact) / draws)
    up, _ = discrete_gnmax.log_pr_bounds(threshold, v1, np.array([counts]))
    assert answered <= math.exp(up[0]) + 5 * math.sqrt(exact * (1 - exact) / draws)


# ------------------------------------------------------------------ ε


def plain_data_dependent(votes, sigma, variance, delta, threshold=None, sigma1=None, variance1=None):
    """Σ over rows, one row at a time, of Theorem 6 on the plain-loop q (and the check's)."""
    total = np.zeros(len(DEFAULT_ORDERS))
    for row in votes:
        gn = gnmax.theorem6(plain_log_q(row[None], variance)[0], sigma, DEFAULT_ORDERS)
        if threshold is None:
            total += gn
            continue
        k = math.ceil(threshold - max(row))
        lp1 = float(discrete_gnmax.log_tail_bound(np.array([float(k)]), variance1)[0])
        lp0 = float(discrete_gnmax.log_tail_bound(np.array([1.0 - k]), variance1)[0])
        thr = gnmax.theorem6(min(lp1, lp0), math.sqrt(2) * sigma1, DEFAULT_ORDERS)
        total += rdp_confident(thr, gn, answer_weight(lp1, sigma1, DEFAULT_ORDERS), DEFAULT_ORDERS)
    return eps_from_rdp(DEFAULT_ORDERS, total, delta, "classic")[0]


def test_the_data_dependent_eps_is_the_plain_loop():
    votes = histogram(80, 6, 100, seed=9)
    g = GNMaxExact(6.0)
    eps, _, _ = g.data_dependent(votes, 1e-5)
    assert eps == pytest.approx(plain_data_dependent(votes, 6.0, float_up(g.variance), 1e-5), rel=1e-9)
    c = ConfidentGNMaxExact(55.0, 12.0, 6.0)
    eps, _, answered = c.data_dependent(votes, 1e-5)
    want = plain_data_dependent(votes, 6.0, float_up(c.variance), 1e-5, 55.0, 12.0, float_up(c.variance_threshold))
    assert eps == pytest.approx(want, rel=1e-9)
    assert 0 < answered <= votes.shape[0]


@pytest.mark.parametrize("sigma", [2.0, 40.0, 100.0, 517.3])
def test_the_data_independent_eps_is_the_float64_records(sigma):
    """CKS20, Proposition 5: the discrete Gaussian's RDP curve at integer shifts is at most the
    continuous one's, so the exact records publish the float64 records' RDP ε."""
    for n, delta in ((1, 1e-5), (1000, 1e-8)):
        for conversion in ("classic", "improved"):
            a = GNMaxExact(sigma).independent_eps(n, delta, conversion=conversion).eps
            assert a == registry.from_options("gnmax", sigma=sigma).independent_eps(n, delta, conversion=conversion).eps
            b = ConfidentGNMaxExact(100.0, 2 * sigma, sigma).independent_eps(n, delta, conversion=conversion,
                                                                             max_answers=n // 2).eps
            assert b == registry.from_options("confident-gnmax", threshold=100.0, sigma_threshold=2 * sigma,
                                              sigma=sigma).independent_eps(n, delta, conversion=conversion,
                                                                           max_answers=n // 2).eps


def test_the_rdp_curve_holds_on_the_pmf():
    """D_α(N_Z(0, V) ‖ N_Z(1, V)) summed from the pmf is at most α/(2V) (CKS20, Proposition 5): the
    check's per-coordinate curve; two coordinates give GNMax's α/V."""
    from scipy.special import logsumexp

    for variance in (0.5, 2.0, 6.25):
        z = np.arange(-REACH, REACH + 1)
        log_norm = logsumexp(-z * z / (2 * variance))  # both laws share it: an integer shift
        log_p, log_q = -z * z / (2 * variance) - log_norm, -(z - 1.0) ** 2 / (2 * variance) - log_norm
        for alpha in (1.5, 2.0, 8.0, 32.0):
            d = logsumexp(alpha * log_p + (1 - alpha) * log_q) / (alpha - 1)
            assert d <= alpha / (2 * variance) * (1 + 1e-9)


# ------------------------------------------------------------------ the records


def test_the_sampler_variance_is_on_the_grid_and_never_below_sigma_squared():
    for sigma in (0.3, 1.0, 2.0, 40.0, 37.123456789, 150.0, 299.9, 500.0, 800.0):
        v = sampler_variance(sigma)
        assert Fraction(sigma) ** 2 <= v
        assert v - Fraction(sigma) ** 2 <= (Fraction(1, 64) if sigma < 250 else 1)
        assert Fraction(float_up(v)) == v  # a dyadic V of few bits: the bounds read V itself
    for sigma in (900.0, 2191.72, 1e5, 7.4e5):  # past the 1/2^j grid: V = t(t − 1) >= σ², t = ⌊√V⌋ + 1
        v = sampler_variance(sigma)
        t = math.isqrt(v.numerator) + 1
        assert v.denominator == 1 and v == t * (t - 1) and Fraction(sigma) ** 2 <= v < Fraction(sigma) ** 2 + 2 * sigma
        assert Fraction(float_up(v)) == v
    z = GNMaxExact(2191.72).sample(np.zeros((4000, 5), np.int64), NoiseSource(3))  # the sampler takes it
    assert set(np.unique(z)) <= set(range(5))
    with pytest.raises(PateError, match="beyond the exact discrete Gaussian sampler"):
        GNMaxExact(8e5)
    # past MAX_TABLE_ROOT the tables are not built: the subgaussian bounds alone
    big = 9e10
    assert discrete_gnmax.log_tail_bound(np.array([3e5]), big)[0] == pytest.approx(-9e10 / (2 * big))
    assert discrete_gnmax.log_pair_tail_bound(np.array([3e5]), big)[0] == pytest.approx(-9e10 / (4 * big))


def test_exact_records_add_no_delta_make_no_sanitised_release_and_take_no_pld():
    g, c = GNMaxExact(40.0), ConfidentGNMaxExact(200.0, 150.0, 40.0)
    for record in (g, c):
        assert record.exact and not record.sanitised and "pld" not in record.accountants
        assert record.sampling_tv(100_000, 151) == 0.0
        assert record.cost(10).kind == "discrete-gaussian"
        eps, delta, _ = record.published_eps(1000, 1e-8)
        assert (eps, delta) == (record.independent_eps(1000, 1e-8).eps, 1e-8)
        with pytest.raises(PateError, match="RDP only"):
            record.independent_eps(10, 1e-5, accountant="pld")
        with pytest.raises(PateError, match="no sanitised release"):
            type(record).sanitised_cost({}, 0.2)
    assert registry.record_type("gnmax-exact").calibrate(100, 2.0, 1e-5).record == GNMaxExact(
        registry.record_type("gnmax").calibrate(100, 2.0, 1e-5).record.sigma)


def test_seeded_exact_labels_reproduce_and_depend_on_the_seed():
    votes = histogram(300, 10, 50, seed=1)
    for record in (GNMaxExact(4.0), ConfidentGNMaxExact(25.0, 6.0, 4.0)):
        a = record.sample(votes, NoiseSource(2**128 - 1))
        np.testing.assert_array_equal(a, record.sample(votes, NoiseSource(2**128 - 1)))
        assert np.any(a != record.sample(votes, NoiseSource(5)))
        assert a.dtype == np.int32


def test_ties_go_to_the_lowest_class_index():
    """With noise far below one vote (σ = 0.2: P[|X| >= 1] < 1e-5), a tie is broken to the first."""
    labels = GNMaxExact(0.2).sample(np.tile([3, 5, 5, 1], (500, 1)), NoiseSource(4))
    assert np.mean(labels == 1) > 0.99 and set(np.unique(labels)) <= {1, 2}
