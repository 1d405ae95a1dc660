"""pate.programs.keys: 128-bit noise keys from OS entropy or from all the bits of a research seed."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.core.errors import PateError
from pate.programs import keys


def test_key_holds_the_128_bits_of_os_entropy(monkeypatch):
    raw = bytes(range(1, 17))
    monkeypatch.setattr(keys.os, "urandom", lambda n: raw[:n])
    key = keys.noise_key()
    data = np.asarray(jax.random.key_data(key))
    assert data.dtype == np.uint32 and data.shape == (4,)
    assert data.tobytes() == np.frombuffer(raw, np.uint32).tobytes()
    assert keys.KEY_BITS == 128 and 32 * data.size == keys.KEY_BITS


def test_fresh_keys_differ_and_split_fold_in_work():
    a, b = keys.noise_key(), keys.noise_key()
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(b))
    folded = jax.random.fold_in(a, 7)
    pair = jax.random.split(a)
    assert jax.random.key_data(folded).shape == (4,)
    assert jax.random.key_data(pair).shape == (2, 4)
    datas = [np.asarray(jax.random.key_data(k)) for k in (a, folded, pair[0], pair[1])]
    assert len({d.tobytes() for d in datas}) == 4
    x = jax.random.normal(folded, (1000,))
    assert abs(float(x.mean())) < 0.2 and 0.8 < float(x.std()) < 1.2


def test_seed_uses_all_128_bits():
    assert keys.seed_words(2**128 - 1).tolist() == [0xFFFFFFFF] * 4
    rng = np.random.default_rng(0)
    for _ in range(20):
        seed = int.from_bytes(rng.bytes(16), "little")
        assert keys.words_to_int(keys.seed_words(seed)) == seed
    low = 12345
    for bit in (32, 64, 96, 127):
        high = low + 2**bit
        assert not np.array_equal(jax.random.key_data(keys.noise_key(low)),
                                  jax.random.key_data(keys.noise_key(high)))
        a = np.asarray(jax.random.normal(keys.noise_key(low), (64,)))
        b = np.asarray(jax.random.normal(keys.noise_key(high), (64,)))
        assert not np.allclose(a, b), f"seeds differing only in bit {bit} gave the same noise"
    # the same seed gives the same noise (research reproducibility)
    assert np.array_equal(jax.random.normal(keys.noise_key(2**100 + 3), (8,)),
                          jax.random.normal(keys.noise_key(2**100 + 3), (8,)))


def test_numpy_generator_carries_the_key():
    g1 = keys.numpy_generator(keys.noise_key(5)).random(4)
    g2 = keys.numpy_generator(keys.noise_key(5 + 2**120)).random(4)
    assert not np.allclose(g1, g2)


@pytest.mark.parametrize("seed", [-1, 2**128, 2**200, 1.5, "3", True])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(PateError, match="seed"):
        keys.noise_key(seed)


def test_training_keys_are_typed_and_draw_what_prngkey_drew():
    """The one key convention changes no seeded result: a typed training key and its named
    streams hold the bits the legacy ``PRNGKey(seed)`` and ``fold_in(., id)`` held."""
    for seed, stream_id in ((0, keys.INIT_STREAM), (7, keys.DATA_STREAM), (2**31 - 1, keys.NOISE_STREAM)):
        typed = keys.stream(keys.training_key(seed), stream_id)
        legacy = jax.random.fold_in(jax.random.PRNGKey(seed), stream_id)
        assert jax.dtypes.issubdtype(typed.dtype, jax.dtypes.prng_key)
        assert np.array_equal(jax.random.key_data(typed), legacy)
        assert np.array_equal(jax.random.permutation(typed, 10), jax.random.permutation(legacy, 10))
    assert len({keys.INIT_STREAM, keys.DATA_STREAM, keys.NOISE_STREAM}) == 3
