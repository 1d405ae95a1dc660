"""Fine-grained PATE: labels for the whole public pool from one noisy release.

Reverse k-NN labelling (Li, Wang, Wang, Li, Qian, Xin, Yang, "Fine-grained private knowledge
distillation", arXiv:2207.13253, 2022): every private record is its own teacher and votes, with
its label, for the k public points nearest to it in a public feature space. The votes form one
histogram over (public point, class); it is released **once** with noise on every cell, and the
labels of all public points are post-processing of that one release, so the privacy cost does
not grow with the number of points labelled. The guarantee is data-independent (pure ε with
discrete Laplace noise, ρ-zCDP with discrete Gaussian noise): no vote enters the accounting.

The pieces, in the order a release runs them:

1. `quantise_rows`, `nearest_public`: each record's k nearest public points, by exact integer
   arithmetic (each row computed from that record and the public points alone).
2. `vote_histogram`: the counts ``C[j, c]``. **PRIVATE**: never publish, log or store them.
3. `laplace_noise` / `gaussian_noise` (calibration to a target) or `Noise.laplace` /
   `Noise.gaussian` (a given noise), and `Noise.eps` (the ε a noise gives); then `release`,
   the one function that adds noise. Only its output may leave the private side.
4. `smooth`, `labels_and_margins`: post-processing over the public k-NN graph of the pool.

**The neighbouring relations.** Data sets are sequences of private records (x, y).
*Replace-one*: one record is replaced by another (the relation every other `analysis` bound
uses, and the only one `Noise.cost` gives the ledger). *Add/remove*: one record is added or
removed.

**The one precondition.** A record's row of neighbours must be a function of that record and
of public data only (never of other private records): the sensitivities below rest on it.
`nearest_public` meets it for the search itself (exact integer scores, ties to the lowest
index); the features fed to it must be computed per record from public parameters (e.g. a
projection fitted on the public pool only). Under replace-one every record keeps its position,
so floating-point feature code that works row by row (or by BLAS, whose order of operations
depends on shapes, never on values) gives record i's row from record i's values alone; under
add/remove positions shift, and the claim also needs the feature code's rounding not to
depend on a row's position in its batch (exact for `quantise_rows` and `nearest_public`,
assumed of the floating-point code before them).

**Formal guarantees.** For a record x write ``v(x) = Σ_{j ∈ N(x)} e_{j, y(x)}`` with N(x) its
k distinct public neighbours, so ``C(D) = Σ_{x ∈ D} v(x)`` and v(x) is a 0/1 vector with
exactly k ones (distinct j, one label). Then (`l1_sensitivity`, `l2_sensitivity_squared`):

- add/remove: ``C(D + x) − C(D) = v(x)``: L1 = k, L2 = √k, attained by every x;
- replace-one: ``C(D') − C(D) = v(x') − v(x)`` has entries in {−1, 0, 1} (a difference of 0/1
  vectors; a cell both records vote for cancels), so its L1 norm is the size of the symmetric
  difference of the two supports, at most 2k, and its squared L2 norm equals its L1 norm
  (entries ±1), at most 2k; both attained when the supports are disjoint (different labels,
  or disjoint neighbour sets). No cell moves by more than 1.

`tests/analysis/test_fine_grained.py` checks these by brute force over every pair of neighbouring data
sets of small universes, and that the bounds are attained.

**Discrete Laplace (pure ε).** ``C̃ = C + Z``, Z i.i.d. with ``P[Z = z] ∝ exp(−|z|/b)`` on ℤ
(b = t/s rational). For neighbouring D, D' and any output o ∈ ℤ^d the normalisers cancel and
``P[C(D) + Z = o] / P[C(D') + Z = o] = Π_j exp((|o_j − C'_j| − |o_j − C_j|)/b)
≤ exp(‖C − C'‖₁/b) ≤ exp(Δ₁/b)`` (triangle inequality); summing over any event gives ε-DP
with ``ε = Δ₁/b`` (the geometric mechanism: Ghosh, Roughgarden, Sundararajan, "Universally
utility-maximizing privacy mechanisms", STOC 2009; the Laplace mechanism's proof, Dwork,
McSherry, Nissim, Smith, TCC 2006, Proposition 1, on ℤ^d). No δ: the output is integers, drawn
exactly (`discrete_laplace_rational`), so no floating-point bit carries information (Mironov,
CCS 2012).

**Discrete Gaussian (ρ-zCDP).** ``Z_j ~ N_ℤ(0, σ²)`` i.i.d.: for integers a, b,
``D_α(N_ℤ(a, σ²) ‖ N_ℤ(b, σ²)) ≤ α (a − b)²/(2σ²)`` for every α > 1 (Canonne, Kamath, Steinke,
"The discrete Gaussian for differential privacy", NeurIPS 2020, Proposition 5), and Rényi
divergences of independent coordinates add (van Erven & Harremoës 2014, Theorem 28), so the
release has ``D_α ≤ α ‖C − C'‖₂²/(2σ²) ≤ α Δ₂²/(2σ²)``: ρ-zCDP with ``ρ = Δ₂²/(2σ²)`` (CKS 2020,
Theorem 14, multivariate discrete Gaussian; Bun & Steinke 2016, Definition 1.1). Its (ε, δ):
the RDP curve αρ at every order, converted by `analysis.accounting.rdp.eps_from_rdp`'s "improved" rule
(CKS 2020, Proposition 12; Balle et al. 2020, Theorem 21) — the ledger's own figure for a
``"discrete-gaussian"`` cost (`analysis.mechanisms.composition.single_eps`).

Post-processing (smoothing, argmax, margins) keeps both guarantees (Dwork & Roth 2014,
Proposition 2.1; Bun & Steinke 2016, Lemma 1.8).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import ClassVar

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms.record import Mechanism
from analysis.core.errors import PateError
from analysis.core.noise import (
    MAX_GRID_SCALE,
    NoiseSource,
    bernoulli_exp,
    bernoulli_exp_array,
    bernoulli_exp_gaps,
    discrete_laplace_array,
    randbelow_array,
)
from analysis.accounting.pld import calibrate, gaussian_mu_for
from analysis.core.validation import check_delta

RELATIONS = ("replace-one", "add-remove")
KINDS = ("laplace", "gaussian")
#: ε given as a float becomes a rational of denominator <= this, never above it (`rational_eps`).
EPS_DENOMINATOR = 10**6
#: σ² is rounded up to a multiple of 1 / (a power of two <= this), as fine as the sampler allows.
VARIANCE_DENOMINATOR = 64
#: Quantised features: entries of |q| <= 2^16, so every score below is an exact float64 integer.
FEATURE_BITS = 16
MAX_FEATURES = 2**20
#: The discrete Gaussian's acceptance numerator (|Y| q t − p)² is computed in int64 where
#: |Y| q t + p <= this (so it stays below 2^62), on Python integers elsewhere.
INT64_SAFE = 2**31


# ------------------------------------------------------------------ neighbours (public side)


def quantise_rows(features) -> np.ndarray:
    """(n, D) float features → (n, D) int64 rows ``rint(2^16 · x / ‖x‖₂)`` (a zero row stays 0).

    Each output row is a function of its input row alone. Entries lie in [−2^16, 2^16], so
    with D <= 2^20 every dot product of two rows is an integer below 2^52 in magnitude, exact
    in float64 whatever the order of summation (`nearest_public`).
    """
    x = np.asarray(features, np.float64)
    if x.ndim != 2 or not 1 <= x.shape[1] <= MAX_FEATURES:
        raise PateError(f"features must be a (points, features) array with 1..{MAX_FEATURES} features, "
                        f"got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise PateError("features must be finite numbers")
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return np.rint(np.clip(unit, -1.0, 1.0) * 2**FEATURE_BITS).astype(np.int64)


def nearest_public(queries, public, k: int, batch: int = 1024) -> np.ndarray:
    """The k nearest public rows of each query row in Euclidean distance, nearest first.

    Args:
      queries: (n, D) int64 rows from `quantise_rows` (private records, or the pool itself).
      public: (P, D) int64 rows from `quantise_rows` (the public pool).
      k: neighbours per query, 1 <= k <= P.

    Returns:
      (n, k) int64 indices into `public`, distinct within a row, ordered by distance, ties
      broken toward the lowest index. Row i depends on query row i and `public` only — not on
      the other queries, the batch or the BLAS order: with entries within 2^16 every product
      is an integer within 2^32 and every partial sum of a dot product one within D 2^32 <= 2^52,
      so float64 computes ⟨q, p⟩ exactly in any order; the score ``‖p‖² − 2⟨q, p⟩`` (the squared
      distance less ‖q‖²) is then an exact integer within 3 · 2^33 (squared norms are held
      within 2^33), and ``score · P + j`` (P <= 2^28) a unique int64 key per candidate. A query
      that is itself in `public` is its own nearest point.
    """
    q, p = _int_rows(queries, "queries"), _int_rows(public, "public points")
    if q.shape[1] != p.shape[1]:
        raise PateError(f"queries have {q.shape[1]} features but the public points {p.shape[1]}")
    k = _check_k(k)
    num_public = p.shape[0]
    if k > num_public:
        raise PateError(f"k = {k} neighbours but only {num_public} public points")
    if num_public > 2**28:
        raise PateError(f"at most 2**28 public points, got {num_public}")
    pf = p.astype(np.float64)
    sq = np.einsum("ij,ij->i", p, p)  # int64, exact
    ids = np.arange(num_public, dtype=np.int64)
    out = np.empty((q.shape[0], k), np.int64)
    for start in range(0, q.shape[0], int(batch)):
        dots = (q[start:start + int(batch)].astype(np.float64) @ pf.T).astype(np.int64)  # exact
        key = (sq[None, :] - 2 * dots) * num_public + ids[None, :]  # unique; |key| < 2^63
        part = np.argpartition(key, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1)
        out[start:start + len(key)] = np.take_along_axis(part, order, axis=1)
    return out


# ------------------------------------------------------------------ the private histogram


def check_neighbours(neighbours, num_public: int) -> np.ndarray:
    """`neighbours` as (n, k) int64 after checking k >= 1, indices in [0, num_public) and no
    index twice in a row (the sensitivities need k distinct cells per record)."""
    rows = np.asarray(neighbours)
    if rows.ndim != 2:
        raise PateError(f"neighbours must be an (records, k) array, got shape {rows.shape}")
    _check_k(rows.shape[1])
    if rows.size and not np.issubdtype(rows.dtype, np.integer):
        raise PateError(f"neighbours must be integer indices, got dtype {rows.dtype}")
    rows = rows.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= num_public):
        raise PateError(f"neighbour indices must lie in [0, {num_public}), got {rows.min()}..{rows.max()}")
    if rows.shape[1] > 1 and rows.size:
        ordered = np.sort(rows, axis=1)
        repeated = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if repeated.size:
            raise PateError(f"{repeated.size} rows of neighbours repeat a public point (first: row "
                            f"{repeated[0]}); each record votes for k distinct points")
    return rows


def vote_histogram(neighbours, labels, num_public: int, num_classes: int) -> np.ndarray:
    """The vote counts ``C[j, c]``: record i with label y_i adds 1 to ``C[j, y_i]`` for each of
    its k neighbours j. **PRIVATE**: pass it to `release` and nowhere else.

    Args:
      neighbours: (n, k) indices into the public pool, distinct within a row (`nearest_public`).
      labels: (n,) integer labels in [0, num_classes).
      num_public: P, the pool size.
      num_classes: C >= 2.

    Returns:
      (P, C) int64, exact (``C.sum() == n k``). Sensitivity: module docstring.
    """
    num_public, num_classes = _check_count("num_public", num_public, 1), _check_count("num_classes", num_classes, 2)
    rows = check_neighbours(neighbours, num_public)
    y = np.asarray(labels)
    if y.shape != rows.shape[:1]:
        raise PateError(f"{y.size} labels for {rows.shape[0]} records")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise PateError(f"labels must be integers, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise PateError(f"labels must lie in [0, {num_classes}), got {y.min()}..{y.max()}")
    cells = rows * num_classes + y[:, None]
    counts = np.bincount(cells.ravel(), minlength=num_public * num_classes)
    return counts.astype(np.int64).reshape(num_public, num_classes)


def l1_sensitivity(k: int, relation: str = "replace-one") -> int:
    """Δ₁ of `vote_histogram` with k votes per record: 2k (replace-one), k (add/remove)."""
    return (2 if _check_relation(relation) == "replace-one" else 1) * _check_k(k)


def l2_sensitivity_squared(k: int, relation: str = "replace-one") -> int:
    """Δ₂² of `vote_histogram`: 2k (replace-one), k (add/remove); Δ₂ = √(2k), √k."""
    return l1_sensitivity(k, relation)  # the difference has entries in {-1, 0, 1}: L2² = L1


# ------------------------------------------------------------------ noise, calibration


@dataclasses.dataclass(frozen=True)
class Noise:
    """The noise of one release of `vote_histogram` with `votes` per record.

    ``kind`` "laplace": ``parameter`` is the discrete Laplace scale b (pure ε = Δ₁/b);
    "gaussian": ``parameter`` is σ² (ρ = Δ₂²/(2σ²)). Both exact rationals (a float converts
    exactly). Build with `Noise.laplace`, `Noise.gaussian`, or calibrate with `laplace_noise`,
    `gaussian_noise` (whose rationals the samplers always take; `release` refuses any other
    whose numerator or denominator is too large for them).
    """

    kind: str
    parameter: Fraction
    votes: int
    relation: str = "replace-one"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise PateError(f"noise kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "parameter", _positive_fraction(self.parameter, "noise parameter"))
        object.__setattr__(self, "votes", _check_k(self.votes))
        _check_relation(self.relation)

    @classmethod
    def laplace(cls, scale, votes: int, relation: str = "replace-one") -> "Noise":
        return cls("laplace", scale, votes, relation)

    @classmethod
    def gaussian(cls, sigma2, votes: int, relation: str = "replace-one") -> "Noise":
        return cls("gaussian", sigma2, votes, relation)

    @property
    def pure_eps(self) -> Fraction:
        """Laplace: ε = Δ₁/b exactly (pure ε-DP under `relation`)."""
        if self.kind != "laplace":
            raise PateError("a discrete Gaussian release has no pure eps; ask eps(delta)")
        return Fraction(l1_sensitivity(self.votes, self.relation)) / self.parameter

    @property
    def rho(self) -> Fraction:
        """Gaussian: ρ = Δ₂²/(2σ²) exactly (ρ-zCDP under `relation`)."""
        if self.kind != "gaussian":
            raise PateError("a discrete Laplace release has no rho; ask pure_eps")
        return Fraction(l2_sensitivity_squared(self.votes, self.relation)) / (2 * self.parameter)

    def eps(self, delta: float | None = None) -> float:
        """The ε this noise gives: Laplace, Δ₁/b (δ = 0; `delta` ignored) rounded up to a float;
        Gaussian, ε at `delta` from the RDP curve αρ (module docstring)."""
        if self.kind == "laplace":
            return _float_up(self.pure_eps)
        return composition.single_eps(self._gaussian_cost(), check_delta(delta))

    def cost(self) -> composition.Cost:
        """The ledger's record of this release (replace-one only: the ledger composes that
        relation): ``pure`` (ε₀ = Δ₁/b, one release) or ``discrete-gaussian`` (μ² = Δ₂²/σ²)."""
        if self.relation != "replace-one":
            raise PateError("the ledger composes replace-one costs; build the noise with relation "
                            "'replace-one'")
        if self.kind == "laplace":
            return composition.Cost("pure", {"eps0": _float_up(self.pure_eps), "count": 1})
        return self._gaussian_cost()

    def _gaussian_cost(self) -> composition.Cost:
        return composition.Cost("discrete-gaussian", {"mu2": _float_up(2 * self.rho)})


def rational_eps(eps) -> Fraction:
    """ε as an exact rational not above it: a Fraction as is; a number x becomes the nearest
    fraction of denominator <= 10^6 if that is <= x, else ⌊x · 10^6⌋ / 10^6."""
    if isinstance(eps, Fraction):
        value = eps
    else:
        try:
            x = float(eps)
        except (TypeError, ValueError):
            raise PateError(f"eps must be a number, got {eps!r}") from None
        if not math.isfinite(x):
            raise PateError(f"eps must be a finite positive number, got {eps}")
        exact = Fraction(x)
        value = exact.limit_denominator(EPS_DENOMINATOR)
        if value > exact:
            value = Fraction(math.floor(exact * EPS_DENOMINATOR), EPS_DENOMINATOR)
    if value <= 0:
        raise PateError(f"eps must be positive and more than 1e-06 (it is rounded down to a multiple of 1e-06 for exact "
                        f"noise), got {eps}")
    return value


def laplace_noise(eps, votes: int, relation: str = "replace-one") -> Noise:
    """The discrete Laplace noise for pure ε: scale ``b = Δ₁ / rational_eps(eps)``, so the
    release's ε (`Noise.pure_eps`) is the rational ε exactly, never above `eps`."""
    eps = rational_eps(eps)
    return Noise.laplace(Fraction(l1_sensitivity(votes, relation)) / eps, votes, relation)


