"""The one JAX key convention: typed keys, named streams.

Every key is a typed key (`jax.random.key` / `jax.random.wrap_key_data`, never the
legacy ``PRNGKey`` array), and every independent use of a key draws from its own named
stream, ``fold_in(key, STREAM)`` with a fixed stream id (`stream`): parameters from
`INIT_STREAM`, batches, shuffles, augmentation and Poisson sampling from `DATA_STREAM`,
privacy noise from `NOISE_STREAM`; loops then fold in the teacher, epoch or step.

Training keys (`training_key`) come from a config's ``seed``: threefry keys, the same
bits as ``PRNGKey(seed)``, so a seed trains the same teachers and students as before.

Noise keys hold 128 bits of entropy.

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

from analysis.core import noise

#: Bits of entropy a key holds.
KEY_BITS = 128
#: The key implementation: RngBitGenerator with a 4 x uint32 (128-bit) key.
KEY_IMPL = "rbg"
SEED_LIMIT = 1 << KEY_BITS

#: The named streams of a key (`stream`): fixed ids, so a seed always gives the same draws.
INIT_STREAM = 0  # parameter initialisation
DATA_STREAM = 1  # batches, shuffles, augmentation, dropout, Poisson sampling
NOISE_STREAM = 2  # the Gaussian noise of DP-SGD


def training_key(seed: int) -> jax.Array:
    """The typed (threefry) key of a config's training ``seed``: no privacy rests on it
    (the noise of a release comes from `noise_key`)."""
    return jax.random.key(seed)


def stream(key: jax.Array, stream_id: int) -> jax.Array:
    """The key of one named stream of `key` (`INIT_STREAM`, `DATA_STREAM`, `NOISE_STREAM`)."""
    return jax.random.fold_in(key, stream_id)


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
