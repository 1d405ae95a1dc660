"""Noise keys with 128 bits of entropy.

`jax.random.key(int)` and `PRNGKey(int)` keep at most 64 bits of the integer (32 on a
default x64-disabled install), and the default threefry key holds 64 bits: too few for
noise that protects privacy (a 2^32 or 2^64 search over seeds could strip it). The keys
made here are ``rbg`` keys (XLA's RngBitGenerator), whose key data is four uint32
words, filled with 128 bits from the operating system (`os.urandom`) or, for
reproducible research only, from all 128 bits of a seed. `split` and `fold_in` work on
them as on any typed key. A seed is never written to any file.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from analysis import noise

#: Bits of entropy a key holds.
KEY_BITS = 128
#: The key implementation: RngBitGenerator with a 4 x uint32 (128-bit) key.
KEY_IMPL = "rbg"
SEED_LIMIT = 1 << KEY_BITS


def seed_words(seed: int) -> np.ndarray:
    """All 128 bits of `seed` as four uint32 words, least significant first."""
    seed = noise.check_seed(seed)  # one seed rule for every release: 0 <= seed < 2**128
    return np.array([(seed >> (32 * i)) & 0xFFFFFFFF for i in range(4)], dtype=np.uint32)


def entropy_words() -> np.ndarray:
    """128 fresh bits from the operating system as four uint32 words."""
    return np.frombuffer(os.urandom(KEY_BITS // 8), dtype=np.uint32).copy()


def noise_key(seed: int | None = None) -> jax.Array:
    """A typed ``rbg`` key holding 128 bits: fresh OS entropy, or all bits of `seed`.

    Args:
      seed: None for OS entropy (what anything released must use); an integer in
        [0, 2**128) for reproducible research runs only (whoever knows it can remove
        the noise).

    Raises:
      PateError: `seed` is not an integer in [0, 2**128).
    """
    words = entropy_words() if seed is None else seed_words(seed)
    return jax.random.wrap_key_data(words, impl=KEY_IMPL)


def words_to_int(words: np.ndarray) -> int:
    """The integer whose little-endian uint32 words are `words` (inverse of `seed_words`)."""
    return sum(int(w) << (32 * i) for i, w in enumerate(np.asarray(words, np.uint32).ravel()))


def numpy_generator(key: jax.Array) -> np.random.Generator:
    """A numpy generator seeded with all the bits of a key's data (for host-side draws
    such as Poisson sampling), so it carries the key's entropy."""
    data = np.asarray(jax.random.key_data(key), dtype=np.uint32).ravel()
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words_to_int(data))))
