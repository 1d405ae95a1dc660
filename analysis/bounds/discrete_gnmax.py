"""PATE 2018's bounds for GNMax and Confident-GNMax drawn with exact coins: independent
discrete Gaussian noise N_Z(0, σ²) on every (integer) count, the argmax with ties broken by
the lowest class index (a public rule), and the threshold check ``s + N_Z(0, σ₁²) ≥ T`` on the
integer statistic s = max_j n_j (or max_j (n_j − o_j) with Interactive-GNMax's integer check
offsets o).

N_Z(0, σ²) is the law P[X = x] ∝ exp(−x²/(2σ²)) on the integers (Canonne, Kamath, Steinke,
"The Discrete Gaussian for Differential Privacy", NeurIPS 2020 — "CKS20" below); pate samples
it exactly (`analysis.mechanisms.exact_gaussian`), so no floating-point δ is added.

Neighbouring relation: replace-one teacher — one teacher's vote changes, so the vote vector
moves by +1 in one coordinate and −1 in another (‖n − n'‖₂² = 2) and the statistic s by at
most 1 (an integer: the offsets are integers). Every bound below is under this relation.

**Data-independent (public).** CKS20, Proposition 5 (and Theorem 14 for the product of
independent coordinates, i.e. the additivity of Rényi divergence): for integers μ, ν,
D_α(N_Z(μ, σ²) ‖ N_Z(ν, σ²)) ≤ α (μ − ν)² / (2σ²). Summed over the coordinates of the vote
vector (L2² = 2): D_α ≤ α/σ², the continuous GNMax's λ/σ² (PATE 2018, Proposition 8), and the
argmax is post-processing. The threshold check: α/(2σ₁²). So the exact-coin records inherit
`analysis.bounds.gnmax.data_independent_eps` unchanged. When the sampler's variance parameter
V is the least grid value at or above σ² (`analysis.mechanisms.exact_gaussian`), α/V ≤ α/σ²:
the bound at σ holds for it.

**Data-dependent (private).** PATE 2018, Theorem 6 needs only an RDP curve and an upper bound
q ≥ P[M(D) ≠ i*] at the vote set D; `analysis.bounds.gnmax.theorem6` applies it. The erfc q of
Proposition 7 is a fact about continuous noise; for the discrete noise this module proves its
own:

- GNMax (:func:`log_q`). CKS20, Corollary 9: X ~ N_Z(0, V) is V-subgaussian,
  E[e^{tX}] ≤ e^{t² V/2} for every real t. For independent X_j, X_{i*}, E[e^{t(X_j − X_{i*})}]
  ≤ e^{t² (2V)/2}, so Chernoff at t = d/(2V) gives P[X_j − X_{i*} ≥ d] ≤ exp(−d²/(4V)) for
  d ≥ 0. Class j ≠ i* can win only if n_j + X_j ≥ n_{i*} + X_{i*} (≥: a tie is counted as lost
  whichever way it is broken), so by a union bound
  q ≤ Σ_{j ≠ i*} exp(−(n_{i*} − n_j)²/(4V)); each term is replaced by the smaller bound the
  pmf of X_j − X_{i*} gives in closed form (two theta constants), with its truncation and
  float64 rounding bounded (:func:`log_pair_tail_bound`). It is also capped at 1 − 1/m: with i* the first
  argmax and ties to the lowest index, swapping X_j and X_{i*} (a measure-preserving
  involution of i.i.d. noise) maps every noise vector where j wins to one where i* wins
  (proof in :func:`log_q`), so P[i* wins] ≥ P[j wins] for every j, and P[i* wins] ≥ 1/m.
- The threshold check (:func:`log_pr_bounds`). With k = ⌈T − s⌉ (Z is an integer):
  P₁ = P[answered] = P[Z ≥ k] and P₀ = P[Z ≤ k − 1] = P[Z ≥ 1 − k] (the law is symmetric),
  each bounded by :func:`log_tail_bound`: the smaller of the subgaussian tail exp(−k²/(2V₁))
  (Chernoff, the same corollary) and the pmf summed with its truncation and float64 rounding
  bounded (near the threshold the first is close to 1 where the true tail is close to ½). Theorem 6 on the one-bit release takes q = min(p̄₁, p̄₀) with
  i* = "not answered" when p̄₁ is the smaller, else "answered": then P[M(D) ≠ i*] is P₁ ≤ p̄₁
  or P₀ ≤ p̄₀ = q. The RDP curve is λ/(2σ₁²) (σ = √2 σ₁ in `theorem6`).
- Confident-GNMax's joint bound (`analysis.bounds.confident.rdp_confident`): its proof needs
  the two noises independent (they are), RDP bounds of each part (above), and a weight
  w ≥ min(1, P₁^λ Q₁^{1−λ}); `analysis.bounds.confident.answer_weight` is non-decreasing in
  P₁ and its Hölder step uses only the threshold bit's RDP λ/(2σ₁²), so it is evaluated at the
  upper bound p̄₁.

These q's are upper bounds (the pmf's own tails are smaller), so the data-dependent ε here is
at least the one an exact tail would give; it is private either way. No smooth sensitivity of
it is proven (`analysis.sanitised.gnmax_sensitivity` is written for the erfc q), so no
sanitised release of exact-coin GNMax exists: its headline is the data-independent ε.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import logsumexp

from analysis.accounting.rdp import DEFAULT_ORDERS, check_orders, eps_from_rdp
from analysis.bounds.confident import answer_weight, rdp_confident
from analysis.bounds.gnmax import EpsResult, QuerySum, row_blocks, theorem6
from analysis.bounds.interactive import check_statistic
from analysis.core.errors import PateError
from analysis.core.validation import check_counts, check_delta, check_sigma

__all__ = ["log_q", "log_pr_bounds", "log_tail_bound", "log_pair_tail_bound", "rdp", "rdp_threshold", "query_rdp", "data_dependent_eps"]
_SQRT2 = math.sqrt(2.0)


def check_variance(variance, name: str = "variance") -> float:
    """The sampler's variance parameter V (σ² of N_Z(0, σ²)) as a positive finite float."""
    v = float(variance)
    if not (math.isfinite(v) and v > 0):
        raise PateError(f"{name} must be a positive finite number, got {variance}")
    return v


