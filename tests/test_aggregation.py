"""Statistical tests of the noisy aggregators (pate.aggregation)."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

from analysis import lnmax as lnmax_analysis
from analysis.errors import PateError
from pate import aggregation


def tile(counts, n):
    return np.tile(np.asarray(counts, dtype=np.int32), (n, 1))


@pytest.mark.parametrize("counts", [[30, 10, 5, 5], [20, 18, 12], [12, 11, 10, 9, 8]])
def test_lnmax_disagreement_below_lemma4(counts):
    gamma = 0.2
    labels = aggregation.lnmax(tile(counts, 100_000), gamma, jax.random.key(0))
    miss = np.mean(labels != np.argmax(counts))
    stderr = math.sqrt(max(miss * (1 - miss), 1e-12) / labels.size)
    assert miss - 4 * stderr <= lnmax_analysis.q_bound(np.asarray(counts), gamma)


def test_laplace_noise_scale_ks():
    votes = tile([3, 1, 0, 6], 5000)
    noise = (aggregation.laplace_noisy_counts(votes, 0.5, jax.random.key(1)) - votes).ravel()
    assert stats.kstest(noise, "laplace", args=(0, 2.0)).pvalue > 1e-3
    assert stats.kstest(noise, "laplace", args=(0, 4.0)).pvalue < 1e-6


def test_gaussian_noise_passes_ks_at_sigma_fails_at_2sigma():
    votes = tile([3, 1, 0, 6], 5000)
    sigma = 7.0
    noise = (aggregation.gaussian_noisy_counts(votes, sigma, jax.random.key(2)) - votes).ravel()
    assert stats.kstest(noise, "norm", args=(0, sigma)).pvalue > 1e-3
    assert stats.kstest(noise, "norm", args=(0, 2 * sigma)).pvalue < 1e-6


def test_gnmax_two_classes_matches_normal_cdf():
    """With two classes, Pr[answer = 0] = Phi((n0 - n1) / (sigma sqrt 2))."""
    sigma, n = 4.0, 200_000
    labels = aggregation.gnmax(tile([12, 9], n), sigma, jax.random.key(3))
    expected = stats.norm.cdf(3 / (sigma * math.sqrt(2)))
    assert abs(np.mean(labels == 0) - expected) < 4 * math.sqrt(expected * (1 - expected) / n)


@pytest.mark.parametrize("top,threshold", [(150, 160), (200, 190), (125, 125)])
def test_confident_gnmax_answer_rate(top, threshold):
    sigma1, n = 20.0, 100_000
    counts = [top, 250 - top]
    labels = aggregation.confident_gnmax(tile(counts, n), threshold, sigma1, 10.0, jax.random.key(4))
    rate = np.mean(labels != aggregation.UNANSWERED)
    expected = stats.norm.sf((threshold - max(counts)) / sigma1)
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / n) + 1e-9
    answered = labels[labels >= 0]
    assert set(np.unique(answered)) <= {0, 1}


def test_same_key_same_labels_fresh_keys_differ():
    votes = tile([5, 5, 5], 200)
    a = aggregation.gnmax(votes, 3.0, jax.random.key(9))
    b = aggregation.gnmax(votes, 3.0, jax.random.key(9))
    assert np.array_equal(a, b)
    c = aggregation.gnmax(votes, 3.0, aggregation.noise_key())
    d = aggregation.gnmax(votes, 3.0, aggregation.noise_key())
    assert not np.array_equal(c, d)


@pytest.mark.parametrize("kwargs", [dict(mechanism="lnmax"), dict(mechanism="gnmax", sigma=0),
                                    dict(mechanism="confident-gnmax", sigma=1, sigma_threshold=1),
                                    dict(mechanism="lnmax", gamma=-1), dict(mechanism="rr", gamma=1)])
def test_missing_or_bad_parameters(kwargs):
    mechanism = kwargs.pop("mechanism")
    with pytest.raises(PateError):
        aggregation.aggregate(tile([1, 2], 3), mechanism, jax.random.key(0), **kwargs)
