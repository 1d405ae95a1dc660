"""Noisy aggregators of teacher votes: LNMax (PATE 2017), GNMax and Confident-GNMax
(PATE 2018). Pure functions of ``(votes, parameters, key)``.

Inputs and outputs are numpy arrays; the noise is drawn with ``jax.random`` from the key
given. :func:`noise_key` makes a key from fresh OS entropy unless a seed is given on
purpose; anyone who knows the seed can remove the noise, so a seed is never written into
a released file.

Privacy (neighbouring training sets change one teacher's vote): LNMax answers are
``2 gamma``-DP each (PATE 2017, Section 3); GNMax and the threshold step are analysed
with Rényi DP in ``analysis.gnmax`` (PATE 2018, Section 4).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from analysis.errors import PateError

UNANSWERED = -1


def noise_key(seed: int | None = None) -> jax.Array:
    """A PRNG key: from ``seed`` when given (research only), else from ``os.urandom``."""
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little") >> 1
    return jax.random.key(int(seed))


def _check_votes(votes) -> np.ndarray:
    arr = np.asarray(votes)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] < 2:
        raise PateError(f"votes must be a non-empty queries × classes histogram, got shape {arr.shape}")
    return arr


def _check_scale(name: str, value) -> float:
    if value is None:
        raise PateError(f"{name} is required for this mechanism")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise PateError(f"{name} must be a positive number, got {value}")
    return value


@jax.jit
def _laplace_noisy_counts(votes, scale, key):
    return votes + scale * jax.random.laplace(key, votes.shape, dtype=jnp.float32)


@jax.jit
def _gaussian_noisy_counts(votes, sigma, key):
    return votes + sigma * jax.random.normal(key, votes.shape, dtype=jnp.float32)


def laplace_noisy_counts(votes, gamma, key) -> np.ndarray:
    """``votes + Lap(1/gamma)`` noise on every count (float32)."""
    votes = jnp.asarray(_check_votes(votes), jnp.float32)
    return np.asarray(_laplace_noisy_counts(votes, 1.0 / _check_scale("gamma", gamma), key))


def gaussian_noisy_counts(votes, sigma, key) -> np.ndarray:
    """``votes + N(0, sigma^2)`` noise on every count (float32)."""
    votes = jnp.asarray(_check_votes(votes), jnp.float32)
    return np.asarray(_gaussian_noisy_counts(votes, _check_scale("sigma", sigma), key))


def lnmax(votes, gamma, key) -> np.ndarray:
    """LNMax (PATE 2017, Eq. 1): ``argmax_j n_j + Lap(1/gamma)``; int32 labels."""
    return np.argmax(laplace_noisy_counts(votes, gamma, key), axis=-1).astype(np.int32)


def gnmax(votes, sigma, key) -> np.ndarray:
    """GNMax (PATE 2018, Section 4.1): ``argmax_j n_j + N(0, sigma^2)``; int32 labels."""
    return np.argmax(gaussian_noisy_counts(votes, sigma, key), axis=-1).astype(np.int32)


def confident_gnmax(votes, threshold, sigma_threshold, sigma, key) -> np.ndarray:
    """Confident-GNMax (PATE 2018, Algorithm 1): answer a query only when
    ``max_j n_j + N(0, sigma_threshold^2) >= threshold``, then with GNMax at ``sigma``.

    Unanswered queries get label :data:`UNANSWERED` (-1). The two noise draws use
    independent keys split from ``key``.
    """
    votes = _check_votes(votes)
    sigma_threshold = _check_scale("sigma_threshold", sigma_threshold)
    sigma = _check_scale("sigma", sigma)
    threshold = float(threshold)
    if not np.isfinite(threshold):
        raise PateError(f"threshold must be a finite number, got {threshold}")
    k_threshold, k_answer = jax.random.split(key)
    top = jnp.asarray(votes.max(axis=-1), jnp.float32)
    noisy_top = np.asarray(_gaussian_noisy_counts(top, sigma_threshold, k_threshold))
    answered = noisy_top >= threshold
    labels = gnmax(votes, sigma, k_answer)
    return np.where(answered, labels, UNANSWERED).astype(np.int32)


MECHANISMS = ("lnmax", "gnmax", "confident-gnmax")


def aggregate(votes, mechanism: str, key, *, gamma=None, sigma=None, threshold=None,
              sigma_threshold=None) -> np.ndarray:
    """Runs the named mechanism with its parameters; checks that they are present."""
    if mechanism == "lnmax":
        return lnmax(votes, _check_scale("gamma", gamma), key)
    if mechanism == "gnmax":
        return gnmax(votes, _check_scale("sigma", sigma), key)
    if mechanism == "confident-gnmax":
        if threshold is None:
            raise PateError("confident-gnmax needs a threshold")
        return confident_gnmax(votes, threshold, sigma_threshold, sigma, key)
    raise PateError(f"unknown mechanism '{mechanism}'; choose one of {', '.join(MECHANISMS)}")