def gaussian_noise(eps, delta, votes: int, relation: str = "replace-one") -> Noise:
    """The discrete Gaussian noise for (ε, δ): the least σ² (to 1e-6 relative, then rounded up
    to a multiple of 1/64, or coarser where the sampler needs it) with ``Noise.eps(δ) <= ε``.

    The exact Gaussian-DP μ (Balle & Wang 2018, Theorem 8) brackets σ from below: an RDP
    conversion never beats the exact profile of the continuous Gaussian, which the discrete
    one's curve αρ equals.
    """
    eps = float(rational_eps(eps))
    delta = check_delta(delta)
    d2 = l2_sensitivity_squared(votes, relation)

    def forward(sigma: float) -> float:
        rho = d2 / (2.0 * sigma * sigma)
        return composition.single_eps(composition.Cost("discrete-gaussian", {"mu2": 2.0 * rho}), delta)

    low = math.sqrt(d2) / gaussian_mu_for(eps, delta)  # infeasible or on the boundary
    high = 2.0 * low
    while forward(high) > eps:
        high *= 2.0
    sigma = low if forward(low) <= eps else calibrate(forward, high, low, eps)
    sigma2 = variance_on_grid(sigma * sigma)
    step = Fraction(1, sigma2.denominator)
    while Noise.gaussian(sigma2, votes, relation).eps(delta) > eps:  # the claim is checked on the
        sigma2 = variance_on_grid(float(sigma2 + step))  # exact σ² (ulps of float rounding)
    return Noise.gaussian(sigma2, votes, relation)


