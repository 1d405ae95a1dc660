"""The Rényi DP of the distributed discrete Gaussian: the sum of n independent shares, each
N_ℤ(0, σ²) on every coordinate (the ledger's ``"ddg"`` cost; `analysis.mechanisms.ddg` proves the
rest: shares, modulus, composition).

The sum of discrete Gaussians is not a discrete Gaussian, but close to one when σ is not small.
Kairouz, Liu & Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation", ICML 2021, arXiv:2102.06387, bound its divergence. With

    τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k + 1)),   a = Δ₂/(√n σ),   b = Δ₁/(√n σ),

adding the sum Z = Σ_p X_p (X_p i.i.d. N_ℤ(0, σ²)^d) to an integer query of l1 sensitivity Δ₁ and l2
sensitivity Δ₂ is (α, ε(α))-RDP with

    ε(α) = min{ α a²/2 + τ d,  α (a² + 2 b τ + τ² d)/2,  α (a + τ √d)²/2 }.

Source, as verified (2026-12-06): the paper's text was not at hand to the search tools; the three
terms are those of the authors' implementation (google-research/federated
``distributed_dp/accounting_utils.py``, ``compute_rdp_dgaussian`` called by ``ddgauss_epsilon``, read,
not copied: its ``l2_scale`` and ``l1_scale`` are a and b, the central std √n σ), whose comment names
them "Proposition 14 of arXiv:2102.06387" and whose docstring sends τ, "the inflation parameter due to
adding multiple discrete Gaussians", to the paper's Theorem 1. The issue's statement of Theorem 1,
ε = min{√(a² + ½τΔ₁), a + τ√Δ₁} in ½ε²-concentrated DP, could not be confirmed in that form and is
NOT used. Because Δ₁ <= √d Δ₂, the second term never exceeds the third. Theorem 1 is a concentrated-DP statement (every order α >= 1);
the orders are used as given here, non-integer ones included (the authors' code evaluates integer
orders only; the tests check orders 1.5 and 2.5 as well).
With n = 1 (τ = 0) it is the discrete Gaussian's α Δ₂²/(2σ²) (Canonne, Kamath & Steinke 2020,
Proposition 5).

Soundness is also checked, not only cited: tests/analysis/test_ddg.py computes the exact Rényi
divergence of the n-fold convolution of discrete Gaussian pmfs shifted by an integer (σ 0.6–2 with n
2–4, where τ is large, and σ 6), and in 2–3 dimensions the worst over every integer shift vector of
given norms (divergences of product laws add, van Erven & Harremoës 2014, Theorem 28): the bound
lies above every one.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.core.errors import PateError


def tau(sigma2: float, clients: int) -> float:
    """τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k + 1)) (module docstring); 0 for one client."""
    sigma2 = float(sigma2)
    if not (sigma2 > 0 and math.isfinite(sigma2)):
        raise PateError(f"the discrete Gaussian's variance sigma^2 must be a positive number, got {sigma2}")
    if isinstance(clients, bool) or int(clients) != clients or clients < 1:
        raise PateError(f"clients must be an integer >= 1, got {clients!r}")
    k = np.arange(1, int(clients), dtype=float)
    return float(10.0 * np.exp(-2.0 * math.pi**2 * sigma2 * k / (k + 1.0)).sum())


def rdp(orders, l1: float, l2sq: float, sigma2: float, clients: int, dim: int) -> np.ndarray:
    """ε(α) of one release of the sum of `clients` shares N_ℤ(0, `sigma2`) per coordinate on a `dim`-long
    integer query of l1 sensitivity `l1` and squared l2 sensitivity `l2sq`, every order α > 1 (module
    docstring)."""
    orders = np.asarray(orders, dtype=float)
    if np.any(~np.isfinite(orders)) or np.any(orders <= 1):
        raise PateError("Rényi orders must be finite and > 1")
    l1, l2sq = float(l1), float(l2sq)
    if not (l1 >= 0 and l2sq >= 0 and math.isfinite(l1) and math.isfinite(l2sq)):
        raise PateError(f"sensitivities must be finite and >= 0, got l1 {l1}, l2^2 {l2sq}")
    if isinstance(dim, bool) or int(dim) != dim or dim < 1:
        raise PateError(f"the query's dimension must be an integer >= 1, got {dim!r}")
    t = tau(sigma2, clients)
    central = float(clients) * float(sigma2)
    a2, b = l2sq / central, l1 / math.sqrt(central)
    first = orders * a2 / 2.0 + t * dim
    second = orders * (a2 + 2.0 * b * t + t * t * dim) / 2.0
    third = orders * (math.sqrt(a2) + t * math.sqrt(dim)) ** 2 / 2.0
    return np.minimum(np.minimum(first, second), third)
