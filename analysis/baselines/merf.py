"""The privacy of DP-MERF's release (`pate synth --method merf`): the class-conditional
mean embedding of the private train split, released once with discrete Gaussian noise on
an integer grid.

DP-MERF (Harder, Adamczewski & Park, "DP-MERF: differentially private mean embeddings with
random features for practical privacy-preserving data generation", AISTATS 2021) releases
``μ = (1/n) Σ_i φ(x_i) ⊗ onehot(y_i)`` with random Fourier features φ (Rahimi & Recht 2007)
of ``‖φ(x)‖₂ = 1`` (``[cos ω_j·x, sin ω_j·x]_j / √(D/2)``: cos² + sin² = 1), and trains a
generator on the release alone (post-processing). This module is everything about the
release that needs no JAX: the features' integer form, the exact sum, its sensitivity,
the noise and its calibration.

**The integer release.** Each example's features become integers
``q_i = rint(G · clip(φ(x_i), −1, 1))`` on the public grid ``1/G`` (``G = 2^20``), and any
row with ``‖q_i‖₂ > B`` (``B = G + ⌈√D⌉``; rounding adds at most ``√D/2``, so only a
floating-point anomaly can reach it) is shrunk towards 0 in exact integer arithmetic
until ``‖q_i‖₂ ≤ B`` (`quantise_rows`). The sum ``S = Σ_i q_i ⊗ onehot(y_i)`` (D × C) is
exact in int64 (`embedding_sum`): no floating-point rounding depends on which examples
were summed. The release is ``S̃ = S + Z`` with ``Z`` i.i.d. discrete Gaussians
``N_ℤ(0, s²)`` (`analysis.core.noise.discrete_gaussian`, exact, Canonne, Kamath & Steinke 2020,
Algorithm 3; OS entropy); ``μ̃ = S̃ / (n G)`` is post-processing (n is public under
replace-one). No floating-point bit of noise is published (Mironov, CCS 2012), so no
sampling δ is added.

**Sensitivity (replace-one).** Replacing example (x, y) by (x', y') changes S by
``q(x) ⊗ e_y − q(x') ⊗ e_{y'}``, of L2 norm ``≤ ‖q(x)‖ + ‖q(x')‖ ≤ 2B`` (triangle
inequality; ``‖q ⊗ e_y‖ = ‖q‖``). In the units of μ that is ``2B/(nG) ≈ 2/n``, DP-MERF's
figure. `tests/baselines/test_synth_merf.py` checks it by brute force over every replace-one
neighbour of small data sets.

**Privacy (Formal guarantee).** For integers a, b and ``α > 1``, with p_a the pmf of
``N_ℤ(a, s²)``, ``Σ_k p_a(k)^α p_b(k)^{1−α}`` equals
``e^{α(α−1)(a−b)²/(2s²)} · Σ_k e^{−(k−m)²/(2s²)} / Σ_k e^{−k²/(2s²)}`` with
``m = αa + (1−α)b`` (completing the square; the two normalisers are equal because a, b
are integers), and the last ratio is ≤ 1 (Poisson summation: the theta sum is largest at
integer shift). So ``D_α(N_ℤ(a, s²) ‖ N_ℤ(b, s²)) ≤ α(a − b)²/(2s²)`` (Canonne, Kamath &
Steinke, "The discrete Gaussian for differential privacy", NeurIPS 2020, Proposition 5),
and over independent coordinates the divergences add (van Erven & Harremoës, "Rényi
divergence and Kullback-Leibler divergence", 2014, Theorem 28): the release is
``(α, α (2B)²/(2s²))``-RDP for every α > 1 under **replace-one** neighbours (Mironov 2017,
Definition 4). With ``s = m · 2B`` (noise multiplier m) that is μ² = 1/m², the ledger's
``"discrete-gaussian"`` cost (`analysis.mechanisms.composition`: RDP only, converted by
`analysis.accounting.rdp.eps_from_rdp`), and `calibrate_multiplier` picks the least m whose one
release costs at most ε at δ.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from analysis.mechanisms import composition
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource, discrete_gaussian
from analysis.accounting.pld import calibrate, gaussian_mu_for
from analysis.core.validation import check_delta, check_positive

GRID_BITS = 20
GRID = 2**GRID_BITS  # G: grid units per 1.0 of a feature coordinate
MAX_FEATURES = 2**20  # D · G² stays below 2^63 (exact int64 norms)


def row_bound(num_features: int) -> int:
    """B: the L2 bound every quantised feature row is held to (module docstring)."""
    d = _check_features(num_features)
    return GRID + math.isqrt(d - 1) + 1  # G + ⌈√D⌉


def sensitivity(num_features: int) -> int:
    """The replace-one L2 sensitivity of the integer sum S, in grid units: 2B."""
    return 2 * row_bound(num_features)


def quantise_rows(features: np.ndarray) -> np.ndarray:
    """(m, D) float features → (m, D) int64 rows on the grid 1/G, each of L2 norm ≤ B, exactly.

    Non-finite values become 0 and values are clipped to [−1, 1] before rounding (so
    |q_ij| ≤ G); a row above B (never for true features) is shrunk by the integer factor
    ``B / (⌊√‖q‖²⌋ + 1)`` rounded towards 0, which cannot increase any |q_ij|.
    """
    phi = np.asarray(features, dtype=np.float64)
    if phi.ndim != 2:
        raise PateError(f"features must be a (points, features) array, got shape {phi.shape}")
    bound = row_bound(phi.shape[1])
    phi = np.clip(np.nan_to_num(phi, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0)
    rows = np.rint(phi * GRID).astype(np.int64)
    norms2 = np.einsum("ij,ij->i", rows, rows)  # exact: at most D·G² < 2^63
    for i in np.flatnonzero(norms2 > bound * bound):
        root = math.isqrt(int(norms2[i])) + 1  # > ‖q_i‖
        rows[i] = np.sign(rows[i]) * ((np.abs(rows[i]) * bound) // root)
    return rows


def embedding_sum(rows: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """S = Σ_i q_i ⊗ onehot(y_i), (D, C) int64, exact (no overflow below 2^43 rows). PRIVATE."""
    rows = np.asarray(rows)
    labels = np.asarray(labels)
    if rows.dtype != np.int64 or rows.ndim != 2 or labels.shape != rows.shape[:1]:
        raise PateError("embedding_sum needs (m, D) int64 rows and m labels")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise PateError(f"labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}")
    out = np.zeros((rows.shape[1], int(num_classes)), np.int64)
    for c in range(int(num_classes)):
        out[:, c] = rows[labels == c].sum(axis=0, dtype=np.int64)
    return out


def cost(multiplier: float) -> composition.Cost:
    """The ledger's cost of one release at noise multiplier m (s = m · 2B): μ² = 1/m²."""
    m = check_positive("noise multiplier", multiplier)
    return composition.Cost("discrete-gaussian", {"mu2": 1.0 / m**2})


