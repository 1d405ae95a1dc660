"""Rényi differential privacy (RDP) → (ε, δ)-DP conversions, and composition.

A mechanism is (λ, ρ)-RDP if D_λ(M(D) ‖ M(D')) ≤ ρ for all neighbouring D, D'
(Mironov 2017, "Rényi Differential Privacy", Definition 4). RDP composes by addition at
each order (Mironov 2017, Proposition 1), so a curve over a grid of orders is summed
query by query and converted once, at the best order.

Two conversions, both valid for every order λ > 1:

- ``"classic"``: ε = ρ + log(1/δ)/(λ − 1) (Mironov 2017, Proposition 3). The 2018 PATE
  paper (Papernot et al., "Scalable Private Learning with PATE", ICLR 2018) and its
  code report this one.
- ``"improved"``: ε = ρ + log((λ − 1)/λ) − (log δ + log λ)/(λ − 1) (Balle, Barthe,
  Gaboardi, Hsu, Sato 2020, "Hypothesis testing interpretations and Rényi
  differential privacy", Theorem 21; the same bound is Canonne, Kamath, Steinke 2020,
  "The discrete Gaussian for differential privacy", Proposition 12, and Asoodeh et al.
  2020, Eq. 20). It is what ``dp_accounting.rdp.compute_epsilon`` (dp-accounting 0.6)
  implements, including its two edge rules, which this module matches exactly:
  ε = 0 where δ² > 1 − e^{−ρ} (then the total-variation distance, bounded through KL ≤
  ρ, is already below δ), and ε = ∞ at orders λ ≤ 1.01 where the formula is
  numerically unstable. The result is clipped at 0.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.core.errors import PateError
from analysis.core.validation import check_delta

CONVERSIONS = ("classic", "improved")

#: A grid of Rényi orders: fine below 10, geometric up to 1024. Data-independent GNMax
#: bounds for few queries or large noise want high orders; data-dependent bounds
#: typically peak between 10 and 200.
DEFAULT_ORDERS = np.concatenate([np.arange(1.25, 10.0, 0.25), np.geomspace(10.0, 1024.0, 48)])


def check_orders(orders) -> np.ndarray:
    """Returns `orders` as a 1-D float array; raises `PateError` unless all are > 1."""
    arr = np.atleast_1d(np.asarray(orders, dtype=float))
    if arr.ndim != 1 or arr.size == 0:
        raise PateError(f"orders must be a non-empty 1-D list of numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1):
        raise PateError(f"Rényi orders must be finite and > 1, got min {arr.min()!r}")
    return arr


def conversion_term(orders, delta: float, conversion: str = "classic") -> np.ndarray:
    """The order-dependent term c(λ, δ) with ε(λ) = ρ(λ) + c(λ, δ), before edge rules.

    "classic": log(1/δ)/(λ−1). "improved": log1p(−1/λ) − (log δ + log λ)/(λ−1), and +∞ at
    λ ≤ 1.01 as in dp_accounting. Shape of `orders`.
    """
    orders = check_orders(orders)
    delta = check_delta(delta)
    if conversion == "classic":
        return -math.log(delta) / (orders - 1.0)
    if conversion == "improved":
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)
        return np.where(orders > 1.01, term, np.inf)
    raise PateError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")


def eps_curve(orders, rdp, delta: float, conversion: str = "classic") -> np.ndarray:
    """ε at every order (no minimisation): shape of `rdp` (..., len(orders)).

    See the module docstring for the two conversions and their references.
    """
    orders = check_orders(orders)
    rdp = np.asarray(rdp, dtype=float)
    if rdp.shape[-1:] != orders.shape:
        raise PateError(f"rdp has shape {rdp.shape}, expected (..., {orders.size}) to match orders")
    if np.any(np.isnan(rdp)) or np.any(rdp < 0):
        raise PateError("RDP values must be non-negative numbers")
    eps = rdp + conversion_term(orders, delta, conversion)
    if conversion == "improved":
        # KL ≤ ρ and TV ≤ sqrt(1 − e^{−KL}): (0, δ)-DP once δ² > 1 − e^{−ρ}.
        eps = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, eps)
        eps = np.maximum(eps, 0.0)
    return eps


def eps_from_rdp(orders, rdp, delta: float, conversion: str = "classic"):
    """Converts an RDP curve into (ε, δ)-DP at the best order.

    Args:
      orders: 1-D array of Rényi orders λ > 1.
      rdp: RDP values ρ(λ), shape (..., len(orders)); leading axes broadcast.
      delta: target δ in (0, 1).
      conversion: "classic" (Mironov 2017, Proposition 3) or "improved" (Balle et al.
        2020, Theorem 21; the form dp_accounting uses). See the module docstring.

    Returns:
      (eps, order): arrays of shape rdp.shape[:-1] (0-d for a single curve) with the
      smallest ε over the orders and the order attaining it (first one on ties).
    """
    orders = check_orders(orders)
    eps = eps_curve(orders, rdp, delta, conversion)
    idx = np.argmin(eps, axis=-1)
    best = np.take_along_axis(eps, idx[..., None], axis=-1)[..., 0]
    return best, orders[idx]


def compose(*curves) -> np.ndarray:
    """Sequential composition: the RDP curves of independent (or adaptively chosen)
    mechanisms add order by order (Mironov 2017, Proposition 1)."""
    if not curves:
        raise PateError("compose needs at least one RDP curve")
    return np.sum(np.broadcast_arrays(*[np.asarray(c, dtype=float) for c in curves]), axis=0)
