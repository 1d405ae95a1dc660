"""Which pool points round 2 queries: the round-1 student's least sure ones (the 2018
paper's interactive setting). Public by construction: the student is post-processing of
round 1's release, the pool is public, and the number of queries is fixed by the config
or the command line — no vote, no private value enters the choice.
"""

from __future__ import annotations

import jax
import numpy as np

#: Selection modes: lowest top probability, smallest gap between the top two, or the
#: next points in pool order (the non-interactive baseline, benchmarks only).
MODES = ("uncertain", "margin", "next")


def select(probs: np.ndarray, candidates: np.ndarray, n: int, mode: str) -> np.ndarray:
    """The `n` of `candidates` (pool indices, rows of `probs`) to query next, most wanted
    first; ties keep pool order (a stable sort)."""
    if mode == "uncertain":
        order = np.argsort(probs.max(axis=1), kind="stable")
    elif mode == "margin":
        top2 = np.sort(probs, axis=1)[:, -2:]
        order = np.argsort(top2[:, 1] - top2[:, 0], kind="stable")
    elif mode == "next":
        order = np.arange(candidates.size)
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return np.asarray(candidates)[order[:n]]


def student_probs(model, params, images: np.ndarray, batch_size: int = 500) -> np.ndarray:
    """The student's class probabilities on `images` (softmax of its output), in batches."""
    fn = jax.jit(lambda p, x: jax.nn.softmax(model.apply(p, x, train=False)))
    out = [np.asarray(fn(params, images[i: i + batch_size])) for i in range(0, images.shape[0], batch_size)]
    return np.concatenate(out) if out else np.zeros((0, 0))