def log_q(votes, variance):
    """An upper bound on log P[argmax_j (n_j + X_j) ≠ i*] for X_j i.i.d. N_Z(0, V) (module
    docstring): log min(1 − 1/m, Σ_{j≠i*} P̄(n_{i*} − n_j)), i* the first argmax, P̄(d) the bound
    on P[X_j − X_{i*} >= d] of :func:`log_pair_tail_bound` (at most exp(−d²/(4V))).

    Proof of the cap (ties broken to the lowest index). Let j ≠ i* win under noise x, and x'
    be x with x_j and x_{i*} swapped. If j < i*, then n_j ≤ n_{i*} − 1 (i* is the first
    argmax); under x' class i* scores n_{i*} + x_j ≥ n_j + x_j + 1, above every other class's
    score under x (at most n_j + x_j), and j scores n_j + x_{i*} ≤ n_{i*} + x_{i*} − 1 ≤
    n_j + x_j − 1: i* is the unique maximum. If j > i*, j beat every lower index strictly, so
    n_j + x_j > n_k + x_k for k < j, and n_{i*} + x_j ≥ n_j + x_j exceeds every k < i* strictly,
    ties k > i* at most, and beats or ties j (x_j − x_{i*} > n_{i*} − n_j ≥ 0 ≥ n_j − n_{i*}):
    i* wins the tie-break. The swap preserves the i.i.d. law, so P[j wins] ≤ P[i* wins].

    Shape votes.shape[:-1]; ``variance`` is V, the sampler's exact variance parameter (not a
    smaller σ²: the bound grows with V).
    """
    votes = check_counts(votes)
    variance = check_variance(variance)
    m = votes.shape[-1]
    flat = votes.reshape(-1, m)
    out = np.empty(flat.shape[0])
    for rows in row_blocks(flat, ()):
        srt = np.sort(flat[rows], axis=-1)
        gaps = srt[:, -1:] - srt[:, :-1]
        out[rows] = logsumexp(log_pair_tail_bound(gaps, variance), axis=-1)
    out = np.minimum(out, math.log1p(-1.0 / m)).reshape(votes.shape[:-1])
    return out[()] if out.ndim == 0 else out


