"""analysis.bounds.lnmax against plain-loop second implementations, Monte-Carlo estimates,
brute-force searches over small histograms, and the defects of the 2017 code."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.bounds import lnmax
from analysis.sanitised import lnmax_release
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from conftest import bench_module, vote_neighbours

# --------------------------------------------------------------------------- plain loops


# Lemma 4 and Theorems 2/3 as plain loops: the ones bench/privacy_analysis.py times.
_LOOPS = bench_module("privacy_analysis")
loop_q_bound, loop_logmgf = _LOOPS.loop_q, _LOOPS.loop_logmgf


def loop_data_dependent_eps(votes, gamma, delta, moments):
    best = (math.inf, None)
    for l in moments:
        alpha = sum(loop_logmgf(loop_q_bound(row, gamma), 2 * gamma, l) for row in votes)
        eps = (alpha + math.log(1 / delta)) / l
        if eps < best[0]:
            best = (eps, l)
    return best




def f_loop(counts, gamma, l):
    return loop_logmgf(loop_q_bound(counts, gamma), 2 * gamma, l)


def local_sensitivity(counts, gamma, l):
    v = f_loop(counts, gamma, l)
    return max(abs(f_loop(d, gamma, l) - v) for d in vote_neighbours(counts))


def brute_force_smooth_sensitivity(counts, gamma, l, beta):
    """max_k e^{-beta k} max{LS(d') : dist(d, d') = k}, by breadth-first search."""
    start = tuple(int(c) for c in counts)
    seen = {start}
    frontier = [start]
    best = local_sensitivity(start, gamma, l)
    k = 0
    while frontier:
        k += 1
        nxt = []
        for x in frontier:
            for d in vote_neighbours(x):
                if d not in seen:
                    seen.add(d)
                    nxt.append(d)
        frontier = nxt
        if frontier:
            best = max(best, math.exp(-beta * k) * max(local_sensitivity(d, gamma, l) for d in frontier))
    return best


def reference_2017_smoothed_sens(counts, noise_eps, l, beta):
    """The 2017 repository's sens_at_k / smoothed_sens, defects included."""

    def from_counts(c):
        return f_loop(c, noise_eps, l)

    def sens_at_k(counts, k):
        counts_sorted = sorted(counts, reverse=True)
        if counts[0] < counts[1] + k:  # the defect: unsorted counts
            return 0
        counts_sorted[0] -= k
        counts_sorted[1] += k
        val = from_counts(counts_sorted)
        counts_sorted[0] -= 1
        counts_sorted[1] += 1
        return from_counts(counts_sorted) - val

    k = 0
    smoothed = sens_at_k(counts, k)
    while k < max(counts):
        k += 1
        s = sens_at_k(counts, k)
        smoothed = max(smoothed, math.exp(-beta * k) * s)
        if s == 0.0:
            break
    return smoothed


def reference_2017_logmgf_exact(q, priv_eps, l):
    """The 2017 repository's logmgf_exact: Theorem 3 whenever q < 0.5."""
    if q < 0.5:
        t_one = (1 - q) * math.pow((1 - q) / (1 - math.exp(priv_eps) * q), l)
        t_two = q * math.exp(priv_eps * l)
        t = t_one + t_two
        try:
            log_t = math.log(t)
        except ValueError:
            log_t = priv_eps * l
    else:
        log_t = priv_eps * l
    return min(0.5 * priv_eps * priv_eps * l * (l + 1), log_t, priv_eps * l)


# --------------------------------------------------------------------------- strategies


@st.composite
def histograms(draw, max_classes=12, max_teachers=400):
    c = draw(st.integers(2, max_classes))
    t = draw(st.integers(1, max_teachers))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    conc = draw(st.sampled_from([0.05, 0.3, 1.0, 10.0]))
    return rng.multinomial(t, rng.dirichlet(np.full(c, conc)))


gammas = st.sampled_from([0.01, 0.05, 0.1, 0.3, 1.0, 3.0])


# --------------------------------------------------------------------------- q_bound


@settings(max_examples=200, deadline=None)
@given(histograms(), gammas)
def test_q_bound_matches_loop(counts, gamma):
    assert lnmax.q_bound(counts, gamma) == pytest.approx(loop_q_bound(counts, gamma), rel=1e-9, abs=1e-300)


