"""Permute-and-flip on the teachers' votes (McKenna & Sheldon, "Permute-and-Flip: A new
mechanism for differentially private selection", NeurIPS 2020), sampled exactly.

Mechanism: with ``n* = max_j n_j``, visit the classes in a uniformly random order; at class r
flip a coin that shows heads with probability ``exp(−γ (n* − n_r))``; answer the first class
whose coin shows heads. The plurality's coin always shows heads, so every query is answered.

**Privacy (data-independent).** Neighbouring relation: one teacher's vote changes (one
replaced training example changes one teacher), so one count goes down by one and another up
by one: the utility ``u_r = n_r`` has sensitivity Δ = 1. Permute-and-flip with coin
probabilities ``exp(ε (u_r − u*)/(2Δ))`` is ε-DP (McKenna & Sheldon 2020, Theorem 1), so each
answer here is **ε₀ = 2γ-DP**, the level of LNMax at the same γ. It is never worse than the
exponential mechanism at the same ε in expected utility (ibid., Theorem 2) and equals
report-noisy-max with Exponential(1/γ) noise (Ding, Kifer, Steinke et al., "The permute-and-flip
mechanism is identical to report-noisy-max with exponential noise", 2021).

**Exact sampling: no floating-point δ.** The order is a Fisher–Yates shuffle on exact uniform
integers, and each coin is Bernoulli(exp(−x)) for the rational x = γ·(n* − n_r) (Canonne, Kamath
& Steinke 2020, Algorithm 1; `analysis.core.noise.bernoulli_exp_gaps`); γ is a float, which is an
exact dyadic rational, and no floating-point operation touches a probability. The sampled law
*is* the mechanism's, so the release adds no sampling δ (`Mechanism.exact`).

**Privacy (data-dependent, private).** With j* the plurality and ``g_r = n* − n_r``,

    q(D) = P[answer ≠ j*] ≤ Σ_{r ≠ j*} ½ exp(−γ g_r)        (:func:`q_bound`)

Proof: answering r ≠ j* needs r to come before j* in the order — probability ½, and the order
is drawn independently of the coins — and r's coin to show heads, probability exp(−γ g_r);
a union bound over r. (With exponential noise the pairwise difference of two noises is
Laplace(1/γ), whose tail beyond g is ½ e^{−γg}: the same bound through the noisy-max view.)
For an ε₀-DP mechanism that answers an outcome fixed by the votes with probability at least
1 − q, PATE 2017, Theorem 3 bounds the log moments (`analysis.bounds.lnmax.logmgf`), and the
moments accountant composes them (`analysis.bounds.lnmax.eps_from_q`). That ε depends on the
votes and is **private**. No smooth sensitivity of it is proven here, so no sanitised release
exists: the published figure is the data-independent one (`PermuteAndFlip.sanitised` is False).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from analysis.core.noise import NoiseSource, bernoulli_exp_gaps, randbelow_array
from analysis.core.validation import check_positive
from analysis.mechanisms.record import PureArgmax, check_source, check_votes


def log_q_bound(votes, gamma) -> np.ndarray:
    """log of the bound ``Σ_{r≠j*} ½ exp(−γ g_r)`` on P[answer ≠ j*] (module docstring), capped
    at log 1; computed in log space. Shape ``votes.shape[:-1]``."""
    gamma = check_positive("gamma", gamma)
    counts = np.asarray(check_votes(np.reshape(votes, (-1, np.shape(votes)[-1]))), dtype=np.float64)
    srt = np.sort(counts, axis=-1)
    gaps = srt[:, -1:] - srt[:, :-1]  # every class but one plurality
    log_terms = -gamma * gaps - math.log(2.0)
    out = np.minimum(np.logaddexp.reduce(log_terms, axis=-1), 0.0)
    return out.reshape(np.shape(votes)[:-1])


def q_bound(votes, gamma) -> np.ndarray:
    """The bound on P[answer ≠ j*] of :func:`log_q_bound`, as a probability."""
    return np.exp(log_q_bound(votes, gamma))


def sample(votes, gamma, source: NoiseSource) -> np.ndarray:
    """Permute-and-flip on every row of ``votes``, exactly (module docstring); int32 labels.

    Vectorised over the rows: each row's order is a Fisher–Yates shuffle on exact uniform
    integers, every class's coin is flipped (`analysis.core.noise.bernoulli_exp_gaps`), and
    the answer is the first class in the order whose coin shows heads. The coins are drawn
    independently of the order, and those after the first heads are never looked at, so the
    law is the mechanism's."""
    votes = check_votes(votes)
    source = check_source(source)
    gamma = check_positive("gamma", gamma)
    rows, classes = votes.shape
    order = np.tile(np.arange(classes, dtype=np.int64), (rows, 1))
    everyone = np.arange(rows)
    for k in range(classes - 1, 0, -1):  # Fisher–Yates, one exact uniform integer per row and step
        j = randbelow_array(source, np.full(rows, k + 1, np.int64))
        order[everyone, k], order[everyone, j] = order[everyone, j], order[everyone, k].copy()
    gaps = votes.max(axis=1, keepdims=True) - votes
    heads = bernoulli_exp_gaps(source, gaps, gamma)  # the plurality's coin always shows heads
    in_order = np.take_along_axis(heads, order, axis=1)
    first = np.argmax(in_order, axis=1)
    return order[everyone, first].astype(np.int32)


@dataclasses.dataclass(frozen=True)
class PermuteAndFlip(PureArgmax):
    """Permute-and-flip (module docstring): each answer ``2 gamma``-DP, sampled exactly, no
    sanitised release (the headline is the data-independent ε)."""

    name: ClassVar[str] = "permute-and-flip"
    summary: ClassVar[str] = ("permute-and-flip (McKenna & Sheldon 2020), exact: never worse than the "
                              "exponential mechanism; data-independent headline")
    exact: ClassVar[bool] = True

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        return sample(votes, self.gamma, source)

    def q_bound(self, votes) -> np.ndarray:
        """The bound on P[answer ≠ plurality] of every row (private): :func:`q_bound`."""
        return q_bound(votes, self.gamma)