def log_pr_bounds(threshold, variance, votes, offsets=None) -> tuple[np.ndarray, np.ndarray]:
    """(log p̄₁, log p̄₀): upper bounds on log P[answered] and log P[not answered] of the check
    ``s + N_Z(0, V₁) ≥ threshold`` (module docstring), s the integer statistic of every row
    (`analysis.bounds.interactive.check_statistic`). Shape votes.shape[:-1]."""
    stat = check_statistic(votes, offsets).astype(np.float64)
    variance = check_variance(variance, "threshold variance")
    threshold = float(threshold)
    if not math.isfinite(threshold):
        raise PateError(f"threshold must be a finite number, got {threshold}")
    k = np.ceil(threshold - stat)  # answered iff Z >= k (exact: small integers and a float)
    return log_tail_bound(k, variance), log_tail_bound(1.0 - k, variance)


#: How far the pmf table of :func:`log_tail_bound` reaches, in σ: e^{−R²/(2V)} = e^{−450} is
#: still a normal float64, so no term of the table rounds to zero.
TAIL_REACH = 30
#: Above this √V the pmf tables (tens of √V entries) are not built and the subgaussian bounds
#: alone are used (valid, looser): a table stays a few MiB.
MAX_TABLE_ROOT = 20_000
#: The relative slack of the table against float64 rounding (module docstring of
#: :func:`log_tail_bound`: the rounding is below 1e-11).
TAIL_ROUNDING = 1e-9


def log_tail_bound(k, variance) -> np.ndarray:
    """An upper bound on log P[Z >= k] for Z ~ N_Z(0, V), every k of an array of whole numbers
    (as floats): the smaller of two proven bounds.

    1. Subgaussian (CKS20, Corollary 9, Chernoff at t = k/V): P[Z >= k] <= exp(−k²/(2V)) for
       k >= 1; 1 for k <= 0.
    2. The pmf, summed (:func:`_tail_table`): with w(z) = exp(−z²/(2V)) and R = ⌈30 √V⌉ + 1,
       P[Z >= k] = Σ_{z>=k} w(z) / Σ_z w(z) <= (Σ_{k<=z<=R} w(z) + B) / Σ_{|z|<=R} w(z), where
       B = (V/R) e^{−R²/(2V)} bounds Σ_{z>R} w(z) (w decreases past 0, so the sum is at most
       ∫_R^∞ w, and Mills' ratio bounds that integral). In float64 each w(z) is within
       |z²/(2V)|·2^-52 + 2^-52 <= 1e-13 of its value (the exponent is at most 450) and sums
       of at most 2R + 1 <= 10^5 positive terms add at most 10^5 · 2^-53 < 1e-11 relative
       error, so the numerator is multiplied by 1 + `TAIL_ROUNDING` and the denominator by
       1 − `TAIL_ROUNDING` (1e-9). Beyond the table (|k| > R) the table's bound is B over the
       denominator for k > R and 1 for k < −R.
    Above √V = `MAX_TABLE_ROOT` the first bound alone.
    """
    k = np.asarray(k, dtype=np.float64)
    variance = check_variance(variance)
    with np.errstate(divide="ignore"):
        sub = np.where(k >= 1, -k * k / (2.0 * variance), 0.0)
    if math.sqrt(variance) > MAX_TABLE_ROOT:
        return sub
    reach, log_upper, log_beyond = _tail_table(variance)
    idx = np.clip(k, -reach, reach + 1).astype(np.int64) + reach  # reach + 1: past the table
    table = np.append(log_upper, log_beyond)[np.minimum(idx, 2 * reach + 1)]
    table = np.where(k < -reach, 0.0, table)
    return np.minimum(np.minimum(sub, table), 0.0)