def test_q_bound_broadcasts_over_leading_axes():
    rng = np.random.default_rng(0)
    votes = rng.multinomial(50, np.full(5, 0.2), size=(3, 4))
    q = lnmax.q_bound(votes, 0.2)
    assert q.shape == (3, 4)
    assert q[2, 1] == pytest.approx(loop_q_bound(votes[2, 1], 0.2))


@pytest.mark.parametrize("counts", [[30, 10, 5, 5], [20, 18, 12], [60, 0, 0, 0, 0], [12, 11, 10, 9, 8]])
@pytest.mark.parametrize("gamma", [0.1, 0.3])
def test_q_bound_above_monte_carlo(counts, gamma):
    """Lemma 4 bounds the empirical rate of a noisy argmax that misses the plurality."""
    rng = np.random.default_rng(1)
    trials = 200_000
    counts = np.asarray(counts, dtype=float)
    noisy = counts + rng.laplace(0.0, 1.0 / gamma, size=(trials, counts.size))
    miss = np.mean(np.argmax(noisy, axis=1) != np.argmax(counts))
    stderr = math.sqrt(max(miss * (1 - miss), 1e-12) / trials)
    assert miss - 4 * stderr <= lnmax.q_bound(counts, gamma)


def test_q_bound_is_safe_at_scale():
    """10,000 teachers, 1,000 classes: no overflow, no log(0), no NaN."""
    votes = np.zeros((3, 1000), dtype=np.int64)
    votes[0, 0] = 10_000
    votes[1, :] = 10
    votes[2, 0], votes[2, 1:] = 5005, 5
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        q = lnmax.q_bound(votes, 5.0)
    assert np.all(np.isfinite(q))
    assert q[0] == 0.0 or q[0] < 1e-300
    assert q[1] == pytest.approx(1 - 1 / 1000)


@settings(max_examples=100, deadline=None)
@given(histograms(max_teachers=200), gammas)
def test_q_falls_as_consensus_grows(counts, gamma):
    """Moving a vote from another class to the plurality never raises the bound."""
    counts = np.asarray(counts)
    top = int(np.argmax(counts))
    donors = [j for j in range(counts.size) if j != top and counts[j] > 0]
    if not donors:
        return
    more = counts.copy()
    more[donors[0]] -= 1
    more[top] += 1
    assert lnmax.q_bound(more, gamma) <= lnmax.q_bound(counts, gamma) + 1e-15


# --------------------------------------------------------------------------- logmgf


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1), st.sampled_from([0.02, 0.1, 0.6, 2.0, 6.0]), st.integers(1, 32))
def test_logmgf_matches_loop(q, eps, l):
    assert lnmax.logmgf(q, eps, [l])[0] == pytest.approx(loop_logmgf(q, eps, l), rel=1e-9, abs=1e-12)


def test_logmgf_shape():
    out = lnmax.logmgf(np.zeros((2, 3)), 0.1, [1, 2, 3, 4])
    assert out.shape == (2, 3, 4)


@pytest.mark.parametrize("eps", [0.02, 0.1, 0.5, 2.0])
def test_logmgf_is_monotone_in_q(eps):
    """The smooth-sensitivity envelope relies on this."""
    q = np.concatenate([[0.0], np.logspace(-40, 0, 20001)])
    g = lnmax.logmgf(q, eps, np.arange(1, 33))
    assert np.all(np.diff(g, axis=0) >= -1e-12)


def test_theorem3_only_where_valid_pins_2017_defect():
    """logmgf_exact applies Theorem 3 for q < 0.5. For eps = 2 the theorem needs
    q < 1/(1+e^2) ~ 0.119; at q = 0.3 its expression is *below* the true log moment of a
    concrete eps-DP mechanism with Pr[M(d) != o*] = 0.3, i.e. the old code
    under-reports privacy loss. We use the data-independent bound there."""
    eps, q, l = 2.0, 0.3, 2
    # M(d): o* w.p. 0.7, o2 w.p. 0.3; M(d'): o* w.p. 0.7 e^-eps, o2 the rest. Both
    # likelihood ratios lie in [e^-eps, e^eps], so the pair is eps-DP.
    p, p_prime = np.array([0.7, 0.3]), np.array([0.7 * math.exp(-eps), 1 - 0.7 * math.exp(-eps)])
    assert np.all(np.abs(np.log(p / p_prime)) <= eps + 1e-12)
    true_alpha = math.log(np.sum(p * (p / p_prime) ** l))
    buggy = reference_2017_logmgf_exact(q, eps, l)
    ours = lnmax.logmgf(q, eps, [l])[0]
    assert buggy < true_alpha <= ours
    assert ours == pytest.approx(min(0.5 * eps * eps * l * (l + 1), eps * l))