def variance_on_grid(sigma2: float) -> Fraction:
    """The least multiple of 1/q at or above σ² for the finest q = 2^j <= 64 the sampler takes."""
    exact = Fraction(sigma2)
    q = VARIANCE_DENOMINATOR
    while True:
        candidate = Fraction(math.ceil(exact * q), q)
        if _gaussian_denominator(candidate) <= MAX_GRID_SCALE:
            return candidate
        if q == 1:
            raise PateError(f"sigma^2 {float(sigma2):.6g} is beyond the vectorised discrete Gaussian "
                            f"(sigma <= ~800); use the Laplace noise")
        q //= 2


# ------------------------------------------------------------------ exact vectorised samplers


def discrete_laplace_rational(source: NoiseSource, scale, shape) -> np.ndarray:
    """int64 samples of `shape`, each with probability ∝ exp(−|y| / scale), exactly, for a
    rational ``scale = t/s`` with 1 <= t, s <= 2^40: `analysis.core.noise.discrete_laplace_array`
    (Canonne, Kamath, Steinke 2020, Algorithm 2 with Y = ⌊X/s⌋; integers only, no
    floating-point number enters a decision)."""
    scale = _positive_fraction(scale, "the discrete Laplace scale")
    if scale.numerator > MAX_GRID_SCALE or scale.denominator > MAX_GRID_SCALE:
        raise PateError(f"the discrete Laplace scale {scale} needs numerator and denominator <= 2**40; "
                        f"calibrate it with laplace_noise")
    return discrete_laplace_array(source, scale, shape)


