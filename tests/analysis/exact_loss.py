"""An exact lower bound on the privacy loss of noisy-argmax labels on fixed votes (issue 51), kept in
the tests as a second implementation that shares nothing with `analysis`.

For votes ``d`` and one histogram-level neighbour ``d'`` (on every query one vote moves from the
plurality class to the runner-up: the change the data-dependent analysis covers, one teacher's
vote), each query's answer has the law ``P_i(j) = P[argmax_c (n_c + X_c) = j]``, computed by
quadrature of ``∫ f(x − n_j) Π_{c≠j} F(x − n_c) dx`` (Laplace or Gaussian X). The labels are the
product of those laws, so their hockey-stick divergence at ``e^ε`` is ``δ(ε) = E_P[(1 −
e^{ε − L})_+]`` with ``L = Σ_i log(P_i/Q_i)(answer_i)``. Each per-query log ratio is rounded
*down* to a grid (minus a margin for the quadrature's error), which lowers ``L`` pointwise and so
``δ(ε)``: the δ computed here never exceeds the true one, and a headline (ε, δ) with a larger
computed δ(ε) is false for these votes.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

_GRID = 1e-3
_MARGIN = 1e-7  # per query, far above quad's error on these smooth integrands


def _log_laws(x, centres, noise: str, scale: float):
    """``(log pdf, log cdf)`` of ``centre + X`` at the points ``x``, one row per centre."""
    z = (x[None, :] - centres[:, None]) / scale
    if noise == "laplace":
        log_pdf = -np.abs(z) - math.log(2 * scale)
        log_cdf = np.where(z < 0, math.log(0.5) + np.minimum(z, 0), np.log1p(-0.5 * np.exp(-np.abs(z))))
    else:
        log_pdf = -0.5 * z * z - math.log(scale * math.sqrt(2 * math.pi))
        log_cdf = special.log_ndtr(z)
    return log_pdf, log_cdf


def answer_law(counts, noise: str, scale: float) -> np.ndarray:
    """P[argmax_c (n_c + X_c) = j] for every j, X iid Laplace(scale) or N(0, scale²): Gauss-Legendre
    quadrature of ``∫ f(x − n_j) Π_{c≠j} F(x − n_c) dx`` on pieces no longer than ``scale`` / 2 between
    the kinks (the counts), where the integrand is analytic; the laws sum to 1 within 1e-12."""
    counts = np.asarray(counts, dtype=float)
    cuts = np.unique(np.concatenate([[counts.min() - 60 * scale, counts.max() + 60 * scale], counts]))
    edges = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        pieces = max(1, int(math.ceil((b - a) / (scale / 2))))
        edges.append(np.linspace(a, b, pieces + 1)[:-1])
    edges = np.concatenate(edges + [cuts[-1:]])
    nodes, weights = np.polynomial.legendre.leggauss(24)
    half = np.diff(edges) / 2
    x = (edges[:-1, None] + half[:, None] * (nodes[None, :] + 1)).ravel()
    w = (half[:, None] * weights[None, :]).ravel()
    log_pdf, log_cdf = _log_laws(x, counts, noise, scale)
    total = log_cdf.sum(axis=0)
    law = np.array([w @ np.exp(log_pdf[j] + total - log_cdf[j]) for j in range(len(counts))])
    assert abs(law.sum() - 1) < 1e-12, law.sum()
    return law


def neighbour(row) -> np.ndarray:
    """``row`` with one vote moved from its plurality class to its runner-up."""
    row = np.array(row, dtype=int)
    order = np.argsort(-row, kind="stable")
    row[order[0]] -= 1
    row[order[1]] += 1
    return row


def loss_distribution(votes, noise: str, scale: float) -> tuple[np.ndarray, int]:
    """``(pmf, offset)``: the law under ``d`` of ``L`` rounded down to the grid, ``L = (k + offset) · grid``."""
    cache: dict = {}
    pmf, offset = np.ones(1), 0
    for row in np.asarray(votes):
        key = tuple(int(v) for v in row)
        if key not in cache:
            p = answer_law(row, noise, scale)
            q = answer_law(neighbour(row), noise, scale)
            keep = p > 0
            loss = np.full(len(p), -np.inf)
            loss[keep] = np.log(p[keep]) - np.log(np.maximum(q[keep], 1e-300))
            cache[key] = (p[keep], np.floor((loss[keep] - _MARGIN) / _GRID).astype(int))
        p, steps = cache[key]
        low = int(steps.min())
        new = np.zeros(len(pmf) + int(steps.max()) - low)
        for prob, step in zip(p, steps):
            new[step - low: step - low + len(pmf)] += prob * pmf
        pmf, offset = new, offset + low
    return pmf, offset


def delta_at(pmf: np.ndarray, offset: int, eps: float) -> float:
    """A lower bound on the labels' hockey-stick divergence at ``e^eps`` (module docstring)."""
    loss = (np.arange(len(pmf)) + offset) * _GRID
    above = loss > eps
    return float(np.sum(pmf[above] * -np.expm1(eps - loss[above])))


def eps_at(pmf: np.ndarray, offset: int, delta: float) -> float:
    """A lower bound on the smallest ε at which the labels are (ε, ``delta``)-DP for this pair."""
    lo, hi = 0.0, float((len(pmf) + offset) * _GRID)
    if delta_at(pmf, offset, lo) <= delta:
        return 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_at(pmf, offset, mid) > delta else (lo, mid)
    return lo if math.isfinite(lo) else 0.0
