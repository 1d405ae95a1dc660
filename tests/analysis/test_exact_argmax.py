"""Permute-and-flip and the exponential mechanism (`analysis.mechanisms.permute_flip`,
`analysis.mechanisms.exponential`), sampled exactly: their output laws against plain-loop
second implementations (every order of the classes; the closed form), the samplers against
those laws (a chi-square test at the right γ passes, at a wrong γ fails), the pure 2γ-DP by
brute force over every neighbouring pair of small ensembles, the bounds on P[answer ≠ plurality]
by exact enumeration and Monte Carlo, and the data-dependent ε against a plain loop."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from analysis.bounds import lnmax
from analysis.core.noise import NoiseSource, bernoulli_exp, bernoulli_exp_gaps
from analysis.mechanisms import exponential, permute_flip
from analysis.mechanisms.exponential import ExponentialMechanism
from analysis.mechanisms.permute_flip import PermuteAndFlip
from conftest import vote_histograms, vote_neighbours


def pf_law(counts, gamma) -> list[float]:
    """Permute-and-flip's law by its definition: every order of the classes equally likely, the
    first class whose coin (heads with probability exp(−γ(n* − n_r))) shows heads answers."""
    top = max(counts)
    heads = [math.exp(-gamma * (top - c)) for c in counts]
    orders = list(itertools.permutations(range(len(counts))))
    law = [0.0] * len(counts)
    for order in orders:
        reach = 1.0
        for r in order:
            law[r] += reach * heads[r] / len(orders)
            reach *= 1.0 - heads[r]
    return law


def em_law(counts, gamma) -> list[float]:
    """The exponential mechanism's law: P[j] ∝ exp(γ n_j)."""
    weights = [math.exp(gamma * (c - max(counts))) for c in counts]
    return [w / sum(weights) for w in weights]


LAWS = {"permute-and-flip": pf_law, "exponential": em_law}
MODULES = {"permute-and-flip": permute_flip, "exponential": exponential}






def test_vote_histograms_and_neighbours_enumerate_what_they_claim():
    assert sorted(map(tuple, vote_histograms(3, 2))) == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert len(list(vote_histograms(4, 3))) == math.comb(6, 2)
    assert sorted(map(tuple, vote_neighbours([1, 0, 2]))) == [(0, 0, 3), (0, 1, 2), (1, 1, 1), (2, 0, 1)]


@pytest.mark.parametrize("name", sorted(LAWS))
@pytest.mark.parametrize("gamma", [0.1, 0.7, 2.5])
def test_each_answer_is_2_gamma_dp_by_brute_force(name, gamma):
    """Over every histogram of up to 5 teachers and 2-4 classes and each of its neighbours, the
    log ratio of every answer's probability is at most 2γ, and it comes close to 2γ (the claim
    is not slack by a factor of 2)."""
    law, worst = LAWS[name], 0.0
    for teachers, classes in [(1, 2), (3, 2), (5, 2), (4, 3), (3, 4)]:
        for counts in vote_histograms(teachers, classes):
            p = law(counts, gamma)
            for other in vote_neighbours(counts):
                q = law(other, gamma)
                worst = max(worst, max(abs(math.log(a / b)) for a, b in zip(p, q)))
    assert worst <= 2 * gamma + 1e-12
    assert worst >= 1.1 * gamma  # permute-and-flip reaches 2γ on these ensembles; EM 1.2γ-2γ


@pytest.mark.parametrize("gamma", [0.05, 0.4, 1.5])
def test_q_bounds_hold_on_every_small_histogram(gamma):
    """Exact enumeration: permute-and-flip's P[answer ≠ plurality] never exceeds its bound
    Σ ½ exp(−γ g) (the plurality taken as the first argmax); the exponential mechanism's equals
    its closed form."""
    for teachers, classes in [(2, 2), (6, 2), (5, 3), (6, 4), (9, 3)]:
        rows = np.array(list(vote_histograms(teachers, classes)))
        pf_bound = permute_flip.q_bound(rows, gamma)
        em_exact = exponential.q_exact(rows, gamma)
        for row, bound, exact in zip(rows.tolist(), pf_bound, em_exact):
            top = int(np.argmax(row))
            assert 1.0 - pf_law(row, gamma)[top] <= bound + 1e-12, (row, gamma)
            assert 1.0 - em_law(row, gamma)[top] == pytest.approx(exact, rel=1e-9, abs=1e-15)
    clear = np.array([[40, 0, 0, 0]])
    assert permute_flip.q_bound(clear, gamma)[0] == pytest.approx(1.5 * math.exp(-40 * gamma), rel=1e-12)
    assert permute_flip.q_bound(clear, gamma)[0] < exponential.q_exact(clear, gamma)[0]  # ½ S < S/(1+S)


@pytest.mark.parametrize("name", sorted(LAWS))
def test_the_exact_sampler_follows_the_mechanisms_law(name):
    """200,000 seeded draws on one histogram: a chi-square test against the law passes at the
    record's γ and fails at 1.5 γ (the test can tell)."""
    counts, gamma, draws = [5, 3, 1, 0], 0.4, 200_000
    labels = MODULES[name].sample(np.tile(counts, (draws, 1)), gamma, NoiseSource(11))
    seen = np.bincount(labels, minlength=len(counts))
    law = LAWS[name]
    assert stats.chisquare(seen, draws * np.array(law(counts, gamma))).pvalue > 1e-3
    assert stats.chisquare(seen, draws * np.array(law(counts, 1.5 * gamma))).pvalue < 1e-6