def discrete_gaussian_rational(source: NoiseSource, sigma2, shape) -> np.ndarray:
    """int64 samples of `shape`, each with probability ∝ exp(−y²/(2σ²)), exactly, for a
    rational σ² = p/q whose constant ``den = 2 p q (t/g)²`` (t = ⌊σ⌋ + 1, g = gcd(p, t)) is
    <= 2^40 (`Noise` checks): σ <= ~800 in general, and σ up to ~7.4e5 for σ² = t(t − 1), where
    g = t and den = 2t(t − 1) (the variances `analysis.baselines.fedavg_privacy` takes).

    Canonne, Kamath, Steinke 2020, Algorithm 3, each element on its own words of `source`:
    Y ~ discrete Laplace of integer scale t (`discrete_laplace_array`), accepted with
    probability exp(−γ), ``γ = (|Y| − σ²/t)²/(2σ²)``; with σ²/t = a/b in lowest terms (a = p/g,
    b = q t/g) that is ``(|Y| b − a)² / den``: an integer ratio N/den, drawn exactly as
    ⌊N/den⌋ Bernoulli(e⁻¹) all 1 and one Bernoulli(e^{−(N mod den)/den}) (CKS 2020,
    Algorithm 1). Where |Y| b + a > `INT64_SAFE` = 2^31 (so N could leave int64; probability
    about e^{−2^31/(b t)}) the same Bernoulli is drawn by the scalar
    `analysis.core.noise.bernoulli_exp` on Python integers. A rejected Y is drawn again.
    """
    sigma2 = _positive_fraction(sigma2, "sigma^2")
    a, b, t, den = _gaussian_constants(sigma2)
    shape = _shape(shape)
    out = np.zeros(math.prod(shape), np.int64)
    todo = np.arange(out.size)
    limit = (INT64_SAFE - a) // b
    while todo.size:
        y = discrete_laplace_array(source, t, todo.size)
        accept = np.zeros(todo.size, bool)
        small = np.abs(y) <= limit
        num = (np.abs(y[small]) * b - a) ** 2  # < 2^62
        whole, rest = num // den, num % den
        ok = bernoulli_exp_array(source, rest, den)
        alive = np.flatnonzero(ok & (whole > 0))
        level = 1
        while alive.size:
            ok[alive] = bernoulli_exp_array(source, np.ones(alive.size, np.int64), 1)
            level += 1
            alive = alive[ok[alive] & (whole[alive] >= level)]
        accept[np.flatnonzero(small)] = ok
        for i in np.flatnonzero(~small):
            gamma = Fraction((abs(int(y[i])) * b - a) ** 2, den)
            accept[i] = bool(bernoulli_exp(source, gamma))
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out.reshape(shape)


