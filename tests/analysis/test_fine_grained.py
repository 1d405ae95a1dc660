"""analysis.mechanisms.fine_grained: the vote histogram and the k-NN search against plain loops, the
sensitivities by brute force over every neighbouring pair of small universes, the exact
samplers' law (chi-square passes at the right scale and fails at a wrong one), a Monte Carlo
check of the released histogram's privacy loss, the calibration, the post-processing and the
refusals; the bench's pieces on synthetic features."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from analysis.mechanisms import fine_grained as fg
from analysis.reporting.empirical_eps import clopper_pearson, eps_lower_bound
from analysis.core.errors import PateError
from analysis.core.noise import (
    NoiseSource,
    bernoulli_exp,
    discrete_gaussian_pmf,
    discrete_laplace_array,
    discrete_laplace_pmf,
)
from analysis.accounting.rdp import DEFAULT_ORDERS
from conftest import bench_module


def chi_square_pvalue(samples, pmf) -> float:
    """Pearson's test of integer samples against a pmf (cells of expectation < 5 pooled)."""
    samples = np.asarray(samples).ravel()
    reach = int(np.abs(samples).max()) + 5
    support = np.arange(-reach, reach + 1)
    probs = pmf(support)
    observed = np.bincount(samples + reach, minlength=support.size).astype(float)
    expected = probs * samples.size
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], max(samples.size - expected[keep].sum(), 0.0))
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


# --------------------------------------------------------------------------- the histogram


