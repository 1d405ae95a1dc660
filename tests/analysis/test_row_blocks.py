"""The release and its analysis computed block by block of queries (issue 43, Glyph scale):
the noisy argmaxes draw their noise for a block of rows at a time
(`analysis.mechanisms.noisy_max.noisy_argmax`), the data-dependent bounds and the report's
curves are computed per block (`analysis.bounds.gnmax.row_blocks`, `QuerySum`). Against
second implementations that hold every row at once: the same labels for a seed (the same
words of the same stream), the sampler's law from OS entropy, the same ε."""

import math

import numpy as np
import pytest
from scipy import stats

from analysis.bounds import gnmax
from analysis.bounds.confident import rdp_confident
from analysis.core import votes as votes_mod
from analysis.core.noise import NoiseSource
from analysis.accounting.rdp import DEFAULT_ORDERS, eps_from_rdp
from analysis.mechanisms import noisy_max
from analysis.reporting import report as report_mod


def histogram(rows, classes, teachers, seed):
    """A vote histogram whose rows range from near-ties to near-unanimous."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(classes, 0.3), size=rows)
    return np.stack([rng.multinomial(teachers, q) for q in p]).astype(np.int64)


def whole_argmax(votes, noise):
    """The noisy argmax as it was drawn before the blocks: one draw for every count."""
    return np.argmax(votes.astype(np.float64) + noise(votes.shape), axis=-1).astype(np.int32)


@pytest.mark.parametrize("block", [1, 7, 45, 10**6])  # below one row, a few rows, one block for all
def test_blocked_noise_gives_the_labels_of_one_draw_for_a_seed(monkeypatch, block):
    monkeypatch.setattr(noisy_max, "NOISE_BLOCK", block)
    votes = histogram(101, 9, 50, seed=1)
    for seed in (0, 2**128 - 1):
        src = NoiseSource(seed)
        want = whole_argmax(votes, lambda shape: src.normal(shape, 4.0))
        np.testing.assert_array_equal(noisy_max.GNMax(4.0).sample(votes, NoiseSource(seed)), want)
        src = NoiseSource(seed)
        want = whole_argmax(votes, lambda shape: src.laplace(shape, 1 / 0.3))
        np.testing.assert_array_equal(noisy_max.LNMax(0.3).sample(votes, NoiseSource(seed)), want)
        # Confident-GNMax: every threshold draw first, then the answers' noise
        src = NoiseSource(seed)
        top = votes.max(axis=1) + src.normal(votes.shape[0], 10.0)
        labels = whole_argmax(votes, lambda shape: src.normal(shape, 4.0))
        want = np.where(top >= 30, labels, -1)
        got = noisy_max.ConfidentGNMax(30, 10.0, 4.0).sample(votes, NoiseSource(seed))
        np.testing.assert_array_equal(got, want)


def test_blocked_noise_from_os_entropy_keeps_the_law(monkeypatch):
    """Two classes, counts (10, 0), σ = 10: P[label 0] = Φ(10 / (10·√2)) = 0.7602 for GNMax; a
    tie gives 1/2. Three rows per draw, fresh OS words for each block."""
    monkeypatch.setattr(noisy_max, "NOISE_BLOCK", 6)
    n = 6000
    labels = noisy_max.GNMax(10.0).sample(np.tile([10, 0], (n, 1)), NoiseSource())
    p = stats.norm.cdf(10 / (10 * math.sqrt(2)))
    assert stats.binomtest(int(np.sum(labels == 0)), n, p).pvalue > 1e-4
    assert stats.binomtest(int(np.sum(labels == 0)), n, 0.5).pvalue < 1e-6  # the test can tell σ apart
    ties = noisy_max.GNMax(10.0).sample(np.tile([3, 3], (n, 1)), NoiseSource())
    assert stats.binomtest(int(np.sum(ties == 0)), n, 0.5).pvalue > 1e-4


def loop_curve(votes, sigma, orders, threshold=None, sigma_threshold=None, mask=None, offsets=None):
    """Σ over queries of the per-query bounds, each query's row on its own, added in a plain loop."""
    total = np.zeros(len(orders))
    for i in range(votes.shape[0]):
        row = votes[i:i + 1]
        if threshold is None:
            total = total + gnmax.rdp(gnmax.log_q(row, sigma), sigma, orders)[0]
            continue
        thr, gn, w, _ = gnmax.confident_curves(row, sigma, threshold, sigma_threshold, orders,
                                               None if offsets is None else offsets[i:i + 1])
        if mask is None:
            total = total + rdp_confident(thr, gn, w, orders)[0]
        else:
            total = total + thr[0] + (gn[0] if mask[i] else 0.0)
    return total


