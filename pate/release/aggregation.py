"""Noisy aggregators of teacher votes: LNMax (PATE 2017), GNMax and Confident-GNMax
(PATE 2018). Pure functions of ``(votes, parameters, noise)``.

Inputs and outputs are numpy arrays. The noise is float64, drawn on the host from an
:class:`analysis.core.noise.NoiseSource`: fresh OS entropy for every draw unless a seed is
given on purpose (research only: a 128-bit Philox key, every bit used). Anyone who knows
the seed can remove the noise, so a seed is never written into any file.
:func:`noise_source` makes one.

Privacy (neighbouring training sets change one teacher's vote): LNMax answers are
``2 gamma``-DP each (PATE 2017, Section 3); GNMax and the threshold step are analysed
with Rényi DP in ``analysis.bounds.gnmax`` (PATE 2018, Section 4). Those analyses are of the ideal
continuous noise; the float64 samplers used here are within Kolmogorov distance 2^-50 of
it, which adds at most ``analysis.core.noise.sampling_delta(Q, c, ε)`` to δ over Q queries of c
noise coordinates (about 4e-10 at Q = 1000, c = 11, ε = 2; the derivation is in
``analysis.core.noise``).
"""

from __future__ import annotations

import numpy as np

from analysis.mechanisms import registry
from analysis.core.errors import PateError
from analysis.bounds.interactive import check_statistic
from analysis.core.noise import NoiseSource
from analysis.core.validation import check_counts, check_positive

UNANSWERED = -1



def noise_source(seed: int | None = None) -> NoiseSource:
    """The noise of one release: OS entropy, or ``seed`` (``0 <= seed < 2**128``, research only)."""
    return NoiseSource(seed)


noise_key = noise_source  # the name earlier versions used (tests and user scripts call it)




def _source(noise) -> NoiseSource:
    if not isinstance(noise, NoiseSource):
        raise PateError("the aggregators take an analysis.core.noise.NoiseSource "
                        "(pate.release.aggregation.noise_source(seed)), not a JAX key")
    return noise


def _check_votes(votes) -> np.ndarray:
    if np.ndim(votes) != 2:
        raise PateError(f"votes must be a non-empty queries × classes histogram, got shape {np.shape(votes)}")
    return check_counts(votes).astype(np.float64)


def _check_scale(name: str, value) -> float:
    if value is None:
        raise PateError(f"{name} is required for this mechanism")
    return check_positive(name, value)


def laplace_noisy_counts(votes, gamma, noise) -> np.ndarray:
    """``votes + Lap(1/gamma)`` on every count, float64."""
    votes = _check_votes(votes)
    scale = 1.0 / _check_scale("gamma", gamma)
    return votes + _source(noise).laplace(votes.shape, scale)


def gaussian_noisy_counts(votes, sigma, noise) -> np.ndarray:
    """``votes + N(0, sigma^2)`` on every count, float64."""
    votes = _check_votes(votes)
    return votes + _source(noise).normal(votes.shape, _check_scale("sigma", sigma))


def lnmax(votes, gamma, noise) -> np.ndarray:
    """LNMax (PATE 2017, Eq. 1): ``argmax_j n_j + Lap(1/gamma)``; int32 labels."""
    return np.argmax(laplace_noisy_counts(votes, gamma, noise), axis=-1).astype(np.int32)


def gnmax(votes, sigma, noise) -> np.ndarray:
    """GNMax (PATE 2018, Section 4.1): ``argmax_j n_j + N(0, sigma^2)``; int32 labels."""
    return np.argmax(gaussian_noisy_counts(votes, sigma, noise), axis=-1).astype(np.int32)


def confident_gnmax(votes, threshold, sigma_threshold, sigma, noise, offsets=None) -> np.ndarray:
    """Confident-GNMax (PATE 2018, Algorithm 1): answer a query only when
    ``max_j n_j + N(0, sigma_threshold^2) >= threshold``, then with GNMax at ``sigma``.
    With the student's check ``offsets`` o (Interactive-GNMax, Algorithm 2;
    `analysis.bounds.interactive`) the test is on ``max_j (n_j - o_j)``: the teachers answer where
    they outvote the student.

    Unanswered queries get label :data:`UNANSWERED` (-1). The threshold noise and the
    answer noise are independent draws.
    """
    votes = _check_votes(votes)
    sigma_threshold = _check_scale("sigma_threshold", sigma_threshold)
    sigma = _check_scale("sigma", sigma)
    threshold = float(threshold)
    if not np.isfinite(threshold):
        raise PateError(f"threshold must be a finite number, got {threshold}")
    source = _source(noise)
    noisy_top = check_statistic(votes, offsets) + source.normal(votes.shape[0], sigma_threshold)
    answered = noisy_top >= threshold
    labels = gnmax(votes, sigma, source)
    return np.where(answered, labels, UNANSWERED).astype(np.int32)


def run(votes, mechanism: registry.Mechanism, noise, offsets=None) -> np.ndarray:
    """Runs a mechanism record (``analysis.mechanisms.registry``) on every row of ``votes``
    (``offsets``: Interactive-GNMax's check, Confident-GNMax only)."""
    if not isinstance(mechanism, registry.Mechanism) or mechanism.name not in _SAMPLERS:
        raise PateError(f"not a mechanism record: {mechanism!r}")
    if offsets is not None and not mechanism.threshold_step:
        raise PateError("check offsets (Interactive-GNMax) apply to confident-gnmax only")
    return _SAMPLERS[mechanism.name](votes, mechanism, noise, offsets)


#: Each record's sampler, by its name: a new mechanism is its record (`analysis.mechanisms.registry`)
#: and one entry here.
_SAMPLERS = {
    "lnmax": lambda votes, r, noise, offsets: lnmax(votes, r.gamma, noise),
    "gnmax": lambda votes, r, noise, offsets: gnmax(votes, r.sigma, noise),
    "confident-gnmax": lambda votes, r, noise, offsets: confident_gnmax(
        votes, r.threshold, r.sigma_threshold, r.sigma, noise, offsets),
}


def aggregate(votes, mechanism: str, noise, offsets=None, **params) -> np.ndarray:
    """Runs the named mechanism with its parameters (``gamma``; ``sigma``; ``threshold``,
    ``sigma_threshold``, ``sigma``), checked by its record."""
    return run(votes, registry.from_options(mechanism, **params), noise, offsets)