def release(counts, noise: Noise, source: NoiseSource) -> np.ndarray:
    """The one release: ``C + Z`` with Z i.i.d. exact discrete Laplace (scale b) or discrete
    Gaussian (σ²) noise on every cell, int64. `counts` is `vote_histogram`'s PRIVATE output;
    the returned array is the only thing that may be published (guarantees: module
    docstring; `noise.eps()`, `noise.cost()`). `source`: ``NoiseSource()`` (OS entropy) for a
    real release, a seed only for research.
    """
    c = np.asarray(counts)
    if c.ndim != 2 or c.shape[1] < 2 or c.dtype != np.int64:
        raise PateError(f"counts must be vote_histogram's (points, classes) int64 array, got {c.dtype} {c.shape}")
    if not isinstance(noise, Noise):
        raise PateError(f"noise must be a fine_grained.Noise, got {type(noise).__name__}")
    return c + noise_draw(noise, source, c.shape)


def noise_draw(noise: Noise, source: NoiseSource, shape) -> np.ndarray:
    """One int64 array of i.i.d. draws of the release's exact noise law (`Noise.kind`)."""
    if noise.kind == "laplace":
        return discrete_laplace_rational(source, noise.parameter, shape)
    return discrete_gaussian_rational(source, noise.parameter, shape)


# ------------------------------------------------------------------ post-processing (public)


#: How `smooth` weighs a point's r-th nearest neighbour (r = 1 the point itself): "uniform" 1,
#: "harmonic" ⌊2^20 / r⌋ (1/r in integers, relative error below r 2^-20).
SMOOTHING_WEIGHTS = ("uniform", "harmonic")
HARMONIC_SCALE = 2**20


def smoothing_weights(kind: str, m: int) -> np.ndarray:
    """The integer weight of each of the m neighbours, nearest first (`SMOOTHING_WEIGHTS`)."""
    if kind not in SMOOTHING_WEIGHTS:
        raise PateError(f"smoothing weights must be one of {', '.join(SMOOTHING_WEIGHTS)}, got {kind!r}")
    if kind == "uniform":
        return np.ones(int(m), np.int64)
    return HARMONIC_SCALE // np.arange(1, int(m) + 1, dtype=np.int64)