def release_eps(multiplier: float, delta: float) -> float:
    """ε at δ of one release at multiplier m, by the ledger's own figure (RDP, improved conversion)."""
    return composition.single_eps(cost(multiplier), check_delta(delta))


def calibrate_multiplier(eps: float, delta: float) -> float:
    """The least noise multiplier m (to 1e-6 relative) whose one release costs ≤ ``eps`` at
    ``delta`` (`release_eps`). Public inputs only. The exact Gaussian-DP μ (Balle & Wang
    2018, Theorem 8) brackets it from below: RDP never beats the exact profile."""
    check_positive("eps", eps)
    check_delta(delta)
    low = 1.0 / gaussian_mu_for(eps, delta)  # infeasible or at the boundary
    high = 2.0 * low
    while release_eps(high, delta) > eps:
        high *= 2.0
    if release_eps(low, delta) <= eps:
        return low
    return calibrate(lambda m: release_eps(m, delta), high, low, eps)


def noise_variance(multiplier: float, num_features: int) -> Fraction:
    """s² = (m · 2B)², exactly, in grid units."""
    return (Fraction(check_positive("noise multiplier", multiplier)) * sensitivity(num_features)) ** 2


def noisy_sum(total: np.ndarray, variance: Fraction, source: NoiseSource) -> np.ndarray:
    """S̃ = S + Z, Z i.i.d. exact discrete Gaussians of variance parameter ``variance`` (s²)."""
    total = np.asarray(total)
    if total.dtype != np.int64:
        raise PateError("the released sum must be int64 grid units")
    noise = np.fromiter((discrete_gaussian(source, variance) for _ in range(total.size)), np.int64, total.size)
    return total + noise.reshape(total.shape)


def embedding(released: np.ndarray, num_points: int) -> np.ndarray:
    """μ̃ = S̃ / (n G) as float64 (post-processing of the release; n public under replace-one)."""
    if num_points < 1:
        raise PateError(f"the private split must hold at least one point, got {num_points}")
    return np.asarray(released, np.float64) / (float(num_points) * GRID)


def _check_features(num_features: int) -> int:
    d = int(num_features)
    if not 2 <= d <= MAX_FEATURES or d % 2:
        raise PateError(f"the number of random features must be even and in [2, {MAX_FEATURES}], got {num_features}")
    return d