@functools.lru_cache(maxsize=4)
def _tail_table(variance: float) -> tuple[int, np.ndarray, float]:
    """(R, log of the bound of :func:`log_tail_bound` at k = −R … R, its log beyond R)."""
    reach = int(math.ceil(TAIL_REACH * math.sqrt(variance))) + 1
    z = np.arange(-reach, reach + 1, dtype=np.float64)
    w = np.exp(-z * z / (2.0 * variance))
    log_norm = math.log(float(w.sum())) + math.log1p(-TAIL_ROUNDING)
    beyond = variance / reach * math.exp(-reach * reach / (2.0 * variance))
    tails = np.cumsum(w[::-1])[::-1] * (1.0 + TAIL_ROUNDING) + beyond
    return reach, np.log(tails) - log_norm, math.log(beyond) - log_norm


#: How far the tables of :func:`log_pair_tail_bound` reach, in √V: the normalisers over
#: |x| <= 20 √V + 1 (their smallest term e^{−200} or e^{−400}), the tail sum over
#: 0 <= t <= 40 √V + 1 (e^{−400}): every term a normal float64.
PAIR_NORM_REACH, PAIR_TAIL_REACH = 20, 40


def log_pair_tail_bound(gaps, variance) -> np.ndarray:
    """An upper bound on log P[X − Y >= d] for X, Y i.i.d. N_Z(0, V), every whole d >= 0 of
    `gaps` (integers): the smaller of two proven bounds.

    1. Subgaussian (CKS20, Corollary 9: X − Y is 2V-subgaussian; Chernoff): exp(−d²/(4V)).
    2. The pmf of X − Y in closed form (:func:`_pair_table`). With w(x) = exp(−x²/(2V)) and
       N = Σ_{x∈ℤ} w(x), P[X − Y = t] = Σ_x w(x) w(x − t) / N², and
       x² + (x − t)² = 2(x − t/2)² + t²/2, so Σ_x w(x) w(x − t) = e^{−t²/(4V)} θ_{t mod 2} with
       θ₀ = Σ_x e^{−x²/V} and θ₁ = Σ_x e^{−(x − ½)²/V} (the shift t/2 is whole or half-whole).
       Hence P[X − Y >= d] = (θ₀ E(d) + θ₁ O(d)) / N², E(d), O(d) the sums of e^{−t²/(4V)} over
       the even and the odd t >= d. Each is computed over a finite range and bounded beyond it
       by ∫_a^∞ e^{−u²/c} du <= (c/(2a)) e^{−a²/c} (the terms decrease past 0; Mills' ratio):
       θ₀ and θ₁ from above, N from below (the partial sum), E and O from above. Every term is
       positive, so float64 rounding (each exponential within 400 · 2^-52 relative, sums of at
       most 10^5 terms within 10^-11) is covered by the relative slack `TAIL_ROUNDING` (1e-9)
       on the numerator and on N. Past the tail table (d > 40 √V + 1), and above
       √V = `MAX_TABLE_ROOT`, the first bound alone.
    Shape of `gaps`; finite log values (the subgaussian bound is finite).
    """
    gaps = np.asarray(gaps)
    variance = check_variance(variance)
    d = gaps.astype(np.float64)
    if d.size and float(d.min()) < 0:
        raise PateError("gaps must be >= 0")
    sub = -d * d / (4.0 * variance)
    if math.sqrt(variance) > MAX_TABLE_ROOT:
        return sub
    table = _pair_table(variance)
    idx = np.minimum(gaps.astype(np.int64), table.size - 1)
    return np.minimum(sub, np.where(gaps < table.size, table[idx], 0.0))


