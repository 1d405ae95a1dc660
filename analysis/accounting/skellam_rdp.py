"""The Rényi DP of the multi-dimensional Skellam mechanism (the ledger's ``"skellam"`` cost;
`analysis.mechanisms.skellam` proves the rest: quantisation, shares, modulus, composition).

Sk(μ) is the law of P − P', P, P' independent Poisson(μ) (variance 2μ; Agarwal, Kairouz & Liu,
"The Skellam Mechanism for Differentially Private Federated Learning", NeurIPS 2021,
arXiv:2110.04995, their Sk_{μ,μ}). Adding independent Sk(μ) to every coordinate of an integer
query of l1 sensitivity Δ₁ and l2 sensitivity Δ₂ is (α, ε(α))-RDP for every α > 1 with

    ε(α) <= α Δ₂² / (4μ) + min( ((2α − 1) Δ₂² + 6 Δ₁) / (16 μ²),  3 Δ₁ / (4μ) )

(their Corollary 3.6 in the NeurIPS version, stated for noise of variance V = 2μ:
α Δ₂²/(2V) + min(((2α − 1)Δ₂² + 6Δ₁)/(4V²), 3Δ₁/(2V)), the same bound; the paper's text was not at
hand: the formula is the authors' code's, google-research/federated distributed_dp/accounting_utils.py
``_skellam_rdp``, with the variance and the scale factored out, which evaluates it at integer
orders only, and the number is how other public implementations cite it, one of them as
Corollary 4.1, presumably another version). Here it is evaluated at ⌈α⌉
(the Rényi divergence is non-decreasing in the order, van Erven & Harremoës 2014, Theorem 3), so no
non-integer order is charged less than the integer the authors use. Neighbouring relation: whatever
relation gives the sensitivities (replace-one in `pate fedavg`). tests/analysis/test_skellam.py
checks the bound against exact divergences summed from scipy's Skellam pmf.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.core.errors import PateError


def rdp(orders, l1: float, l2sq: float, mu: float) -> np.ndarray:
    """ε(α) of one Skellam release Sk(μ) per coordinate on a query of l1 sensitivity `l1` and
    squared l2 sensitivity `l2sq` (integer units), at ⌈α⌉ for every order α > 1 (module docstring)."""
    orders = np.asarray(orders, dtype=float)
    if np.any(~np.isfinite(orders)) or np.any(orders <= 1):
        raise PateError("Rényi orders must be finite and > 1")
    mu = float(mu)
    if not (mu > 0 and math.isfinite(mu)):
        raise PateError(f"the Skellam parameter mu must be a positive number, got {mu}")
    l1, l2sq = float(l1), float(l2sq)
    if not (l1 >= 0 and l2sq >= 0 and math.isfinite(l1) and math.isfinite(l2sq)):
        raise PateError(f"sensitivities must be finite and >= 0, got l1 {l1}, l2^2 {l2sq}")
    a = np.ceil(orders - 1e-12)
    first = a * l2sq / (4.0 * mu)
    second = np.minimum(((2.0 * a - 1.0) * l2sq + 6.0 * l1) / (16.0 * mu * mu), 3.0 * l1 / (4.0 * mu))
    return first + second