def histogram_loop(neighbours, labels, num_public, num_classes):
    counts = [[0] * num_classes for _ in range(num_public)]
    for row, y in zip(neighbours, labels):
        for j in row:
            counts[j][y] += 1
    return np.array(counts, dtype=np.int64)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_vote_histogram_matches_a_loop(data):
    num_public = data.draw(st.integers(1, 9))
    num_classes = data.draw(st.integers(2, 4))
    k = data.draw(st.integers(1, num_public))
    n = data.draw(st.integers(0, 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    rows = np.array([rng.choice(num_public, k, replace=False) for _ in range(n)], np.int64).reshape(n, k)
    labels = rng.integers(0, num_classes, n)
    counts = fg.vote_histogram(rows, labels, num_public, num_classes)
    assert counts.dtype == np.int64 and counts.sum() == n * k
    np.testing.assert_array_equal(counts, histogram_loop(rows, labels, num_public, num_classes))


# --------------------------------------------------------------------------- sensitivities


def _all_records(num_public, num_classes, k):
    return [(tuple(s), y) for s in itertools.combinations(range(num_public), k) for y in range(num_classes)]


def _histogram_of(dataset, num_public, num_classes, k):
    rows = np.array([r for r, _ in dataset], np.int64).reshape(len(dataset), k)
    labels = np.array([y for _, y in dataset], np.int64)
    return fg.vote_histogram(rows, labels, num_public, num_classes).ravel()


@pytest.mark.parametrize("k", [1, 2])
def test_sensitivities_by_brute_force_over_every_neighbouring_pair(k):
    """Universe: 5 public points, 3 classes, every record (k-subset, label). Replace-one: every
    data set of 2 records against every data set with one position changed to any record;
    add/remove: every data set of 0 or 1 records against it with any record appended. The
    bounds hold for every pair and are attained."""
    num_public, num_classes = 5, 3
    records = _all_records(num_public, num_classes, k)
    r = len(records)
    h0 = _histogram_of((), num_public, num_classes, k)
    h1 = np.stack([_histogram_of((a,), num_public, num_classes, k) for a in records])
    h2 = np.stack([_histogram_of(ds, num_public, num_classes, k)
                   for ds in itertools.product(records, repeat=2)]).reshape(r, r, -1)
    cells = h0.size
    replace = np.concatenate([
        (h2[:, None, :, :] - h2[None, :, :, :]).reshape(-1, cells),  # (a, b) vs (o, b)
        (h2[:, :, None, :] - h2[:, None, :, :]).reshape(-1, cells),  # (a, b) vs (a, o)
    ])
    add = np.concatenate([h1 - h0, (h2 - h1[:, None, :]).reshape(-1, cells)])
    for relation, diffs in (("replace-one", replace), ("add-remove", add)):
        l1 = np.abs(diffs).sum(axis=1)
        l2sq = (diffs**2).sum(axis=1)
        assert l1.max() == fg.l1_sensitivity(k, relation) == (2 * k if relation == "replace-one" else k)
        assert l2sq.max() == fg.l2_sensitivity_squared(k, relation)
        assert np.abs(diffs).max() == 1  # no cell moves by more than 1
        np.testing.assert_array_equal(l1, l2sq)  # entries in {-1, 0, 1}
    assert len(replace) == 2 * r**3 and len(add) == r + r * r


def test_replace_one_bound_is_reached_only_with_disjoint_supports():
    rows = np.array([[0, 1], [1, 2]])
    same_label = fg.vote_histogram(rows[:1], [0], 4, 2) - fg.vote_histogram(rows[1:], [0], 4, 2)
    other_label = fg.vote_histogram(rows[:1], [0], 4, 2) - fg.vote_histogram(rows[1:], [1], 4, 2)
    assert np.abs(same_label).sum() == 2 and np.abs(other_label).sum() == 4 == fg.l1_sensitivity(2)


# --------------------------------------------------------------------------- the k-NN search


def nearest_loop(queries, public, k):
    out = []
    for q in queries:
        dist = [(sum((int(a) - int(b)) ** 2 for a, b in zip(q, p)), j) for j, p in enumerate(public)]
        out.append([j for _, j in sorted(dist)[:k]])
    return np.array(out, np.int64)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_nearest_public_matches_a_loop_with_ties_to_the_lowest_index(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    dims = data.draw(st.integers(1, 4))
    public = rng.integers(-3, 4, (data.draw(st.integers(1, 12)), dims))
    public = np.concatenate([public, public[: data.draw(st.integers(0, 4))]])  # exact ties
    queries = rng.integers(-3, 4, (data.draw(st.integers(1, 8)), dims))
    k = data.draw(st.integers(1, len(public)))
    got = fg.nearest_public(queries.astype(np.int64), public.astype(np.int64), k, batch=3)
    np.testing.assert_array_equal(got, nearest_loop(queries, public, k))


def test_a_records_neighbours_do_not_depend_on_the_other_records():
    rng = np.random.default_rng(0)
    public = fg.quantise_rows(rng.normal(size=(300, 16)))
    queries = fg.quantise_rows(rng.normal(size=(50, 16)))
    whole = fg.nearest_public(queries, public, 3, batch=7)
    for i in (0, 17, 49):
        np.testing.assert_array_equal(fg.nearest_public(queries[i:i + 1], public, 3), whole[i:i + 1])
    perm = rng.permutation(50)
    np.testing.assert_array_equal(fg.nearest_public(queries[perm], public, 3, batch=64), whole[perm])
    assert (fg.nearest_public(public, public, 1)[:, 0] == np.arange(300)).all()  # itself first


def test_quantise_rows_is_row_wise_and_bounded():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 7)) * rng.uniform(0.01, 100, (20, 1))
    x[3] = 0
    q = fg.quantise_rows(x)
    assert q.dtype == np.int64 and np.abs(q).max() <= 2**16 and not q[3].any()
    norms = np.sqrt((q.astype(float) ** 2).sum(axis=1))
    np.testing.assert_allclose(np.delete(norms, 3), 2**16, rtol=1e-4)
    np.testing.assert_array_equal(fg.quantise_rows(x[5:6]), q[5:6])


# --------------------------------------------------------------------------- samplers' law


@pytest.mark.parametrize("scale, wrong", [(Fraction(2, 3), Fraction(3, 4)), (Fraction(5, 2), Fraction(11, 4)),
                                          (Fraction(3), Fraction(13, 4))])
def test_discrete_laplace_rational_fits_its_pmf_and_not_a_wrong_one(scale, wrong):
    z = fg.discrete_laplace_rational(NoiseSource(11), scale, 100_000)
    assert z.dtype == np.int64
    assert chi_square_pvalue(z, lambda y: discrete_laplace_pmf(y, float(scale))) > 1e-3
    assert chi_square_pvalue(z, lambda y: discrete_laplace_pmf(y, float(wrong))) < 1e-6


def test_discrete_laplace_rational_at_an_integer_scale_has_the_integer_samplers_law():
    a = fg.discrete_laplace_rational(NoiseSource(3), 4, 100_000)
    b = discrete_laplace_array(NoiseSource(4), 4, 100_000)
    reach = max(np.abs(a).max(), np.abs(b).max())
    table = np.stack([np.bincount(a + reach, minlength=2 * reach + 1),
                      np.bincount(b + reach, minlength=2 * reach + 1)])
    table = table[:, table.sum(axis=0) >= 10]
    assert stats.chi2_contingency(table).pvalue > 1e-3


@pytest.mark.parametrize("sigma2, wrong", [(Fraction(9, 4), Fraction(11, 4)), (Fraction(143, 32), Fraction(5)),
                                           (Fraction(3765, 32), Fraction(135))])
def test_discrete_gaussian_rational_fits_its_pmf_and_not_a_wrong_one(sigma2, wrong):
    z = fg.discrete_gaussian_rational(NoiseSource(12), sigma2, 100_000)
    assert chi_square_pvalue(z, lambda y: discrete_gaussian_pmf(y, float(sigma2))) > 1e-3
    assert chi_square_pvalue(z, lambda y: discrete_gaussian_pmf(y, float(wrong))) < 1e-6


def test_discrete_gaussian_rational_scalar_path_for_large_values_has_the_same_law(monkeypatch):
    """Values past the int64-safe bound take the scalar exact Bernoulli; force most there."""
    monkeypatch.setattr(fg, "INT64_SAFE", 72)  # limit (72 - p) // (q t) = (72 - 25) // 12 = 3
    calls = []
    monkeypatch.setattr(fg, "bernoulli_exp", lambda source, gamma: calls.append(gamma) or bernoulli_exp(source, gamma))
    sigma2 = Fraction(25, 4)
    z = fg.discrete_gaussian_rational(NoiseSource(13), sigma2, 20_000)
    assert (np.abs(z) > 3).mean() > 0.1 and len(calls) > 4000
    assert chi_square_pvalue(z, lambda y: discrete_gaussian_pmf(y, float(sigma2))) > 1e-3


def test_samplers_are_reproducible_with_a_seed():
    for draw in (lambda s: fg.discrete_laplace_rational(s, Fraction(7, 3), 500),
                 lambda s: fg.discrete_gaussian_rational(s, Fraction(37, 4), 500)):
        np.testing.assert_array_equal(draw(NoiseSource(5)), draw(NoiseSource(5)))
        assert not np.array_equal(draw(NoiseSource(5)), draw(NoiseSource(6)))


# --------------------------------------------------------------------------- privacy, Monte Carlo


def _neighbours_pair():
    """Two replace-one neighbours on 2 public points, 2 classes, k = 1: the one record votes
    (point 0, class 0) in D and (point 1, class 1) in D' (Δ₁ = 2, attained)."""
    c = fg.vote_histogram([[0]], [0], 2, 2)
    c_prime = fg.vote_histogram([[1]], [1], 2, 2)
    return c, c_prime


def _releases(counts, noise, n, seed):
    """n independent releases of `counts` (one call: the noise is i.i.d. over cells)."""
    tiled = np.tile(counts, (n, 1))
    return fg.release(tiled, noise, NoiseSource(seed)).reshape(n, *counts.shape)


EVENTS = {
    "worst: C00 >= 1 and C11 <= 0": lambda z: (z[:, 0, 0] >= 1) & (z[:, 1, 1] <= 0),
    "C00 >= 2": lambda z: z[:, 0, 0] >= 2,
    "point 0 labelled 0": lambda z: z[:, 0, 0] >= z[:, 0, 1],
    "both points labelled 0": lambda z: (z[:, 0, 0] >= z[:, 0, 1]) & (z[:, 1, 0] >= z[:, 1, 1]),
}


def _eps_bounds(z, z_prime, delta=0.0, alpha=1e-4):
    """Per event, both directions: the one-sided lower confidence bound of the ε it forces
    and the point estimate."""
    n = len(z)
    lower, point = {}, {}
    for name, event in EVENTS.items():
        hits = event(z).sum(), event(z_prime).sum()
        for (a, b), tag in (((hits[0], hits[1]), ""), ((hits[1], hits[0]), " (reversed)")):
            lo_a, _ = clopper_pearson(a, n, alpha)
            _, hi_b = clopper_pearson(b, n, alpha)
            lower[name + tag] = float(eps_lower_bound(lo_a, hi_b, delta))
            point[name + tag] = math.log(max(a - delta * n, 1e-300) / max(b, 1)) if a else -math.inf
    return lower, point


def test_laplace_release_privacy_loss_stays_within_eps_and_exceeds_it_with_half_the_noise():
    c, c_prime = _neighbours_pair()
    noise = fg.laplace_noise(1, 1)  # b = 2
    n = 100_000
    lower, point = _eps_bounds(_releases(c, noise, n, 21), _releases(c_prime, noise, n, 22))
    assert max(lower.values()) <= noise.eps()
    assert point["worst: C00 >= 1 and C11 <= 0"] == pytest.approx(1.0, abs=0.05)  # the bound is attained
    halved = fg.Noise.laplace(noise.parameter / 2, 1)
    lower, _ = _eps_bounds(_releases(c, halved, n, 23), _releases(c_prime, halved, n, 24))
    assert lower["worst: C00 >= 1 and C11 <= 0"] > noise.eps() + 0.5


def test_gaussian_release_privacy_loss_stays_within_eps_delta():
    c, c_prime = _neighbours_pair()
    delta = 1e-5
    noise = fg.gaussian_noise(1, delta, 1)
    n = 50_000
    lower, _ = _eps_bounds(_releases(c, noise, n, 31), _releases(c_prime, noise, n, 32), delta)
    assert max(lower.values()) <= noise.eps(delta)


# --------------------------------------------------------------------------- ε, ρ, calibration


def gaussian_eps_loop(rho, delta):
    """min over the orders of α ρ + log(1 − 1/α) − (log δ + log α)/(α − 1) (CKS 2020, Prop. 12),
    orders <= 1.01 skipped, 0 once δ² > 1 − e^{−αρ}, clipped at 0 (analysis.accounting.rdp's rule)."""
    best = math.inf
    for a in DEFAULT_ORDERS:
        r = a * rho
        if delta**2 > -math.expm1(-r):
            return 0.0
        if a <= 1.01:
            continue
        best = min(best, max(r + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1), 0.0))
    return best


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("relation", fg.RELATIONS)
def test_eps_and_rho_formulas(k, relation):
    d1 = 2 * k if relation == "replace-one" else k
    lap = fg.Noise.laplace(Fraction(7, 3), k, relation)
    assert lap.pure_eps == Fraction(d1) * 3 / 7 and lap.eps() >= d1 * 3 / 7
    gau = fg.Noise.gaussian(Fraction(37, 4), k, relation)
    assert gau.rho == Fraction(d1, 2) * Fraction(4, 37)  # Δ₂² = Δ₁
    assert gau.eps(1e-5) == pytest.approx(gaussian_eps_loop(float(gau.rho), 1e-5), rel=1e-9)