def smooth(noisy, graph, weights: str = "uniform") -> np.ndarray:
    """Each pool point's row: the weighted sum of the released rows of its graph neighbours,
    ``S[j] = Σ_r w_r C̃[graph[j, r]]`` (int64, exact; `smoothing_weights`: 1 each, or about
    1/r for the r-th nearest, which keeps the near neighbours' votes while the far ones average
    the noise). `graph` (P, m) indexes the pool, nearest first, e.g.
    ``nearest_public(pool, pool, m)`` (each point among its own m). Post-processing of the
    release and public data: no privacy cost."""
    c = _released(noisy)
    g = np.asarray(graph)
    if g.ndim != 2 or g.shape[0] != c.shape[0] or g.shape[1] < 1 or not np.issubdtype(g.dtype, np.integer):
        raise PateError(f"graph must be ({c.shape[0]}, m) integer indices with m >= 1, got {g.dtype} {g.shape}")
    if g.min() < 0 or g.max() >= c.shape[0]:
        raise PateError(f"graph indices must lie in [0, {c.shape[0]}), got {g.min()}..{g.max()}")
    w = smoothing_weights(weights, g.shape[1])
    if c.size and int(np.abs(c).max()) * int(w.sum()) >= 2**62:
        raise PateError("the smoothed scores would overflow int64: a released count above "
                        f"{2**62 // int(w.sum())}")
    return np.einsum("jrc,r->jc", c[g], w)


def label_posterior(noisy, graph, noise: Noise, draws: int, source: NoiseSource,
                    weights: str = "uniform") -> np.ndarray:
    """(P, classes) float64: for each pool point, the posterior probability that each class is the
    label the release would give without its noise, ``argmax smooth(C)`` (`smooth`, ties to the
    lowest class as in `labels_and_margins`), given the released ``C̃ = C + Z``: Monte Carlo over
    `draws` draws of the release's own noise law.

    Under a flat prior on the counts C the posterior of C given C̃ is ``C̃ − Z'`` with Z' drawn from
    the noise's law (the discrete Laplace and Gaussian are symmetric: p(C | C̃) ∝ p_Z(C̃ − C)), so each
    row is the fraction of draws in which that class tops ``smooth(C̃ − Z')``: the soft targets of
    ALIBI (Malek et al., "Antipodes of Label Differential Privacy: PATE and ALIBI", NeurIPS 2021)
    for this release, under a flat prior. A function of the released array, the public graph and
    the public noise law: post-processing, no privacy cost. `source`: any stream (e.g. a seeded
    ``NoiseSource``): its draws are not a release."""
    c = _released(noisy)
    if not isinstance(noise, Noise):
        raise PateError(f"noise must be a fine_grained.Noise, got {type(noise).__name__}")
    draws = _check_count("draws", draws, 1)
    counts = np.zeros(c.shape, np.int64)
    rows = np.arange(c.shape[0])
    for _ in range(draws):
        counts[rows, np.argmax(smooth(c - noise_draw(noise, source, c.shape), graph, weights), axis=1)] += 1
    return counts / draws


def labels_and_margins(scores) -> tuple[np.ndarray, np.ndarray]:
    """The argmax label of each row (ties to the lowest class) and its public margin, the top
    score less the runner-up's (>= 0; 0 on a tie). Post-processing: no privacy cost."""
    s = _released(scores)
    labels = np.argmax(s, axis=1)  # the first maximum: the lowest class
    top2 = np.sort(s, axis=1)[:, -2:]
    return labels.astype(np.int64), (top2[:, 1] - top2[:, 0]).astype(np.int64)


# ------------------------------------------------------------------ checks


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
        raise PateError(f"k (votes per record / neighbours) must be an integer >= 1, got {k!r}")
    return int(k)


def _check_count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < least:
        raise PateError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _check_relation(relation: str) -> str:
    if relation not in RELATIONS:
        raise PateError(f"relation must be one of {', '.join(RELATIONS)}, got {relation!r}")
    return relation


def _positive_fraction(value, name: str) -> Fraction:
    if isinstance(value, bool):
        raise PateError(f"{name} must be a positive number, got {value!r}")
    try:
        frac = value if isinstance(value, Fraction) else Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise PateError(f"{name} must be a finite positive number, got {value!r}") from None
    if frac <= 0:
        raise PateError(f"{name} must be positive, got {value}")
    return frac