# --------------------------------------------------------------------------- accountant


def test_data_independent_known_value():
    """The issue's known value (and the 2017 code's output): 5.30 at moment 5."""
    r = lnmax.data_independent_eps(100, 0.05, 1e-5, range(1, 9))
    assert r.eps == pytest.approx(5.3026, abs=1e-3)
    assert r.moment == 5
    assert r.eps == pytest.approx((100 * 0.005 * 30 + math.log(1e5)) / 5)


@settings(max_examples=40, deadline=None)
@given(st.lists(histograms(max_classes=10, max_teachers=300), min_size=1, max_size=12), gammas,
       st.sampled_from([1e-3, 1e-5, 1e-8]))
def test_data_dependent_matches_loop_and_is_below_independent(rows, gamma, delta):
    c = min(len(r) for r in rows)
    votes = np.stack([r[:c] for r in rows])
    moments = range(1, 9)
    got = lnmax.data_dependent_eps(votes, gamma, delta, moments)
    eps, l = loop_data_dependent_eps(votes, gamma, delta, moments)
    assert got.eps == pytest.approx(eps, rel=1e-9)
    assert got.moment == l
    assert got.eps <= lnmax.data_independent_eps(len(votes), gamma, delta, moments).eps + 1e-9


def test_cumulative_eps_ends_at_totals():
    rng = np.random.default_rng(3)
    votes = rng.multinomial(100, rng.dirichlet(np.full(10, 0.2)), size=50)
    di, dd = lnmax.cumulative_eps(votes, 0.05, 1e-5)
    assert di.shape == dd.shape == (50,)
    assert dd[-1] == pytest.approx(lnmax.data_dependent_eps(votes, 0.05, 1e-5).eps)
    assert di[-1] == pytest.approx(lnmax.data_independent_eps(50, 0.05, 1e-5).eps)
    assert dd[9] == pytest.approx(lnmax.data_dependent_eps(votes[:10], 0.05, 1e-5).eps)
    assert np.all(np.diff(di) > 0)


@pytest.mark.parametrize("bad", [dict(delta=0), dict(delta=1), dict(gamma=0), dict(gamma=-1),
                                 dict(moments=[0.5, 2])])
def test_bad_parameters_raise(bad):
    args = dict(num_queries=10, gamma=0.1, delta=1e-5, moments=[1, 2])
    args.update(bad)
    with pytest.raises(PateError):
        lnmax.data_independent_eps(**args)


# --------------------------------------------------------------------------- smooth sensitivity


def loop_q_max(counts, gamma, k):
    """Histogram with k votes moved from the top class to the runner-up, by hand."""
    s = sorted((int(c) for c in counts), reverse=True)
    if 2 * k >= s[0] - s[1]:
        return 1 - 1 / len(s)
    s[0] -= k
    s[1] += k
    return loop_q_bound(s, gamma)


@settings(max_examples=60, deadline=None)
@given(histograms(max_classes=8, max_teachers=120), gammas, st.integers(0, 60))
def test_q_max_matches_loop(counts, gamma, k):
    sorted_counts = -np.sort(-np.asarray(counts, dtype=float))[None]
    got = lnmax._q_max_at_distance(sorted_counts, np.array([float(k)]), gamma)[0, 0]
    assert got == pytest.approx(loop_q_max(counts, gamma, k), rel=1e-9, abs=1e-300)


def histograms_within(counts, k):
    seen = {tuple(counts)}
    frontier = [tuple(counts)]
    for _ in range(k):
        frontier = [d for x in frontier for d in vote_neighbours(x) if d not in seen]
        seen.update(frontier)
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_q_max_bounds_every_histogram_within_distance(seed):
    rng = np.random.default_rng(seed)
    c, t = int(rng.integers(2, 5)), int(rng.integers(6, 16))
    counts = tuple(int(x) for x in rng.multinomial(t, rng.dirichlet(np.full(c, 0.5))))
    gamma = float(rng.choice([0.1, 0.5, 1.0]))
    sorted_counts = -np.sort(-np.asarray(counts, dtype=float))[None]
    for k in range(4):
        bound = lnmax._q_max_at_distance(sorted_counts, np.array([float(k)]), gamma)[0, 0]
        worst = max(loop_q_bound(d, gamma) for d in histograms_within(counts, k))
        assert worst <= bound + 1e-12


