"""Statistical tests of the noisy aggregators (pate.release.aggregation)."""

import math

import numpy as np
import pytest
from scipy import stats

from analysis.bounds import lnmax as lnmax_analysis
from analysis.core.errors import PateError
from analysis.mechanisms import noisy_max
from analysis.mechanisms.record import UNANSWERED
from pate.release import aggregation


def tile(counts, n):
    return np.tile(np.asarray(counts, dtype=np.int32), (n, 1))


@pytest.mark.parametrize("counts", [[30, 10, 5, 5], [20, 18, 12], [12, 11, 10, 9, 8]])
def test_lnmax_disagreement_below_lemma4(counts):
    gamma = 0.2
    labels = aggregation.lnmax(tile(counts, 100_000), gamma, aggregation.noise_source(0))
    miss = np.mean(labels != np.argmax(counts))
    stderr = math.sqrt(max(miss * (1 - miss), 1e-12) / labels.size)
    assert miss - 4 * stderr <= lnmax_analysis.q_bound(np.asarray(counts), gamma)


def test_laplace_noise_scale_ks():
    votes = tile([3, 1, 0, 6], 5000)
    noise = (noisy_max.laplace_noisy_counts(votes, 0.5, aggregation.noise_source(1)) - votes).ravel()
    assert stats.kstest(noise, "laplace", args=(0, 2.0)).pvalue > 1e-3
    assert stats.kstest(noise, "laplace", args=(0, 4.0)).pvalue < 1e-6


def test_gaussian_noise_passes_ks_at_sigma_fails_at_2sigma():
    votes = tile([3, 1, 0, 6], 5000)
    sigma = 7.0
    noise = (noisy_max.gaussian_noisy_counts(votes, sigma, aggregation.noise_source(2)) - votes).ravel()
    assert stats.kstest(noise, "norm", args=(0, sigma)).pvalue > 1e-3
    assert stats.kstest(noise, "norm", args=(0, 2 * sigma)).pvalue < 1e-6


def test_gnmax_two_classes_matches_normal_cdf():
    """With two classes, Pr[answer = 0] = Phi((n0 - n1) / (sigma sqrt 2))."""
    sigma, n = 4.0, 200_000
    labels = aggregation.gnmax(tile([12, 9], n), sigma, aggregation.noise_source(3))
    expected = stats.norm.cdf(3 / (sigma * math.sqrt(2)))
    assert abs(np.mean(labels == 0) - expected) < 4 * math.sqrt(expected * (1 - expected) / n)


@pytest.mark.parametrize("top,threshold", [(150, 160), (200, 190), (125, 125)])
def test_confident_gnmax_answer_rate(top, threshold):
    sigma1, n = 20.0, 100_000
    counts = [top, 250 - top]
    labels = aggregation.confident_gnmax(tile(counts, n), threshold, sigma1, 10.0, aggregation.noise_source(4))
    rate = np.mean(labels != UNANSWERED)
    expected = stats.norm.sf((threshold - max(counts)) / sigma1)
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / n) + 1e-9
    answered = labels[labels >= 0]
    assert set(np.unique(answered)) <= {0, 1}


def test_same_key_same_labels_fresh_keys_differ():
    votes = tile([5, 5, 5], 200)
    a = aggregation.gnmax(votes, 3.0, aggregation.noise_source(9))
    b = aggregation.gnmax(votes, 3.0, aggregation.noise_source(9))
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
        aggregation.aggregate(tile([1, 2], 3), mechanism, aggregation.noise_source(0), **kwargs)


def test_seed_key_has_128_bits_and_every_bit_counts():
    """A research seed is Philox's 128-bit key as is: seeds that differ only above bit 32
    or bit 64 give different keys and different labels (jax.random.key kept 32 bits)."""
    seed = (0xDEADBEEF << 96) | (0x12345678 << 64) | (0x9ABCDEF0 << 32) | 0x0FEDCBA9
    key = aggregation.noise_source(seed).key_material()
    assert key.dtype == np.uint64 and key.size == 2
    assert int(key[0]) | (int(key[1]) << 64) == seed
    votes = tile([10, 10, 10, 10], 400)
    base = aggregation.gnmax(votes, 5.0, aggregation.noise_source(seed))
    for flip in (1 << 32, 1 << 64, 1 << 127):
        other = aggregation.gnmax(votes, 5.0, aggregation.noise_source(seed ^ flip))
        assert not np.array_equal(base, other), hex(flip)
    low = aggregation.gnmax(votes, 5.0, aggregation.noise_source(seed & 0xFFFFFFFF))
    assert not np.array_equal(base, low)


@pytest.mark.parametrize("seed", [-1, 2**128, 1.5, "7", True])
def test_seed_out_of_range_refused(seed):
    with pytest.raises(PateError, match="seed"):
        aggregation.noise_source(seed)


def test_unseeded_noise_reads_os_entropy(monkeypatch):
    """Without a seed every draw reads os.urandom (no 63- or 32-bit seed in between)."""
    import os

    calls = []
    real = os.urandom

    def spy(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", spy)
    noise = aggregation.noise_source()
    assert noise.key_material() is None
    aggregation.lnmax(tile([3, 2, 1], 50), 0.5, noise)
    assert calls and sum(calls) >= 8 * 50 * 3  # 64 fresh bits per noise value


def test_noise_is_float64_beyond_float32_tails():
    """float32 Laplace(1) stopped near ±16 and N(0,1) near ±5.4; the float64 samplers reach
    36.7 and 8.29 (largest grid point), so a label impossible under float32 noise is possible."""
    from analysis.core.noise import NoiseSource

    source = NoiseSource(5)
    noisy = noisy_max.gaussian_noisy_counts(tile([0, 0], 4), 1.0, source)
    assert noisy.dtype == np.float64
    from scipy import special

    v = np.float64(2.0**-53)  # the smallest grid point
    assert -np.log(v) > 36.7 and -special.ndtri(v / 2) > 8.29


def test_jax_key_refused():
    import jax

    with pytest.raises(PateError, match="NoiseSource"):
        aggregation.gnmax(tile([1, 2], 3), 1.0, jax.random.key(0))