def test_blocked_data_dependent_eps_is_the_sum_over_queries(monkeypatch):
    """Equal up to summation order: n non-negative terms summed in two orders differ by at
    most (n − 1)·2^-53 of the total (each addition rounds once); each per-query bound is
    an elementwise function of its row."""
    monkeypatch.setattr(gnmax, "CURVE_BLOCK", 3 * len(DEFAULT_ORDERS))  # 3 rows a block
    votes = histogram(50, 6, 40, seed=3)
    orders = DEFAULT_ORDERS
    tol = dict(rtol=50 * 2.0**-52, atol=0)
    got = gnmax.data_dependent_eps(votes, 6.0, 1e-6, orders)
    np.testing.assert_allclose(got.rdp, loop_curve(votes, 6.0, orders), **tol)
    want_eps, _ = eps_from_rdp(orders, loop_curve(votes, 6.0, orders), 1e-6)
    assert got.eps == pytest.approx(float(want_eps), rel=1e-12)
    got = gnmax.data_dependent_eps(votes, 6.0, 1e-6, orders, threshold=25, sigma_threshold=8.0)
    np.testing.assert_allclose(got.rdp, loop_curve(votes, 6.0, orders, 25, 8.0), **tol)
    logp = gnmax.log_pr_answered(25, 8.0, votes)
    assert got.expected_answered == pytest.approx(float(np.exp(logp).sum()), rel=1e-13)
    mask = np.arange(50) % 3 == 0
    got = gnmax.data_dependent_eps(votes, 6.0, 1e-6, orders, threshold=25, sigma_threshold=8.0,
                                   answered_mask=mask, accounting="realised")
    np.testing.assert_allclose(got.rdp, loop_curve(votes, 6.0, orders, 25, 8.0, mask=mask), **tol)
    offsets = np.zeros_like(votes)
    offsets[:, 0] = 5
    got = gnmax.data_dependent_eps(votes, 6.0, 1e-6, orders, threshold=25, sigma_threshold=8.0, offsets=offsets)
    np.testing.assert_allclose(got.rdp, loop_curve(votes, 6.0, orders, 25, 8.0, offsets=offsets), **tol)


def test_the_block_size_changes_no_reported_number(monkeypatch):
    """The whole GNMax report — data-dependent ε, the sanitised release (seeded) and the
    plot's curves after each query — with three rows a block and with every row in one block."""
    votes = histogram(40, 5, 30, seed=4)
    kwargs = dict(threshold=15, sigma_threshold=6.0, num_teachers=30, answered=np.ones(40, bool))

    def report(block):
        monkeypatch.setattr(gnmax, "CURVE_BLOCK", block)
        return report_mod.gnmax_report(votes, 4.0, 1e-6, noise=NoiseSource(9, 1), **kwargs)

    small, whole = report(3 * len(DEFAULT_ORDERS)), report(10**9)
    for item, other in zip(small.items, whole.items):
        assert item.key == other.key
        if isinstance(item.value, float):
            assert item.value == pytest.approx(other.value, rel=1e-12, abs=0), item.key
        else:
            assert item.value == other.value, item.key
    np.testing.assert_allclose(small.curve_dependent, whole.curve_dependent, rtol=1e-12)
    np.testing.assert_allclose(small.curve_independent, whole.curve_independent, rtol=1e-12)


def test_log_q_in_blocks_is_the_bound_of_each_row(monkeypatch):
    monkeypatch.setattr(gnmax, "CURVE_BLOCK", 8)  # one row of 5 classes a block
    votes = histogram(12, 5, 20, seed=5)
    want = np.array([gnmax.log_q(row, 3.0) for row in votes])
    np.testing.assert_array_equal(gnmax.log_q(votes, 3.0), want)
    np.testing.assert_array_equal(gnmax.log_q(votes.reshape(3, 4, 5), 3.0), want.reshape(3, 4))
    assert np.ndim(gnmax.log_q(votes[0], 3.0)) == 0


def test_rows_of_is_a_view_for_consecutive_rows_only():
    votes = histogram(10, 3, 9, seed=6)
    for idx in ([0, 1, 2, 3], [4, 5], [9], np.arange(10)):
        got = votes_mod.rows_of(votes, np.asarray(idx))
        assert np.shares_memory(got, votes)
        np.testing.assert_array_equal(got, votes[idx])
    for idx in ([3, 2, 1], [0, 2, 4], [1, 1], [0, 5, 2, 3]):  # reversed, strided, repeated, a jump
        got = votes_mod.rows_of(votes, np.asarray(idx))
        assert not np.shares_memory(got, votes)
        np.testing.assert_array_equal(got, votes[idx])