@pytest.mark.parametrize("eps", [0.5, 1, 2, 3, 0.3, Fraction(7, 10)])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_laplace_calibration_round_trips(eps, k):
    noise = fg.laplace_noise(eps, k)
    assert noise.pure_eps <= Fraction(eps) and float(noise.pure_eps) >= float(eps) - 1e-6
    assert noise.parameter == Fraction(2 * k) / noise.pure_eps
    assert fg.laplace_noise(noise.pure_eps, k) == noise
    assert fg.laplace_noise(noise.eps(), k).parameter <= noise.parameter * (1 + 1e-6)


@pytest.mark.parametrize("eps, delta", [(0.5, 1e-5), (1, 1e-5), (2, 1e-5), (3, 1e-5), (1, 1e-3)])
@pytest.mark.parametrize("k", [1, 3])
def test_gaussian_calibration_meets_the_target_and_is_nearly_least(eps, delta, k):
    noise = fg.gaussian_noise(eps, delta, k)
    assert noise.eps(delta) <= eps
    grid = Fraction(1, fg.VARIANCE_DENOMINATOR)
    less = fg.Noise.gaussian(noise.parameter * (1 - Fraction(1, 1000)) - grid, k)
    assert less.eps(delta) > eps  # one grid step and 0.1 % less noise breaks the target
    again = fg.gaussian_noise(noise.eps(delta), delta, k).parameter  # ε rounded down to 1e-6:
    assert noise.parameter <= again <= noise.parameter + grid  # at most one grid step more