def _gaussian_denominator(sigma2: Fraction) -> int:
    """den = 2 p q (t/g)² of `discrete_gaussian_rational` for σ² = p/q, t = ⌊σ⌋ + 1, g = gcd(p, t)."""
    p, q = sigma2.numerator, sigma2.denominator
    t = math.isqrt(p // q) + 1
    return 2 * p * q * (t // math.gcd(p, t)) ** 2


def _gaussian_constants(sigma2: Fraction) -> tuple[int, int, int, int]:
    """(a, b, t, den) with σ²/t = a/b in lowest terms (`discrete_gaussian_rational`)."""
    den = _gaussian_denominator(sigma2)
    if den > MAX_GRID_SCALE:
        raise PateError(f"sigma^2 = {sigma2} is too fine or too large for the vectorised discrete Gaussian "
                        f"(2 p q (t/g)^2 = {den} > 2**40); round it to a multiple of 1/64 (gaussian_noise does)")
    p, q = sigma2.numerator, sigma2.denominator
    t = math.isqrt(p // q) + 1
    g = math.gcd(p, t)
    return p // g, q * t // g, t, den


def _float_up(value: Fraction) -> float:
    """The least float >= a rational (a privacy parameter never rounds down)."""
    x = float(value)
    return math.nextafter(x, math.inf) if Fraction(x) < value else x


def _int_rows(rows, name: str) -> np.ndarray:
    r = np.asarray(rows)
    if r.ndim != 2 or r.dtype != np.int64 or r.shape[0] < 1:
        raise PateError(f"{name} must be quantise_rows' (n, D) int64 rows, got {r.dtype} {r.shape}")
    if r.shape[1] > MAX_FEATURES or np.abs(r).max() > 2**FEATURE_BITS:
        raise PateError(f"{name} must be quantise_rows' rows (entries within 2**{FEATURE_BITS})")
    if np.einsum("ij,ij->i", r, r).max() > 2**33:  # exact: each term <= 2^32, at most 2^20 terms
        raise PateError(f"{name} must be quantise_rows' rows (squared norms within 2**33)")
    return r


def _released(values) -> np.ndarray:
    c = np.asarray(values)
    if c.ndim != 2 or c.shape[1] < 2 or not np.issubdtype(c.dtype, np.integer):
        raise PateError(f"expected a released (points, classes) integer array, got {c.dtype} {c.shape}")
    return c.astype(np.int64)


def _shape(shape) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


# ------------------------------------------------------------------ audit (`pate audit`)

#: The outcomes `audit_categories` sorts a release of `audit_pair` into.
AUDIT_CATEGORIES = ("D's record's cells up, D''s down", "D''s record's cells up, D's down", "other")


def audit_pair(votes: int) -> tuple[np.ndarray, np.ndarray]:
    """The replace-one neighbours an audit releases: a record with label 0 voting for pool
    points 0..k−1 (in D) replaced by one with label 1 voting for points k..2k−1 (in D'); 2k
    points, 2 classes. Their histograms differ by one in 2k cells: the sensitivity 2k attained."""
    k = _check_k(votes)
    c = vote_histogram(np.arange(k)[None, :], [0], 2 * k, 2)
    c_prime = vote_histogram(np.arange(k, 2 * k)[None, :], [1], 2 * k, 2)
    return c, c_prime


def audit_categories(released: np.ndarray, votes: int) -> np.ndarray:
    """Each release (trials × 2k × 2) of `audit_pair` as an index into `AUDIT_CATEGORIES`: 0
    when every cell D's record votes for is >= 1 and every cell D''s record votes for is <= 0,
    1 for the mirror, else 2. For the discrete Laplace of scale b the likelihood ratio of
    category 0 is exactly exp(2k/b) = e^ε (each of the 2k independent cells contributes
    P[Z >= 0] / P[Z >= 1] = e^{1/b}): the event that attains the claim."""
    z = np.asarray(released)
    k = int(votes)
    up = (z[:, :k, 0] >= 1).all(axis=1) & (z[:, k:, 1] <= 0).all(axis=1)
    down = (z[:, :k, 0] <= 0).all(axis=1) & (z[:, k:, 1] >= 1).all(axis=1)
    return np.where(up, 0, np.where(down, 1, 2)).astype(np.int64)


# --------------------------------------------------------------------------- randomized response at the source


def randomized_response(labels, num_classes: int, eps: float, source: NoiseSource) -> np.ndarray:
    """Each label replaced by k-ary randomized response at ``eps`` (Warner 1965; Kairouz, Bonawitz
    & Ramage 2016): kept with probability ``e^ε / (e^ε + C − 1)``, else one of the other C − 1
    classes uniformly. Exactly: the exponential mechanism with utility [j = y] and scale ε, by
    rejection (propose a uniform class, accept it with probability exp(−ε [j ≠ y]),
    `analysis.core.noise.bernoulli_exp_gaps`): an accepted j has probability ∝ e^{ε [j = y]}.

    **Guarantee (label DP).** Two labels y, y' of one record give output laws whose ratio is at
    most e^ε (e^ε / 1), so each record's label is ε-DP locally, whatever its feature row; the
    whole release is a post-processing of the randomised labels and the (public-map) feature
    rows, so it is ε-label-DP (neighbours: one record's label changed, its features kept;
    Ghazi et al., "Deep learning with label differential privacy", NeurIPS 2021). This is NOT
    the replace-one guarantee: a replaced record moves its k votes, and that is what the central
    noise of `release` covers, unchanged (for every draw of the other records' responses the
    histograms of two neighbours differ by one record's votes, so the central bound holds
    conditionally and hence on average).
    """
    labels = np.asarray(labels, dtype=np.int64).ravel()
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise PateError(f"labels must lie in [0, {num_classes}) for randomized response")
    eps = float(eps)
    if not (eps > 0 and math.isfinite(eps)):
        raise PateError(f"the randomized-response eps must be a positive number, got {eps!r}")
    out = np.empty(labels.size, np.int64)
    todo = np.arange(labels.size)
    while todo.size:
        j = randbelow_array(source, np.full(todo.size, num_classes, np.int64))
        accept = bernoulli_exp_gaps(source, (j != labels[todo]).astype(np.int64), eps)
        out[todo[accept]] = j[accept]
        todo = todo[~accept]
    return out


def rr_keep_probability(num_classes: int, eps: float) -> float:
    """P[a randomised label is the true one]: e^ε / (e^ε + C − 1)."""
    return 1.0 / (1.0 + (num_classes - 1) * math.exp(-eps))


def debias(counts, num_classes: int, eps: float) -> np.ndarray:
    """Vote counts of randomised labels (rows: points, columns: classes) mapped to unbiased
    estimates of the true labels' counts: E[n'_c] = p n_c + q (n − n_c), p the keep
    probability, q = (1 − p)/(C − 1), so n_c = (n'_c − q n)/(p − q), row by row (post-processing
    of a released histogram). An affine map with one shift per row and a positive scale: it
    moves no row's argmax (nor a smoothed row's: smoothing is linear), so the labels are the
    same with or without it; only margins change, by the factor :func:`debias_margins` applies."""
    counts = np.asarray(counts, dtype=np.float64)
    p = rr_keep_probability(num_classes, eps)
    q = (1.0 - p) / (num_classes - 1)
    return (counts - q * counts.sum(axis=-1, keepdims=True)) / _keep_gap(num_classes, eps)


def _keep_gap(num_classes: int, eps: float) -> float:
    """p − q = (e^ε − 1) / (e^ε + C − 1), by expm1: the difference p − q of two rounded
    probabilities is 0 for a tiny ε (and 1/(p − q) a division by zero)."""
    return math.expm1(eps) / (math.exp(eps) + num_classes - 1)


def debias_margins(margins, num_classes: int, eps: float) -> np.ndarray:
    """Margins (top score less the runner-up) of randomised labels in units of true votes: the
    row shift of :func:`debias` cancels in a difference, its scale 1/(p − q) stays."""
    return np.asarray(margins, dtype=np.float64) / _keep_gap(num_classes, eps)


# --------------------------------------------------------------------------- the record


@dataclasses.dataclass(frozen=True)
class FineGrained(Mechanism):
    """Fine-grained PATE as a mechanism record (`analysis.mechanisms.registry`): no teachers —
    the private records' own votes, released once with exact discrete noise, label the whole
    pool. Its one parameter is that release's `Noise`; its cost is `Noise.cost` however many
    points are labelled; it has no data-dependent analysis and needs no sanitised release
    (module docstring). Its settings come from the config's ``[fine_grained]`` section, not
    from ``--gamma``/``--sigma``."""

    noise: Noise
    name: ClassVar[str] = "fine-grained"
    summary: ClassVar[str] = ("fine-grained PATE: the private records' own votes label the whole pool in one "
                              "exact release; no teachers")
    needs_teachers: ClassVar[bool] = False
    exact: ClassVar[bool] = True
    sanitised: ClassVar[bool] = False
    noisy_histogram: ClassVar[bool] = True

    def params(self) -> dict:
        return {"noise": self.noise.kind, "noise_parameter": str(self.noise.parameter), "votes": self.noise.votes}

    def describe(self) -> str:
        return (f"fine-grained ({self.noise.kind} noise {self.noise.parameter}, "
                f"{self.noise.votes} vote(s) per record)")

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"mechanism": np.array(self.name), "noise": np.array(self.noise.kind),
                "noise_parameter": np.array(str(self.noise.parameter)), "votes_per_record": np.array(self.noise.votes)}

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def array_keys(cls) -> tuple[str, ...]:
        return ("noise", "noise_parameter", "votes_per_record")

    @classmethod
    def from_arrays(cls, arrays, source: str = "labels.npz") -> "FineGrained":
        """The record of a fine-grained labels.npz (its noise arrays), checked."""
        try:
            return cls(Noise(str(np.asarray(arrays["noise"])), Fraction(str(np.asarray(arrays["noise_parameter"]))),
                             int(np.asarray(arrays["votes_per_record"]))))
        except (KeyError, ValueError, ZeroDivisionError, TypeError) as err:
            raise PateError(f"{source}: a fine-grained release without a readable noise record ({err})") from None

    @classmethod
    def from_options(cls, **given):
        raise PateError("fine-grained takes its noise from the config's [fine_grained] section (eps, noise, "
                        "votes_per_record), not from --gamma/--sigma/--threshold")

    def cost(self, num_queries: int = 1, max_answers: int | None = None) -> composition.Cost:
        """One release, whatever the number of labelled points (`Noise.cost`)."""
        return self.noise.cost()

    def independent_eps(self, num_queries: int, delta: float, **_):
        return self.noise.eps(delta)

    def charged(self, queried, answered, cap: int | None = None):
        return 1, None