@pytest.mark.parametrize("seed", range(25))
def test_smooth_sensitivity_bounds_brute_force(seed):
    """The β-smooth bound is at least the true smooth sensitivity found by searching
    every histogram (small teacher counts, all distances)."""
    rng = np.random.default_rng(100 + seed)
    c, t = int(rng.integers(2, 5)), int(rng.integers(4, 16))
    counts = tuple(int(x) for x in rng.multinomial(t, rng.dirichlet(np.full(c, 0.4))))
    gamma = float(rng.choice([0.1, 0.3, 0.5, 1.0]))
    l = int(rng.integers(1, 9))
    beta = float(rng.choice([0.05, 0.2, 0.5]))
    ours = lnmax.smooth_sensitivity(np.asarray(counts), gamma, [l], beta)[0]
    truth = brute_force_smooth_sensitivity(counts, gamma, l, beta)
    assert truth <= ours * (1 + 1e-9) + 1e-15


def test_2017_smooth_sensitivity_defects_pinned():
    gamma, l, beta = 0.5, 3, 0.5
    # Defect 1: unsorted counts. The plurality is class 1, so the old code returns 0.
    unsorted = [0, 5, 2, 0]
    assert reference_2017_smoothed_sens(unsorted, gamma, l, beta) == 0
    ours = lnmax.smooth_sensitivity(np.asarray(unsorted), gamma, [l], beta)[0]
    assert ours > 0
    assert ours == lnmax.smooth_sensitivity(np.asarray(sorted(unsorted, reverse=True)), gamma, [l], beta)[0]
    # Defect 2: even on sorted counts, the path-only estimate is below the true smooth
    # sensitivity (brute force), so it is no smooth upper bound.
    counts = (5, 2, 0, 0)
    truth = brute_force_smooth_sensitivity(counts, gamma, l, beta)
    assert reference_2017_smoothed_sens(list(counts), gamma, l, beta) < 0.5 * truth
    assert truth <= lnmax.smooth_sensitivity(np.asarray(counts), gamma, [l], beta)[0]


def test_smooth_sensitivity_is_beta_smooth():
    """S(d) <= e^beta S(d') for neighbours (Definition 2.1's smoothness)."""
    rng = np.random.default_rng(7)
    beta = 0.09
    for _ in range(30):
        counts = tuple(int(x) for x in rng.multinomial(40, rng.dirichlet(np.full(4, 0.3))))
        s = lnmax.smooth_sensitivity(np.asarray(counts), 0.1, range(1, 9), beta)
        for d in itertools.islice(vote_neighbours(counts), 6):
            s2 = lnmax.smooth_sensitivity(np.asarray(d), 0.1, range(1, 9), beta)
            assert np.all(s <= math.exp(beta) * s2 * (1 + 1e-9) + 1e-300)


def test_smooth_sensitivity_shapes_and_scale():
    rng = np.random.default_rng(0)
    votes = rng.multinomial(250, rng.dirichlet(np.full(10, 0.1)), size=(4, 5))
    ss = lnmax.smooth_sensitivity(votes, 0.05, range(1, 9), 0.09)
    assert ss.shape == (4, 5, 8)
    assert np.all(np.isfinite(ss)) and np.all(ss >= 0)
    big = np.zeros((2, 1000))
    big[0, 0] = 10_000
    big[1, :10] = 1000
    with np.errstate(over="raise", invalid="raise"):
        out = lnmax.smooth_sensitivity(big, 0.05, range(1, 9), 0.09)
    assert np.all(np.isfinite(out))


