"""Noisy aggregators of teacher votes: a mechanism record's sampler run on the votes
(`run`), with the noise source of one release (`noise_source`), and the PATE papers' three
aggregators by name (`lnmax`, `gnmax`, `confident_gnmax`). Pure functions of
``(votes, parameters, noise)``; each record's sampler and its analysis live in
`analysis.mechanisms` (LNMax, GNMax, Confident-GNMax in `noisy_max`; permute-and-flip and the
exponential mechanism, sampled exactly, in their own modules).

Inputs and outputs are numpy arrays. The noise is float64, drawn on the host from an
:class:`analysis.core.noise.NoiseSource`: fresh OS entropy for every draw unless a seed is
given on purpose (research only: a 128-bit Philox key, every bit used). Anyone who knows
the seed can remove the noise, so a seed is never written into any file.
:func:`noise_source` makes one.

Privacy (neighbouring training sets change one teacher's vote): LNMax, permute-and-flip and
the exponential mechanism answer ``2 gamma``-DP each (PATE 2017, Section 3; their modules);
GNMax and the threshold step are analysed with Rényi DP in ``analysis.bounds.gnmax`` (PATE
2018, Section 4). The float64 samplers of LNMax and the Gaussians are within Kolmogorov
distance 2^-50 of the ideal noise, which adds at most ``analysis.core.noise.sampling_delta(Q, c, ε)``
to δ over Q queries of c noise coordinates (about 4e-10 at Q = 1000, c = 11, ε = 2; the
derivation is in ``analysis.core.noise``); the exact samplers add nothing (`Mechanism.exact`).
"""

from __future__ import annotations

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import noisy_max, registry
from analysis.mechanisms.record import Mechanism, check_source


def noise_source(seed: int | None = None) -> NoiseSource:
    """The noise of one release: OS entropy, or ``seed`` (``0 <= seed < 2**128``, research only)."""
    return NoiseSource(seed)


noise_key = noise_source  # the name earlier versions used (tests and user scripts call it)




def lnmax(votes, gamma, noise) -> np.ndarray:
    """LNMax (PATE 2017, Eq. 1): ``argmax_j n_j + Lap(1/gamma)``; int32 labels."""
    return noisy_max.LNMax(gamma).sample(votes, noise)


def gnmax(votes, sigma, noise) -> np.ndarray:
    """GNMax (PATE 2018, Section 4.1): ``argmax_j n_j + N(0, sigma^2)``; int32 labels."""
    return noisy_max.GNMax(sigma).sample(votes, noise)


def confident_gnmax(votes, threshold, sigma_threshold, sigma, noise, offsets=None) -> np.ndarray:
    """Confident-GNMax (PATE 2018, Algorithm 1), with the student's check ``offsets`` for
    Interactive-GNMax (`analysis.mechanisms.noisy_max.ConfidentGNMax.sample`); unanswered
    queries get label `analysis.mechanisms.record.UNANSWERED` (-1)."""
    return noisy_max.ConfidentGNMax(threshold, sigma_threshold, sigma).sample(votes, noise, offsets)


def run(votes, mechanism: Mechanism, noise, offsets=None) -> np.ndarray:
    """Runs a mechanism record (`analysis.mechanisms.registry`) on every row of ``votes``: its
    own sampler (`Mechanism.sample`; ``offsets``: Interactive-GNMax's check, a threshold step's only)."""
    if not isinstance(mechanism, Mechanism) or not mechanism.needs_teachers:
        raise PateError(f"not a mechanism record that aggregates votes: {mechanism!r}")
    if offsets is not None and not mechanism.threshold_step:
        raise PateError(f"check offsets (Interactive-GNMax) apply to a threshold step only, not {mechanism.name}")
    return mechanism.sample(votes, check_source(noise), offsets)


def aggregate(votes, mechanism: str, noise, offsets=None, **params) -> np.ndarray:
    """Runs the named mechanism with its parameters (``gamma``; ``sigma``; ``threshold``,
    ``sigma_threshold``, ``sigma``), checked by its record."""
    return run(votes, registry.from_options(mechanism, **params), noise, offsets)
