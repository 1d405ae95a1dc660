"""Interactive-GNMax (issue 22; the 2018 paper's Algorithm 2): the threshold step of
Confident-GNMax on the student's check max_j (n_j − ⌊T·p_j⌋). Its statistic against a plain
loop and brute force (range, replace-one sensitivity), P[answered] against Monte Carlo of the
aggregator, the joint bound against the exact Rényi divergence of the released pair, the
smooth-sensitivity profile against brute-force local sensitivities at every distance."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from analysis import gnmax as g
from analysis import gnmax_sensitivity
from analysis.errors import PateError
from analysis.interactive import check_offsets, check_statistic
from analysis.noise import NoiseSource
from pate import aggregation

from test_gnmax import all_histograms, gnmax_probs, neighbours


def loop_statistic(h, o):
    return max(h[j] - o[j] for j in range(len(h)))


def offsets_up_to(T, m):
    """Every offset row of m whole numbers summing to at most T."""
    return [o for o in itertools.product(range(T + 1), repeat=m) if sum(o) <= T]


def test_statistic_plain_loop_range_and_replace_one_sensitivity_brute_force():
    T, m = 5, 3
    H = list(all_histograms(T, m))
    O = offsets_up_to(T, m)
    hs = np.array([h for h in H for _ in O])
    os_ = np.array([o for _ in H for o in O])
    got = check_statistic(hs, os_)
    assert got.tolist() == [loop_statistic(h, o) for h, o in zip(hs.tolist(), os_.tolist())]
    assert got.min() == 0 and got.max() == T  # both ends reached, nothing outside
    moved = 0
    for h in H:
        for o in O:
            s = loop_statistic(h, o)
            for hp in neighbours(h):
                d = abs(loop_statistic(hp, o) - s)
                assert d <= 1
                moved = max(moved, d)
    assert moved == 1
    # without offsets: the top vote count
    assert check_statistic(np.array(H)).tolist() == [max(h) for h in H]


def test_check_offsets_floor_and_sum():
    p = np.array([[0.61, 0.29, 0.1], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 1.0]])
    o = check_offsets(p, 10)
    assert o.tolist() == [[6, 2, 1], [3, 3, 3], [0, 0, 10]]
    rng = np.random.default_rng(0)
    for T in (6, 250, 500):
        q = rng.dirichlet(np.full(10, 0.3), size=2000).astype(np.float32) * np.float32(1.0000002)  # float32 softmax
        o = check_offsets(q, T)
        assert np.all(o >= 0) and np.all(o.sum(axis=1) <= T)
        assert np.all(np.abs(o - T * q / q.sum(axis=1, keepdims=True)) <= 1 + 1e-9)
    for bad in ([[np.nan, 1.0]], [[-0.1, 1.1]], [[0.0, 0.0]], [0.5]):
        with pytest.raises(PateError):
            check_offsets(np.array(bad), 6)


def test_statistic_refuses_offsets_that_are_not_a_check():
    v = np.array([[4, 2, 0]])
    for bad in (np.array([[1, 1]]), np.array([[-1, 0, 0]]), np.array([[3, 3, 1]]), np.array([[0.5, 0, 0]])):
        with pytest.raises(PateError):
            check_statistic(v, bad)
    with pytest.raises(PateError, match="Confident-GNMax only"):
        g.data_dependent_eps(v, 1.0, 1e-5, [2.0], offsets=np.zeros_like(v))


def test_pr_answered_with_offsets_against_monte_carlo_of_the_aggregator():
    votes = np.array([[150, 50, 0], [120, 100, 30], [200, 50, 0], [40, 200, 10]])
    offsets = np.array([[0, 0, 0], [100, 100, 0], [200, 40, 0], [200, 0, 50]])
    t, s1, n = 100.0, 30.0, 40_000
    lp = g.log_pr_answered(t, s1, votes, offsets)
    assert np.allclose(np.exp(lp), stats.norm.cdf(([150, 30, 10, 200] - np.full(4, t)) / s1), rtol=1e-12)
    labels = aggregation.confident_gnmax(np.repeat(votes, n, axis=0), t, s1, 5.0, NoiseSource(3),
                                         offsets=np.repeat(offsets, n, axis=0)).reshape(4, n)
    for p, row in zip(np.exp(lp), labels):
        rate = np.mean(row >= 0)
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-4


def _exact_joint(h, hp, o, t, s1, s2, lam):
    """The exact Rényi divergence of the released (answered?, label) pair at h against hp."""
    P1 = stats.norm.cdf((loop_statistic(h, o) - t) / s1)
    Q1 = stats.norm.cdf((loop_statistic(hp, o) - t) / s1)
    p, q = gnmax_probs(h, s2), gnmax_probs(hp, s2)
    s = P1**lam * Q1 ** (1 - lam) * np.sum(p**lam * q ** (1 - lam)) + (1 - P1) ** lam * (1 - Q1) ** (1 - lam)
    return math.log(s) / (lam - 1)


@pytest.mark.parametrize("h, o, t, s1, s2", [
    ((7, 3, 0), (0, 9, 0), 6.0, 2.0, 1.0),   # the student proposes the wrong class: answered
    ((7, 3, 0), (9, 0, 0), 3.0, 2.0, 1.0),   # the student agrees: rarely answered
    ((5, 5, 0), (4, 4, 2), 2.0, 1.0, 1.0),
    ((10, 0, 0), (3, 3, 3), 8.0, 2.0, 2.0)])
def test_joint_bound_with_offsets_is_above_the_exact_divergence(h, o, t, s1, s2):
    for lam in (2.0, 5.0, 10.0):
        bound = float(g.data_dependent_eps(np.array([h]), s2, 1e-5, [lam], threshold=t, sigma_threshold=s1,
                                           offsets=np.array([o])).rdp[0])
        for hp in neighbours(h):
            assert _exact_joint(h, hp, o, t, s1, s2, lam) <= bound + 1e-9


def test_zero_offsets_are_confident_gnmax():
    rng = np.random.default_rng(1)
    votes = rng.multinomial(50, [0.6, 0.2, 0.1, 0.1], size=30)
    kw = dict(threshold=30.0, sigma_threshold=10.0)
    plain = g.data_dependent_eps(votes, 5.0, 1e-5, **kw)
    zero = g.data_dependent_eps(votes, 5.0, 1e-5, offsets=np.zeros_like(votes), **kw)
    assert np.array_equal(plain.rdp, zero.rdp)
    F0, f0 = gnmax_sensitivity.total_profile(votes, 5.0, 10.0, 50, answered_mask=None, accounting="joint", **kw)
    F1, f1 = gnmax_sensitivity.total_profile(votes, 5.0, 10.0, 50, answered_mask=None, accounting="joint",
                                             offsets=np.zeros_like(votes), **kw)
    assert np.array_equal(F0, F1) and f0 == f1


def _per_query_table(H, o, sigma, s1, t, order):
    """f_i(h) for every histogram h of the space, the check offsets of query i fixed."""
    rows = np.array(H)
    thr, gn, w, _ = g.confident_curves(rows, sigma, t, s1, [order], np.repeat(np.array([o]), len(H), axis=0))
    from analysis.confident import rdp_confident

    return dict(zip(H, rdp_confident(thr, gn, w, [order])[:, 0]))


def test_profile_with_offsets_bounds_brute_force_local_sensitivity_at_every_distance():
    """Two queries with their own offsets: for every vote set within distance d of D (one
    teacher change moves at most one vote per query), its local sensitivity of the total
    data-dependent RDP is at most F(d) of `total_profile` — the smooth bound's premise."""
    T, m, sigma, s1, t, order = 5, 3, 1.0, 1.5, 3.0, 3.0
    H = list(all_histograms(T, m))
    dist = {(a, b): sum(abs(x - y) for x, y in zip(a, b)) // 2 for a in H for b in H}
    rng = np.random.default_rng(0)
    for _ in range(6):
        rows = [H[i] for i in rng.choice(len(H), 2)]
        offs = [offsets_up_to(T, m)[i] for i in rng.choice(len(offsets_up_to(T, m)), 2)]
        tables = [_per_query_table(H, o, sigma, s1, t, order) for o in offs]
        F, f = gnmax_sensitivity.total_profile(np.array(rows), sigma, order, T, threshold=t, sigma_threshold=s1,
                                               answered_mask=None, accounting="joint", offsets=np.array(offs))
        assert f == pytest.approx(sum(tab[r] for tab, r in zip(tables, rows)), rel=1e-12)

        def ls(y):  # each query moves by one vote or none, independently
            up = sum(max(tab[n] - tab[yi] for n in list(neighbours(yi)) + [yi]) for tab, yi in zip(tables, y))
            down = sum(max(tab[yi] - tab[n] for n in list(neighbours(yi)) + [yi]) for tab, yi in zip(tables, y))
            return max(up, down)

        for d in range(T + 1):
            ball = [[h for h in H if dist[(r, h)] <= d] for r in rows]
            worst = max(ls(y) for y in itertools.product(*ball))
            assert worst <= F[d] * (1 + 1e-9) + 1e-15, (rows, offs, d)
