"""The exponential mechanism on the teachers' votes (McSherry & Talwar, "Mechanism design via
differential privacy", FOCS 2007), sampled exactly.

Mechanism: answer class j with probability ``exp(γ n_j) / Σ_i exp(γ n_i)``.

**Privacy (data-independent).** Neighbouring relation: one teacher's vote changes (one replaced
training example changes one teacher): one count goes down by one, another up by one, so the
utility ``u_j = n_j`` has sensitivity Δ = 1, and the exponential mechanism with weights
``exp(ε u/(2Δ))`` is ε-DP (McSherry & Talwar 2007, Theorem 6; Dwork & Roth 2014, Theorem
3.10): each answer here is **ε₀ = 2γ-DP**, as LNMax and permute-and-flip at the same γ. (The
bound is tight for this relation: with one count far ahead, moving a vote from it to class b
multiplies P[b] by e^{2γ} in the limit.)

**Exact sampling: no floating-point δ.** Rejection: draw a class j uniformly (an exact uniform
integer) and accept it with probability ``exp(−γ (n* − n_j))`` (a Bernoulli(exp(−x)) coin for
the rational x, Canonne, Kamath & Steinke 2020, Algorithm 1), else draw again. An accepted j has
probability ∝ exp(γ (n_j − n*)) ∝ exp(γ n_j): exactly the mechanism's law; the plurality is
accepted surely, so each round stops with probability at least 1/m. Permute-and-flip is the
same procedure *without* replacement (McKenna & Sheldon 2020), which is why it is never worse.

**Privacy (data-dependent, private).** The probability of not answering the plurality j* is
known exactly:

    q(D) = 1 − 1 / Σ_i exp(−γ (n* − n_i)) = S / (1 + S),   S = Σ_{i ≠ j*} exp(−γ g_i)

(:func:`q_exact`; compare permute-and-flip's ½ S, `analysis.mechanisms.permute_flip`). PATE 2017,
Theorem 3 bounds the log moments of an ε₀-DP answer given q (`analysis.bounds.lnmax.logmgf`);
that ε is **private**, and with no proven smooth sensitivity no sanitised release exists: the
published figure is the data-independent one.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from analysis.core.noise import NoiseSource, bernoulli_exp_gaps, randbelow_array
from analysis.core.validation import check_positive
from analysis.mechanisms.record import PureArgmax, check_source, check_votes


def log_q_exact(votes, gamma) -> np.ndarray:
    """log P[answer ≠ j*] = log S − log(1 + S) (module docstring), in log space; shape
    ``votes.shape[:-1]``."""
    gamma = check_positive("gamma", gamma)
    counts = np.asarray(check_votes(np.reshape(votes, (-1, np.shape(votes)[-1]))), dtype=np.float64)
    srt = np.sort(counts, axis=-1)
    log_s = np.logaddexp.reduce(-gamma * (srt[:, -1:] - srt[:, :-1]), axis=-1)
    return (log_s - np.logaddexp(0.0, log_s)).reshape(np.shape(votes)[:-1])


def q_exact(votes, gamma) -> np.ndarray:
    """P[answer ≠ j*] of every row, exactly (up to float64 rounding of the exp and log)."""
    return np.exp(log_q_exact(votes, gamma))


def sample(votes, gamma, source: NoiseSource) -> np.ndarray:
    """The exponential mechanism on every row of ``votes``, exactly by rejection (module
    docstring); int32 labels. Vectorised: every row not yet answered proposes a uniform class
    and flips its coin (`analysis.core.noise.bernoulli_exp_gaps`) each round."""
    votes = check_votes(votes)
    source = check_source(source)
    gamma = check_positive("gamma", gamma)
    rows, classes = votes.shape
    gaps = votes.max(axis=1, keepdims=True) - votes
    out = np.empty(rows, np.int32)
    todo = np.arange(rows)
    while todo.size:
        j = randbelow_array(source, np.full(todo.size, classes, np.int64))
        accept = bernoulli_exp_gaps(source, gaps[todo, j], gamma)
        out[todo[accept]] = j[accept]
        todo = todo[~accept]
    return out


@dataclasses.dataclass(frozen=True)
class ExponentialMechanism(PureArgmax):
    """The exponential mechanism (module docstring): each answer ``2 gamma``-DP, sampled exactly,
    no sanitised release (the headline is the data-independent ε)."""

    name: ClassVar[str] = "exponential"
    summary: ClassVar[str] = "the exponential mechanism (McSherry & Talwar 2007), exact; data-independent headline"
    exact: ClassVar[bool] = True

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        return sample(votes, self.gamma, source)

    def q_bound(self, votes) -> np.ndarray:
        """P[answer ≠ plurality] of every row, exactly (private): :func:`q_exact`."""
        return q_exact(votes, self.gamma)
