"""Confident-GNMax's joint accounting: one Rényi bound for the whole output of a query —
whether it was answered, and its label (a Hölder argument; PATE 2018's own accounting
charges GNMax on the answered queries only, which does not bound the joint release).

Used by ``analysis.bounds.gnmax.data_dependent_eps`` and by the smooth sensitivity of the
release (``analysis.sanitised.gnmax_sensitivity``).
"""

from __future__ import annotations

import numpy as np

from analysis.accounting.rdp import DEFAULT_ORDERS, check_orders
from analysis.core.validation import check_sigma

__all__ = ["answer_weight", "rdp_confident"]


def _log_answer_weight(logp, sigma_threshold: float, orders: np.ndarray) -> np.ndarray:
    """log Ŷ(λ), the Hölder bound of `answer_weight`, minimised over μ in closed form."""
    logp = np.asarray(logp, dtype=float)[..., None]
    lam1 = orders - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        u = sigma_threshold * np.sqrt(-2.0 * logp)  # argmin over u = μ − 1 > 0 of E(u)
        interior = u > lam1
        u_safe = np.where(interior, u, lam1 + 1.0)
        e_int = logp * (1.0 - lam1 / u_safe) + lam1 * (u_safe + 1.0) / (2.0 * sigma_threshold**2)
    boundary = lam1 * orders / (2.0 * sigma_threshold**2)  # μ → λ: Ŷ → e^{(λ−1)λ/(2σ₁²)} ≥ 1
    out = np.where(interior, np.minimum(e_int, boundary), boundary)
    return np.where(np.isneginf(logp), -np.inf, out)  # never answered: Y = 0


def answer_weight(log_pr_answered, sigma_threshold, orders=DEFAULT_ORDERS):
    """w(λ) = min(1, Ŷ): how much of the GNMax cost an unlikely-answered query pays.

    With P₁ = Pr_D[answered], P₁'s counterpart Q₁ at a neighbour, and Y = P₁^λ Q₁^{1−λ},
    Hölder at any order μ > λ gives Y ≤ P₁^{(μ−λ)/(μ−1)} · (P₁^μ Q₁^{1−μ})^{(λ−1)/(μ−1)}
    ≤ P₁^{(μ−λ)/(μ−1)} e^{(λ−1) μ/(2σ₁²)}, the last step because P₁^μ Q₁^{1−μ} is one term
    of the threshold bit's Rényi sum, ≤ e^{(μ−1)μ/(2σ₁²)}. Ŷ is the minimum over μ, attained
    at μ − 1 = σ₁√(2 log 1/P₁) (the exponent is convex in μ − 1). Non-decreasing in P₁.
    """
    sigma_threshold = check_sigma(sigma_threshold, "sigma_threshold")
    orders = check_orders(orders)
    return np.exp(np.minimum(0.0, _log_answer_weight(log_pr_answered, sigma_threshold, orders)))


def rdp_confident(rdp_thr, rdp_gnmax, weight, orders):
    """RDP of one Confident-GNMax query's whole output: the bit "answered?" and, if answered,
    the label.

    Let P = (P₀, P₁) and Q be the bit's distributions at a vote set D and at a neighbour
    D', p and q the labels' (the two noises are independent). Then, with X = P₀^λ Q₀^{1−λ}
    and Y = P₁^λ Q₁^{1−λ},
      e^{(λ−1)D_λ} = X + Y·Σ_l p_l^λ q_l^{1−λ} ≤ (X + Y) + Y·(e^{(λ−1)ε_G} − 1),
    where X + Y = e^{(λ−1)D_λ(bit)} lies in [1, e^{(λ−1)ε_thr}], so Y/(X + Y) ≤ min(1, Y) and
      ρ(λ) ≤ ε_thr(λ) + log(1 + w·(e^{(λ−1)ε_G(λ)} − 1))/(λ−1),  w ≥ min(1, Y) (`answer_weight`).
    ε_thr and ε_G may be data-dependent (Theorem 6) or data-independent bounds; w = 1 gives
    plain composition ε_thr + ε_G. The realised set of answered queries is not used.
    Arguments broadcast to (..., len(orders)).
    """
    lam1 = np.asarray(orders, dtype=float) - 1.0
    big = lam1 * np.asarray(rdp_gnmax, dtype=float)
    w = np.asarray(weight, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        small = np.log1p(w * np.expm1(np.minimum(big, 1.0)))  # accurate for small costs
        large = np.logaddexp(np.log1p(-w), np.log(w) + big)  # log((1 − w) + w e^B), no overflow
    return np.asarray(rdp_thr) + np.where(big < 1.0, small, large) / lam1