def _mills(a: float, c: float) -> float:
    """∫_a^∞ e^{−u²/c} du <= (c/(2a)) e^{−a²/c}, for a > 0 (Mills' ratio)."""
    return c / (2.0 * a) * math.exp(-a * a / c)


@functools.lru_cache(maxsize=4)
def _pair_table(variance: float) -> np.ndarray:
    """log of the closed-form bound of :func:`log_pair_tail_bound` at d = 0 … L (read-only)."""
    up, down = 1.0 + TAIL_ROUNDING, 1.0 - TAIL_ROUNDING
    root = math.sqrt(variance)
    reach = int(math.ceil(PAIR_NORM_REACH * root)) + 1
    k = np.arange(1, reach + 1, dtype=np.float64)
    # N >= 1 + 2 Σ_{1<=k<=R} w(k); θ₀ <= 1 + 2 Σ_{k<=R} e^{−k²/V} + 2 Σ_{k>R}; θ₁ = 2 Σ_{k>=0} e^{−(k+½)²/V}
    norm = (1.0 + 2.0 * float(np.exp(-k * k / (2.0 * variance)).sum())) * down
    theta0 = (1.0 + 2.0 * float(np.exp(-k * k / variance).sum())) * up + 2.0 * _mills(reach, variance)
    half = np.arange(0, reach + 1, dtype=np.float64) + 0.5
    theta1 = 2.0 * float(np.exp(-half * half / variance).sum()) * up + 2.0 * _mills(reach - 0.5, variance)
    length = int(math.ceil(PAIR_TAIL_REACH * root)) + 1
    t = np.arange(0, length + 1, dtype=np.float64)
    e = np.exp(-t * t / (4.0 * variance))
    beyond = _mills(length, 4.0 * variance)  # Σ_{t > L} e^{−t²/(4V)} of either parity
    even = np.where(t % 2 == 0, e, 0.0)
    odd = e - even
    tail_even = np.cumsum(even[::-1])[::-1] * up + beyond
    tail_odd = np.cumsum(odd[::-1])[::-1] * up + beyond
    bound = (theta0 * tail_even + theta1 * tail_odd) * up / (norm * norm)
    table = np.log(np.minimum(bound, 1.0))
    table.flags.writeable = False
    return table


def rdp(log_q_bound, sigma, orders=DEFAULT_ORDERS):
    """PATE 2018, Theorem 6 with the curve λ/σ² (CKS20, Proposition 5: the discrete GNMax is
    (λ, λ/σ²)-RDP) and q from :func:`log_q`; the data-independent λ/σ² where its conditions
    fail or it is larger (`analysis.bounds.gnmax.theorem6`). Shape log_q.shape + orders.shape."""
    sigma = check_sigma(sigma)
    orders = check_orders(orders)
    log_q_bound = np.asarray(log_q_bound, dtype=float)
    if np.any(log_q_bound > 0) or np.any(np.isnan(log_q_bound)):
        raise PateError("log_q must be ≤ 0 (a log-probability)")
    return theorem6(log_q_bound, sigma, orders)


def rdp_threshold(log_p1, log_p0, sigma_threshold, orders=DEFAULT_ORDERS):
    """Theorem 6 on the threshold bit: q = min(p̄₁, p̄₀) (module docstring), the curve
    λ/(2σ₁²) of a sensitivity-1 discrete Gaussian (CKS20, Proposition 5)."""
    sigma_threshold = check_sigma(sigma_threshold, "sigma_threshold")
    orders = check_orders(orders)
    logq = np.minimum(np.asarray(log_p1, dtype=float), np.asarray(log_p0, dtype=float))
    return theorem6(logq, _SQRT2 * sigma_threshold, orders)