def test_costs_for_the_ledger():
    lap = fg.laplace_noise(1, 2)
    assert lap.cost().kind == "pure" and lap.cost().params == {"eps0": 1.0, "count": 1.0}
    gau = fg.gaussian_noise(1, 1e-5, 2)
    assert gau.cost().kind == "discrete-gaussian" and gau.cost().params["mu2"] >= float(2 * gau.rho)
    with pytest.raises(PateError, match="replace-one"):
        fg.laplace_noise(1, 1, "add-remove").cost()


# --------------------------------------------------------------------------- release, post-processing


def test_release_adds_integer_noise_and_leaves_the_counts_alone():
    counts = fg.vote_histogram([[0, 1], [2, 0]], [1, 0], 3, 2)
    before = counts.copy()
    out = fg.release(counts, fg.laplace_noise(1, 2), NoiseSource(7))
    assert out.dtype == np.int64 and out.shape == counts.shape
    np.testing.assert_array_equal(counts, before)
    np.testing.assert_array_equal(out, fg.release(counts, fg.laplace_noise(1, 2), NoiseSource(7)))


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_smoothing_labels_and_margins_match_loops(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n, c = data.draw(st.integers(1, 10)), data.draw(st.integers(2, 4))
    m = data.draw(st.integers(1, 5))
    noisy = rng.integers(-2, 3, (n, c))  # small values: ties are common
    graph = rng.integers(0, n, (n, m))
    smoothed = fg.smooth(noisy, graph)
    loop = np.array([[sum(int(noisy[g, j]) for g in graph[i]) for j in range(c)] for i in range(n)])
    np.testing.assert_array_equal(smoothed, loop)
    harmonic = np.array([[sum(int(noisy[g, j]) * (2**20 // (r + 1)) for r, g in enumerate(graph[i]))
                          for j in range(c)] for i in range(n)])  # the r-th nearest weighted 1/r
    np.testing.assert_array_equal(fg.smooth(noisy, graph, "harmonic"), harmonic)
    labels, margins = fg.labels_and_margins(smoothed)
    for i, row in enumerate(loop.tolist()):
        top = max(row)
        assert labels[i] == row.index(top)  # the lowest class among the tied
        assert margins[i] == top - sorted(row)[-2]


def _exact_posterior_of_class_0(gap: int, scale: Fraction, support: int = 400) -> float:
    """P[c0 − Z0 >= c1 − Z1] = P[Z1 − Z0 >= gap] (gap = c1 − c0; a tie goes to class 0) for Z0, Z1 i.i.d.
    discrete Laplace ∝ exp(−|z|/scale), summed over the pmf (support ±400: the rest is below 1e-60)."""
    z = np.arange(-support, support + 1)
    pmf = np.exp(-np.abs(z) / float(scale))
    pmf /= pmf.sum()
    difference = np.convolve(pmf, pmf[::-1])  # the law of Z1 − Z0 on −2·support .. 2·support
    return float(difference[np.arange(-2 * support, 2 * support + 1) >= gap].sum())


@pytest.mark.parametrize("gap", [-3, 0, 2, 6])
def test_label_posterior_matches_the_exact_posterior_of_one_point(gap):
    """One point, two classes, no smoothing: the posterior that class 0 is the noiseless argmax given
    the released (c0, c1) is P[Z1 − Z0 >= c1 − c0] under a flat prior; the Monte Carlo frequency lies
    within 5 binomial s.d. of the exact sum, and a posterior that forgot the tie rule (strict >) is
    caught at gap 0."""
    scale, draws = Fraction(2), 1500
    noise = fg.Noise("laplace", scale, 1)
    noisy = np.array([[10, 10 + gap]], np.int64)
    got = fg.label_posterior(noisy, np.array([[0]]), noise, draws, NoiseSource(5))
    exact = _exact_posterior_of_class_0(gap, scale)
    sd = math.sqrt(exact * (1 - exact) / draws)
    assert got.shape == (1, 2) and got.sum() == pytest.approx(1.0)
    assert abs(got[0, 0] - exact) <= 5 * sd + 1e-12
    if gap == 0:  # ties to class 0: strictly-greater would give P[Z1 − Z0 >= 1], 5+ s.d. away
        assert abs(got[0, 0] - _exact_posterior_of_class_0(1, scale)) > 5 * sd


@pytest.mark.parametrize("kind,parameter", [("laplace", Fraction(3, 2)), ("gaussian", Fraction(9))])
def test_label_posterior_matches_a_loop_over_the_same_draws(kind, parameter):
    """The vectorised posterior equals a plain loop over points, neighbours and classes fed the same
    seeded draws of the noise (the smoothed argmax of C̃ − Z', ties to the lowest class), for both laws
    and harmonic weights."""
    rng = np.random.default_rng(3)
    points, classes, m, draws = 7, 3, 3, 25
    noisy = rng.integers(-4, 12, size=(points, classes)).astype(np.int64)
    graph = np.stack([np.arange(points)] + [rng.permutation(points) for _ in range(m - 1)], axis=1)
    noise = fg.Noise(kind, parameter, 1)
    got = fg.label_posterior(noisy, graph, noise, draws, NoiseSource(9), "harmonic")
    source, w = NoiseSource(9), fg.smoothing_weights("harmonic", m)
    expected = np.zeros((points, classes))
    for _ in range(draws):
        z = fg.noise_draw(noise, source, (points, classes))
        for j in range(points):
            scores = [sum(int(w[r]) * int(noisy[graph[j, r], c] - z[graph[j, r], c]) for r in range(m))
                      for c in range(classes)]
            expected[j, scores.index(max(scores))] += 1 / draws
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_label_posterior_is_sure_where_the_margin_dwarfs_the_noise_and_refuses_bad_input():
    noise = fg.Noise("laplace", Fraction(1), 1)
    noisy = np.array([[200, 0, 0], [0, 0, 200]], np.int64)
    got = fg.label_posterior(noisy, np.array([[0], [1]]), noise, 50, NoiseSource(1))
    np.testing.assert_array_equal(got, [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(PateError, match="draws"):
        fg.label_posterior(noisy, np.array([[0], [1]]), noise, 0, NoiseSource(1))
    with pytest.raises(PateError, match="noise must be"):
        fg.label_posterior(noisy, np.array([[0], [1]]), 2.0, 10, NoiseSource(1))


def test_harmonic_smoothing_keeps_a_near_neighbour_that_uniform_smoothing_outvotes():
    """A point whose own row says class 0 while its far neighbours lean to class 1: the
    uniform sum follows the far ones, the harmonic weights (1, 1/2, 1/3, ...) the near ones;
    an unknown weighting and an overflowing count are refused."""
    noisy = np.array([[6, 0], [0, 2], [0, 2], [0, 2], [0, 2]])
    graph = np.array([[0, 1, 2, 3, 4]] * 5)
    assert fg.labels_and_margins(fg.smooth(noisy, graph))[0][0] == 1
    assert fg.labels_and_margins(fg.smooth(noisy, graph, "harmonic"))[0][0] == 0
    np.testing.assert_array_equal(fg.smoothing_weights("harmonic", 4), [2**20, 2**19, 349525, 2**18])
    with pytest.raises(PateError, match="smoothing weights must be one of"):
        fg.smooth(noisy, graph, "cosine")
    with pytest.raises(PateError, match="overflow"):
        fg.smooth(noisy * 2**40, graph, "harmonic")


# --------------------------------------------------------------------------- refusals


def _one_line(fn, match):
    with pytest.raises(PateError, match=match) as err:
        fn()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("fn, match", [
    (lambda: fg.vote_histogram(np.zeros((2, 0), int), [0, 1], 3, 2), "k .* >= 1"),
    (lambda: fg.l1_sensitivity(0), "k .* >= 1"),
    (lambda: fg.Noise.laplace(2, 0), "k .* >= 1"),
    (lambda: fg.laplace_noise(1, 0), "k .* >= 1"),
    (lambda: fg.nearest_public(np.zeros((1, 2), np.int64), np.zeros((3, 2), np.int64), 0), "k .* >= 1"),
    (lambda: fg.nearest_public(np.zeros((1, 2), np.int64), np.zeros((3, 2), np.int64), 4), "only 3 public"),
    (lambda: fg.laplace_noise(0, 1), "eps must be positive"),
    (lambda: fg.laplace_noise(-1, 1), "eps must be positive"),
    (lambda: fg.laplace_noise(float("nan"), 1), "eps must be a finite"),
    (lambda: fg.gaussian_noise(0, 1e-5, 1), "eps must be positive"),
    (lambda: fg.gaussian_noise(1, 0, 1), "delta"),
    (lambda: fg.vote_histogram([[0, 0]], [0], 3, 2), "repeat a public point"),
    (lambda: fg.vote_histogram([[0, 1], [2, 1], [1, 2]], [0, 1, 0], 3, 2), None),  # fine: distinct per row
    (lambda: fg.vote_histogram([[0]], [2], 3, 2), r"labels must lie in \[0, 2\)"),
    (lambda: fg.vote_histogram([[0]], [-1], 3, 2), r"labels must lie in \[0, 2\)"),
    (lambda: fg.vote_histogram([[3]], [0], 3, 2), r"indices must lie in \[0, 3\)"),
    (lambda: fg.vote_histogram([[0]], [0, 1], 3, 2), "2 labels for 1 records"),
    (lambda: fg.l1_sensitivity(1, "swap"), "relation"),
    (lambda: fg.Noise.laplace(0, 1), "positive"),
    (lambda: fg.release(np.zeros((2, 2), np.int64), fg.Noise.laplace(0.3, 1), NoiseSource(0)), "2\\*\\*40"),
    (lambda: fg.release(np.zeros((2, 2), np.int64), fg.Noise.gaussian(Fraction(1, 2**40), 1), NoiseSource(0)),
     "2\\*\\*40"),
    (lambda: fg.Noise.laplace(2, 1).rho, "no rho"),
    (lambda: fg.Noise.gaussian(2, 1).pure_eps, "no pure eps"),
    (lambda: fg.release(np.zeros((2, 2)), fg.laplace_noise(1, 1), NoiseSource(0)), "int64"),
    (lambda: fg.smooth(np.zeros((2, 2), np.int64), np.array([[0], [2]])), r"graph indices"),
    (lambda: fg.quantise_rows(np.array([[np.inf, 0.0]])), "finite"),
])
def test_refusals_are_one_line_pate_errors(fn, match):
    if match is None:
        fn()
        return
    _one_line(fn, match)


# --------------------------------------------------------------------------- the bench's pieces


def test_bench_pipeline_on_synthetic_clusters():
    """Three well separated clusters: the pipeline labels the pool perfectly without noise and
    well at ε = 3; the proxy's choice picks one (k, m) per (noise, ε)."""
    bench = bench_module("fine_grained")
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)) * 5

    def draw(n):
        y = rng.integers(0, 3, n)
        return centres[y] + rng.normal(size=(n, 8)), y

    (px, py), (qx, qy) = draw(600), draw(150)
    priv_q, pool_q = fg.quantise_rows(px), fg.quantise_rows(qx)
    problem = bench.Problem(priv_q, py, pool_q, qy, 3, 2, 5)
    assert problem.accuracy(1, 5, None, NoiseSource(0)) == 1.0
    rows = bench.grid(problem, bench.KINDS, [3.0], [1, 2], [1, 5], 2, 1e-5, NoiseSource(1))
    assert len(rows) == 8 and all(r["eps"] <= 3.0 for r in rows)
    assert all(r["mean"] > 0.9 for r in rows if r["m"] == 5)  # smoothing over 5 neighbours
    choice = bench.choose(rows)
    assert set(choice) == {"laplace 3", "gaussian 3"}
    assert bench.forward_knn(priv_q, py, pool_q, qy, 3, 5) == 1.0


def test_the_public_pca_spans_the_svd_subspace_of_the_pool_alone():
    """`pate.programs.public_features.fit_coefficients` (what `pate label` and the bench fit):
    the pool's mean and top principal subspace; a private row's quantised row is a function of
    that row alone (the same alone or among others)."""
    from pate.programs import public_features

    bench = bench_module("fine_grained")
    rng = np.random.default_rng(2)
    pool = rng.normal(size=(200, 30)) * np.linspace(5, 0.1, 30)
    fitted = public_features.fit_coefficients(pool, 6)
    mean, directions = fitted.mean, fitted.directions
    with pytest.raises(PateError, match="lower fine_grained.pca"):
        public_features.fit_coefficients(pool, 31)
    _, _, vt = np.linalg.svd(pool - pool.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(mean, pool.mean(axis=0))
    np.testing.assert_allclose(directions @ directions.T, vt[:6].T @ vt[:6], atol=1e-8)
    private = rng.normal(size=(5, 30))
    priv_q, pool_q = bench.quantised(private, pool, 6)
    np.testing.assert_array_equal(priv_q[2:3], bench.quantised(private[2:3], pool, 6)[0])
    assert pool_q.shape == (200, 6) and priv_q.dtype == np.int64