def test_sanitized_eps_release():
    rng = np.random.default_rng(0)
    votes = rng.multinomial(250, rng.dirichlet(np.full(10, 0.1)), size=100)
    a = lnmax_release.sanitized_eps(votes, 0.05, 1e-5, 0.09, noise=NoiseSource(5))
    b = lnmax_release.sanitized_eps(votes, 0.05, 1e-5, 0.09, noise=NoiseSource(5))
    assert a.value == b.value
    # Dilation (e^beta - 1) ln(2/delta) plus sliding k times as much: the published upper bound's
    # shift a = 1/2 + ln(1/eta)/s widens the sliding step by k = 1 + a (e^beta - 1) (issue 51).
    s = math.expm1(0.09) * math.log(2 / 1e-5)
    k = 1 + (0.5 + math.log(1 / 1e-5) / s) * math.expm1(0.09)
    assert a.eps_release == pytest.approx(s + k * s, rel=1e-8)
    assert a.value >= a.data_dependent.eps
    ss = lnmax.smooth_sensitivity(votes, 0.05, range(1, 9), 0.09).sum(axis=0) / np.arange(1, 9)
    assert a.smooth_sensitivity == pytest.approx(ss.max())
    # One extra grid step of sensitivity for rounding onto the grid.
    assert a.noise_scale == pytest.approx((a.smooth_sensitivity + a.grid) / s, rel=1e-6)
    assert a.value == a.units * a.grid and isinstance(a.units, int)
    # The release is the data-dependent eps shifted up by a S~ plus (discrete) Laplace noise of that scale.
    draws = np.array([lnmax_release.sanitized_eps(votes[:20], 0.05, 1e-5, 0.09,
                                          noise=NoiseSource(s)).value for s in range(300)])
    ref = lnmax_release.sanitized_eps(votes[:20], 0.05, 1e-5, 0.09, noise=NoiseSource(0))
    assert ref.noise_scale / ref.grid > 20  # fine grid: the continuous KS test applies
    from scipy import stats

    ss_units = ref.smooth_sensitivity / ref.grid * (1 + 1e-9) + 1  # the centre: shifted up (issue 51)
    centred = (draws - ref.data_dependent.eps - ref.shift * ss_units * ref.grid) / ref.noise_scale
    assert stats.kstest(centred, "laplace").pvalue > 1e-3
    assert stats.kstest(centred / 2, "laplace").pvalue < 1e-3


# --------------------------------------------------------------------------- limits (issue 12)


@pytest.mark.parametrize("gamma", [1e-7, 1e-5, 355.0, 1e3, 1e300])
def test_extreme_gamma_runs_in_bounded_memory(gamma):
    """gamma above ~355 overflowed math.exp; below ~1e-5 the envelope grid took 20+ GB.
    Both now run on a grid of at most _MAX_CELLS cells and give finite values."""
    votes = np.array([[200, 30, 20], [90, 80, 80], [250, 0, 0]])
    lnmax._cached_envelope.cache_clear()
    grid, envelope = lnmax._sensitivity_envelope(gamma, np.arange(1.0, 9.0))
    assert grid.size <= lnmax._MAX_CELLS and envelope.shape == (grid.size, 8)
    s = lnmax.smooth_sensitivity(votes, gamma, range(1, 9), 0.09)
    assert np.all(np.isfinite(s)) and np.all(s >= 0)
    assert np.isfinite(lnmax.data_dependent_eps(votes, gamma, 1e-5).eps)


def test_logmgf_large_eps_matches_the_plain_bound():
    """In log space past exp overflow: q = 0 gives log(1) = 0 (Theorem 3), and any q above
    1/(1+e^eps) gets the data-independent bound."""
    l = np.arange(1.0, 5.0)
    for eps in (710.0, 1e4):
        got = lnmax.logmgf(np.array([0.0, 1e-3]), eps, l)
        assert np.allclose(got[0], 0.0)
        assert np.allclose(got[1], np.minimum(0.5 * eps * eps * l * (l + 1), eps * l))


def test_too_many_moments_refused_with_the_limit():
    with pytest.raises(PateError, match=str(lnmax.MAX_MOMENTS)):
        lnmax.check_moments(range(1, lnmax.MAX_MOMENTS + 2))


def test_huge_vote_gap_chunks_the_distance_range(monkeypatch):
    """A vote gap far above the block size is walked in chunks (same result)."""
    votes = np.array([[60000, 100, 50]])
    want = lnmax.smooth_sensitivity(votes, 0.01, range(1, 4), 0.05)
    monkeypatch.setattr(lnmax, "_BLOCK_ELEMENTS", 1 << 10)
    got = lnmax.smooth_sensitivity(votes, 0.01, range(1, 4), 0.05)
    assert np.array_equal(got, want)