def query_rdp(votes, sigma, variance, orders=DEFAULT_ORDERS, *, threshold=None, sigma_threshold=None,
              variance_threshold=None, offsets=None) -> tuple[np.ndarray, np.ndarray | None]:
    """Each query's data-dependent RDP (rows, orders) — PRIVATE — and, for Confident-GNMax, the
    bound log p̄₁ of each check (else None). GNMax: :func:`rdp` on :func:`log_q` at V.
    Confident-GNMax: `analysis.bounds.confident.rdp_confident` of :func:`rdp_threshold`,
    :func:`rdp` and `analysis.bounds.confident.answer_weight` at p̄₁ (module docstring)."""
    orders = check_orders(orders)
    gn = rdp(log_q(votes, variance), sigma, orders)
    if threshold is None:
        return gn, None
    log_p1, log_p0 = log_pr_bounds(threshold, variance_threshold, votes, offsets)
    thr = rdp_threshold(log_p1, log_p0, sigma_threshold, orders)
    w = answer_weight(log_p1, sigma_threshold, orders)
    return rdp_confident(thr, gn, w, orders), log_p1


def data_dependent_eps(votes, sigma, variance, delta, orders=DEFAULT_ORDERS, *, threshold=None,
                       sigma_threshold=None, variance_threshold=None, conversion="classic",
                       offsets=None) -> EpsResult:
    """Data-dependent (ε, δ) of answering every row of ``votes`` with exact coins — PRIVATE.

    GNMax: Σ_queries :func:`rdp` on :func:`log_q` (at the sampler's variance V ≥ σ²; the
    curve at σ). Confident-GNMax (``threshold``, ``sigma_threshold`` σ₁ with the sampler's
    ``variance_threshold`` V₁ ≥ σ₁²): Σ_queries `analysis.bounds.confident.rdp_confident`
    of :func:`rdp_threshold`, :func:`rdp` and `answer_weight` at p̄₁ (joint accounting, the
    only one here). ``expected_answered`` is Σ p̄₁, an upper bound on the expected answers.
    Converted with `analysis.accounting.rdp.eps_from_rdp`; marked private."""
    votes = check_counts(votes)
    if votes.ndim != 2:
        raise PateError(f"votes must be a (queries, classes) array, got shape {votes.shape}")
    sigma = check_sigma(sigma)
    variance = check_variance(variance)
    if variance < sigma * sigma:
        raise PateError(f"the sampler's variance {variance:g} is below sigma^2 = {sigma * sigma:g}")
    delta = check_delta(delta)
    orders = check_orders(orders)
    n = votes.shape[0]
    if (threshold is None) != (sigma_threshold is None) or (sigma_threshold is None) != (variance_threshold is None):
        raise PateError("Confident-GNMax needs threshold, sigma_threshold and variance_threshold (or none)")
    if threshold is None and offsets is not None:
        raise PateError("check offsets apply to Confident-GNMax only")
    if threshold is not None:
        sigma_threshold = check_sigma(sigma_threshold, "sigma_threshold")
        variance_threshold = check_variance(variance_threshold, "variance_threshold")
        if variance_threshold < sigma_threshold ** 2:
            raise PateError(f"the threshold sampler's variance {variance_threshold:g} is below sigma_threshold^2")
    if offsets is not None:
        offsets = np.asarray(offsets)
        if offsets.shape != votes.shape:
            raise PateError(f"check offsets must have the votes' shape {votes.shape}, got {offsets.shape}")
    curve, answered = QuerySum(), 0.0
    for rows in row_blocks(votes, orders):
        per_query, log_p1 = query_rdp(votes[rows], sigma, variance, orders, threshold=threshold,
                                      sigma_threshold=sigma_threshold, variance_threshold=variance_threshold,
                                      offsets=None if offsets is None else offsets[rows])
        curve.add(per_query)
        if log_p1 is not None:
            answered += float(np.exp(log_p1).sum())
    if threshold is None:
        eps, order = eps_from_rdp(orders, curve.total, delta, conversion)
        return EpsResult(float(eps), float(order), delta, orders, curve.total, "gnmax-exact", conversion, n,
                         private=True)
    eps, order = eps_from_rdp(orders, curve.total, delta, conversion)
    return EpsResult(float(eps), float(order), delta, orders, curve.total, "confident-gnmax-exact", conversion, n,
                     private=True, accounting="joint", expected_answered=answered)