@pytest.mark.parametrize("name", sorted(LAWS))
def test_monte_carlo_agrees_with_the_q_bounds(name):
    """On a 250-teacher histogram, the share of 100,000 seeded answers that miss the plurality
    lies below permute-and-flip's bound and matches the exponential mechanism's exact q."""
    counts, gamma, draws = [150, 80, 20] + [0] * 7, 0.03, 100_000
    labels = MODULES[name].sample(np.tile(counts, (draws, 1)), gamma, NoiseSource(12))
    misses = int(np.sum(labels != 0))
    if name == "permute-and-flip":
        bound = float(permute_flip.q_bound(np.array([counts]), gamma)[0])
        assert stats.binomtest(misses, draws, bound, alternative="greater").pvalue > 1e-3
    else:
        exact = float(exponential.q_exact(np.array([counts]), gamma)[0])
        assert stats.binomtest(misses, draws, exact).pvalue > 1e-3


@pytest.mark.parametrize("gamma", [0.05, 0.5, 1.0, 3.0, 2.0 ** -70])
def test_vectorised_exp_coins_have_the_law_of_the_scalar_ones(gamma):
    """`bernoulli_exp_gaps` (whole part, dyadic fraction, integer γ and the scalar path of a γ
    finer than 2^-63) against exp(−γ g), binomial tests at every gap."""
    n = 40_000 if gamma > 2.0 ** -63 else 1_000  # the scalar path is slow, and its coins all heads
    gaps = np.repeat(np.arange(5), n)
    heads = bernoulli_exp_gaps(NoiseSource(13), gaps, gamma).reshape(5, -1).sum(axis=1)
    for g, h in enumerate(heads):
        p = math.exp(-gamma * g)
        assert stats.binomtest(int(h), n, p).pvalue > 1e-4 if 0 < p < 1 else h == n * p
    source = NoiseSource(14)
    scalar = sum(bernoulli_exp(source, 0.5 * 3) for _ in range(20_000))
    assert stats.binomtest(scalar, 20_000, math.exp(-1.5)).pvalue > 1e-4


def test_seeded_samples_are_reproducible_and_unseeded_ones_are_not_fixed():
    votes = np.tile([3, 3, 2], (50, 1))
    for module in MODULES.values():
        a, b = module.sample(votes, 0.3, NoiseSource(5)), module.sample(votes, 0.3, NoiseSource(5))
        assert a.dtype == np.int32 and np.array_equal(a, b)
        assert len({tuple(module.sample(votes, 0.3, NoiseSource()).tolist()) for _ in range(3)}) > 1


def plain_theorem3_eps(q, eps0, delta, moments):
    """PATE 2017, Theorem 3 and the moments accountant, one query and one order at a time."""
    best = math.inf
    for l in moments:
        total = 0.0
        for qi in q:
            bound = min(eps0 * eps0 * l * (l + 1) / 2, eps0 * l)
            if qi < (math.exp(eps0) - 1) / (math.exp(2 * eps0) - 1):
                ratio = (1 - qi) / (1 - math.exp(eps0) * qi)
                bound = min(bound, math.log((1 - qi) * ratio ** l + qi * math.exp(eps0 * l)))
            total += bound
        best = min(best, (total + math.log(1 / delta)) / l)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_data_dependent_eps_against_a_plain_loop(seed):
    rng = np.random.default_rng(seed)
    votes = rng.multinomial(100, rng.dirichlet(np.full(10, 0.3)), size=40)
    for record in (PermuteAndFlip(0.2), ExponentialMechanism(0.2)):
        eps, moment, _ = record.data_dependent(votes, 1e-5, moments=range(1, 9))
        q = record.q_bound(votes)
        assert eps == pytest.approx(plain_theorem3_eps(q, record.eps0, 1e-5, range(1, 9)), rel=1e-9)
        assert eps <= record.independent_eps(len(votes), 1e-5).eps + 1e-12
    confident = np.tile([90, 5, 5] + [0] * 7, (40, 1))
    pf, em = PermuteAndFlip(0.2), ExponentialMechanism(0.2)
    assert pf.data_dependent(confident, 1e-5)[0] < 0.2 * pf.independent_eps(40, 1e-5).eps
    assert pf.data_dependent(confident, 1e-5)[0] <= em.data_dependent(confident, 1e-5)[0]


def test_lnmax_data_dependent_eps_is_the_same_route():
    """LNMax's data-dependent ε is `eps_from_q` with its Lemma 4 bound: the refactor kept it."""
    votes = np.random.default_rng(3).multinomial(50, [0.7, 0.2, 0.1], size=30)
    direct = lnmax.data_dependent_eps(votes, 0.1, 1e-5)
    assert direct.eps == lnmax.eps_from_q(lnmax.q_bound(votes, 0.1), 0.2, 1e-5).eps


def test_the_records_say_what_they_are():
    for record in (PermuteAndFlip(0.25), ExponentialMechanism(0.25)):
        assert record.exact and not record.sanitised and record.needs_teachers and not record.threshold_step
        assert record.sampling_tv(1000, 10) == 0.0
        assert record.cost(7).kind == "pure" and record.cost(7).params == {"eps0": 0.5, "count": 7}
        assert record.published_eps(7, 1e-5)[:2] == (record.independent_eps(7, 1e-5).eps, 1e-5)
