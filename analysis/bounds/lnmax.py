"""PATE 2017 privacy analysis of the Laplace noisy max (LNMax) aggregator.

Papernot, Abadi, Erlingsson, Goodfellow, Talwar, "Semi-supervised Knowledge Transfer
for Deep Learning from Private Training Data", ICLR 2017 (arXiv:1610.05755).

Mechanism: for each query, every class count ``n_j`` of the teachers' vote histogram
gets independent ``Lap(1/gamma)`` noise and the noisy argmax is released.

Neighbouring relation: two private training sets differ in one example, hence in the
training data of one teacher, hence in at most one teacher's vote: one count goes down
by one and another goes up by one. Under this relation one LNMax answer is
``(2*gamma, 0)``-DP, and the analysis below is for that relation.

Accounting is the moments accountant (Abadi et al. 2016): with ``alpha(l)`` the l-th log
moment of the privacy loss, composition adds ``alpha`` over queries and
``eps = min_l (alpha(l) + log(1/delta)) / l`` (Abadi et al. 2016, Theorem 2).

Every function is vectorised over leading axes (queries), moments and, for the smooth
sensitivity, the distance ``k``; all arithmetic on probabilities is in log space.

The sanitised release of the data-dependent ε (``sanitized_eps``, ``release_eps_cost``)
lives in ``analysis.sanitised.lnmax_release``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from analysis.core.errors import PateError
from analysis.core.validation import check_count, check_counts, check_delta, check_positive

DEFAULT_MOMENTS = tuple(range(1, 9))

# Elements per block when the smooth sensitivity materialises (queries, k, classes).
_BLOCK_ELEMENTS = 1 << 22

#: The most moments (orders 1..MAX_MOMENTS) an analysis may use: bounds the memory of the
#: smooth-sensitivity envelope (grid cells x moments).
MAX_MOMENTS = 64


# --------------------------------------------------------------------------- checks


def check_moments(moments) -> np.ndarray:
    """Returns the moments ``l`` as a 1-d float array after checking every ``l >= 1``."""
    arr = np.atleast_1d(np.asarray(moments, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise PateError("moments must be a non-empty list of numbers >= 1")
    if not np.all(np.isfinite(arr)) or np.any(arr < 1):
        raise PateError(f"moments must all be >= 1, got {arr.tolist()}")
    if arr.size > MAX_MOMENTS:
        raise PateError(f"at most {MAX_MOMENTS} moments (orders 1..{MAX_MOMENTS}) are supported, "
                        f"got {arr.size}; the best order of a PATE analysis is far below that")
    return arr


def _as_counts(votes) -> np.ndarray:
    return check_counts(votes).astype(np.float64)


# --------------------------------------------------------------------------- Lemma 4


def _log_q_from_gaps(gaps: np.ndarray, gamma: float, exclude: np.ndarray) -> np.ndarray:
    """log of Lemma 4's sum over classes of ``(2 + gamma*g) / (4 exp(gamma*g))``.

    ``gaps`` are ``n_top - n_j >= 0`` on the last axis; ``exclude`` masks the top class.
    """
    x = gamma * gaps
    log_terms = np.log(2.0 + x) - x - math.log(4.0)
    log_terms = np.where(exclude, -np.inf, log_terms)
    m = np.max(log_terms, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(log_terms - m), axis=-1)) + m[..., 0]


def q_bound(votes, gamma) -> np.ndarray:
    """Upper bound on ``Pr[LNMax answer != argmax of votes]`` (PATE 2017, Lemma 4).

    Formal guarantee: with ``Lap(1/gamma)`` noise on every count and ``j*`` the
    (first) plurality class,
    ``Pr[noisy argmax != j*] <= sum_{j != j*} (2 + gamma*g_j) / (4 exp(gamma*g_j))``,
    ``g_j = n_{j*} - n_j``. The bound is also capped at ``1 - 1/C``: a bound ``q`` above
    that value is never used as data-dependent (Theorem 3 needs
    ``q < 1/(1+e^{2 gamma})`` anyway), so the cap only keeps values interpretable, as
    in the paper's code.

    The sum is computed in log space, so gaps of any size (10,000 teachers) neither
    overflow nor take the log of zero.

    Args:
      votes: counts, shape ``(..., num_classes)``.
      gamma: inverse Laplace scale, > 0.

    Returns:
      float64 array of shape ``votes.shape[:-1]``.
    """
    gamma = check_positive("gamma", gamma)
    counts = _as_counts(votes)
    num_classes = counts.shape[-1]
    top = np.argmax(counts, axis=-1)
    gaps = np.max(counts, axis=-1, keepdims=True) - counts
    exclude = np.arange(num_classes) == top[..., None]
    log_q = _log_q_from_gaps(gaps, gamma, exclude)
    return np.minimum(np.exp(log_q), 1.0 - 1.0 / num_classes)


# --------------------------------------------------------------------------- log moments


def logmgf_data_independent(eps, moments) -> np.ndarray:
    """Data-independent bound on the l-th log moment of an ``(eps, 0)``-DP mechanism.

    ``alpha(l) <= min(eps^2 l (l+1) / 2, eps l)`` (PATE 2017, Theorem 2 (2) with
    ``eps = 2 gamma``, from Dwork & Rothblum's concentrated DP; and the trivial bound
    ``eps l`` of pure DP).
    """
    eps = check_positive("eps", eps)
    l = check_moments(moments)
    return np.minimum(0.5 * eps * eps * l * (l + 1.0), eps * l)


def logmgf(q, eps, moments) -> np.ndarray:
    """Data-dependent bound on the l-th log moment of one ``(eps, 0)``-DP answer.

    Formal guarantee (PATE 2017, Theorem 3): if the mechanism is ``(eps, 0)``-DP and
    ``q >= Pr[M(d) != o*]`` for some outcome ``o*``, and ``q < (e^eps - 1)/(e^{2 eps} - 1)
    = 1/(1 + e^eps)``, then
    ``alpha(l) <= log((1-q) ((1-q)/(1 - e^eps q))^l + q e^{eps l})``.
    The result is the minimum of that bound (where it is valid) and the two
    data-independent bounds of :func:`logmgf_data_independent`.

    Differs from the published code: ``logmgf_exact`` in the 2017 repository applies
    Theorem 3 whenever ``q < 0.5``; between ``1/(1+e^eps)`` and ``0.5`` the theorem
    does not hold and its expression can fall below the true log moment. Here those
    ``q`` get the data-independent bound.

    Args:
      q: upper bounds on the probability of a non-plurality answer, any shape.
      eps: the pure-DP level of one answer (``2*gamma`` for LNMax), > 0.
      moments: the orders ``l >= 1``, 1-d.

    Returns:
      float64 array of shape ``q.shape + moments.shape``.
    """
    eps = check_positive("eps", eps)
    l = check_moments(moments)
    q = np.asarray(q, dtype=np.float64)
    if np.any(~np.isfinite(q)) or np.any(q < 0) or np.any(q > 1):
        raise PateError("q must be probabilities in [0, 1]")
    data_independent = np.minimum(0.5 * eps * eps * l * (l + 1.0), eps * l)
    # Everything involving e^eps in log space: eps up to the float range (gamma > 355
    # overflowed math.exp).
    with np.errstate(divide="ignore"):
        log_q_all = np.log(q)
    valid = log_q_all < -np.logaddexp(0.0, eps)  # q < 1 / (1 + e^eps)
    qv = np.where(valid, q, 0.0)[..., None]
    log_q = np.where(valid, log_q_all, -np.inf)[..., None]
    log1m_q = np.log1p(-qv)
    log1m_eq = np.log1p(-np.exp(np.minimum(eps + log_q, 0.0)))
    log_t1 = log1m_q + l * (log1m_q - log1m_eq)
    log_t2 = log_q + eps * l
    theorem3 = np.logaddexp(log_t1, log_t2)
    return np.where(valid[..., None], np.minimum(theorem3, data_independent), data_independent)


# --------------------------------------------------------------------------- accountant


@dataclasses.dataclass(frozen=True)
class MomentsEps:
    """ε from the moments accountant.

    Attributes:
      eps: ``min_l (alpha(l) + log(1/delta)) / l``.
      moment: the ``l`` attaining the minimum.
      moments: the orders tried.
      eps_per_moment: ε at each order.
      log_moments: total ``alpha(l)`` at each order.
      delta: the δ of the guarantee.
      num_queries: number of answers composed.
    """

    eps: float
    moment: float
    moments: np.ndarray
    eps_per_moment: np.ndarray
    log_moments: np.ndarray
    delta: float
    num_queries: int

    @property
    def best_is_largest(self) -> bool:
        """True when the best order is the largest tried: more orders may lower ε."""
        return bool(self.moment == np.max(self.moments)) and self.moments.size > 1


def _eps_from_log_moments(log_moments, moments, delta, num_queries) -> MomentsEps:
    eps_l = (log_moments - math.log(delta)) / moments
    best = int(np.argmin(eps_l))
    return MomentsEps(eps=float(eps_l[best]), moment=float(moments[best]), moments=moments,
                      eps_per_moment=eps_l, log_moments=log_moments, delta=delta,
                      num_queries=int(num_queries))


def flat_votes(votes) -> np.ndarray:
    """The checked vote counts as a float (queries, classes) array (leading axes flattened)."""
    counts = _as_counts(votes)
    return counts.reshape(-1, counts.shape[-1])


def data_dependent_eps(votes, gamma, delta, moments=DEFAULT_MOMENTS) -> MomentsEps:
    """Data-dependent ε of LNMax answers to the queries in ``votes``.

    Formal guarantee: for the neighbouring relation of this module, releasing LNMax
    answers to all rows of ``votes`` is ``(eps, delta)``-DP *conditioned on these
    votes*: the moments accountant (Abadi et al. 2016, Thm 2) over the per-query
    bound of :func:`logmgf` with ``q`` from :func:`q_bound` (PATE 2017, Lemma 4,
    Theorem 3). The value depends on the private votes and is itself **private**;
    publish it only through :func:`analysis.sanitised.lnmax_release.sanitized_eps`.
    """
    gamma = check_positive("gamma", gamma)
    return eps_from_q(q_bound(flat_votes(votes), gamma), 2.0 * gamma, delta, moments)


def eps_from_q(q, eps0, delta, moments=DEFAULT_MOMENTS) -> MomentsEps:
    """Data-dependent ε of answers of any ``(eps0, 0)``-DP mechanism whose i-th answer differs
    from an outcome fixed by the votes with probability at most ``q[i]``: the moments
    accountant (Abadi et al. 2016, Theorem 2) over :func:`logmgf` (PATE 2017, Theorem 3).
    **Private** when ``q`` comes from private votes."""
    delta = check_delta(delta)
    l = check_moments(moments)
    q = np.asarray(q, dtype=np.float64).ravel()
    total = logmgf(q, check_positive("eps0", eps0), l).sum(axis=0)
    return _eps_from_log_moments(total, l, delta, q.size)


def data_independent_eps(num_queries, gamma, delta, moments=DEFAULT_MOMENTS) -> MomentsEps:
    """Data-independent ε of ``num_queries`` LNMax answers (safe to publish).

    Formal guarantee: each answer is ``(2 gamma, 0)``-DP; with
    ``alpha(l) = min(2 gamma^2 l (l+1), 2 gamma l)`` per answer (PATE 2017, Theorem 2)
    and the moments accountant, the answers are ``(eps, delta)``-DP.
    Known value: 100 queries, gamma=0.05, delta=1e-5, l=1..8 give eps ~ 5.30 at l=5.
    """
    gamma = check_positive("gamma", gamma)
    delta = check_delta(delta)
    l = check_moments(moments)
    n = check_count("num_queries", num_queries)
    total = n * logmgf_data_independent(2.0 * gamma, l)
    return _eps_from_log_moments(total, l, delta, n)


def cumulative_eps(votes, gamma, delta, moments=DEFAULT_MOMENTS) -> tuple[np.ndarray, np.ndarray]:
    """ε after each of the first 1, 2, ..., n answers, in the order of ``votes``' rows.

    Returns ``(data_independent, data_dependent)``, each of shape ``(n,)``; the second
    is private (see :func:`data_dependent_eps`).
    """
    gamma = check_positive("gamma", gamma)
    return cumulative_eps_from_q(q_bound(flat_votes(votes), gamma), 2.0 * gamma, delta, moments)


def cumulative_eps_from_q(q, eps0, delta, moments=DEFAULT_MOMENTS) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cumulative_eps` for any ``(eps0, 0)``-DP mechanism whose i-th answer differs from
    an outcome fixed by the votes with probability at most ``q[i]`` (:func:`eps_from_q`)."""
    delta = check_delta(delta)
    l = check_moments(moments)
    eps0 = check_positive("eps0", eps0)
    q = np.asarray(q, dtype=np.float64).ravel()
    count = np.arange(1, q.size + 1, dtype=np.float64)[:, None]
    di = np.min((count * logmgf_data_independent(eps0, l) - math.log(delta)) / l, axis=-1)
    cum = np.cumsum(logmgf(q, eps0, l), axis=0)
    dd = np.min((cum - math.log(delta)) / l, axis=-1)
    return di, dd


# --------------------------------------------------------------------------- smooth sensitivity

# The q-grid of the sensitivity envelope: log q from _LOG_Q_FLOOR in steps of _LOG_Q_STEP.
_LOG_Q_FLOOR = -92.0  # q = 1e-40
_LOG_Q_STEP = 1e-3


def _q_max_at_distance(sorted_counts: np.ndarray, ks: np.ndarray, gamma: float) -> np.ndarray:
    """Largest Lemma 4 bound over all histograms within distance ``k`` (``(n, len(ks))``).

    ``sorted_counts`` is ``(n, C)`` sorted descending, with gaps ``g_j = n_1 - n_j``.
    After ``k`` changed votes every gap is at least ``g_j - k - b_j`` with ``sum b_j = k``
    (each change lowers the top count by at most one and raises one other count by at
    most one). The summand ``h(x) = (2 + x) e^{-x} / 4`` is convex and decreasing on
    ``x >= 0``, so the sum is largest at a vertex of that simplex, and the vertex that
    spends all ``k`` raises on the runner-up (smallest gap) is the largest:
    ``q_max(k) = h(gamma (g_2 - 2k)) + sum_{j>2} h(gamma (g_j - k))`` — the histogram
    with ``k`` votes moved from the top class to the runner-up. Once ``2k >= g_2`` a tie
    is reachable and the bound is the cap ``1 - 1/C``.
    """
    c = sorted_counts.shape[-1]
    gaps = sorted_counts[:, :1] - sorted_counts[:, 1:]  # (n, C-1), ascending
    shift = np.concatenate([[2.0], np.ones(c - 2)])
    moved = gaps[:, None, :] - ks[None, :, None] * shift  # (n, K, C-1)
    tie = moved[..., 0] <= 0
    log_q = _log_q_from_gaps(np.maximum(moved, 0.0), gamma, np.zeros(c - 1, dtype=bool))
    return np.where(tie, 1.0 - 1.0 / c, np.minimum(np.exp(log_q), 1.0 - 1.0 / c))


def _sensitivity_envelope(gamma: float, moments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The envelope of :func:`_cached_envelope`, computed once per (gamma, moments)."""
    return _cached_envelope(float(gamma), tuple(float(m) for m in moments))


#: The most grid cells of the envelope; the log-q step is at least span / _MAX_CELLS.
_MAX_CELLS = 1 << 17


@functools.lru_cache(maxsize=32)
def _cached_envelope(gamma: float, moments: tuple) -> tuple[np.ndarray, np.ndarray]:
    """A non-decreasing ``B(q)`` with ``LS(d) <= B(q)`` whenever ``q_bound(d) <= q``.

    One changed vote moves each gap by at most 2 and, while the top class stays on top,
    each Lemma 4 summand by a factor in ``[e^{-2 gamma}, e^{2 gamma}]`` (``h(x -+ 2
    gamma) / h(x)`` lies there), so a neighbour's bound lies in ``[e^{-2 gamma} q, e^{2
    gamma} q]``. A change that moves the top class needs a gap of at most 2 before and
    after, where ``q >= h(2 gamma) >= 1/(1 + e^{2 gamma})``: both sides use the
    data-independent bound and the log moment does not move. ``g(q) =
    logmgf(q, 2 gamma, l)`` is non-decreasing in ``q`` (tested), so on each grid cell
    ``[lo, hi]`` the change is at most
    ``max(g(e^{2 gamma} hi) - g(lo), g(hi) - g(e^{-2 gamma} lo))``; the running maximum
    over cells is the envelope. Returns the grid's upper cell ends and ``B`` at them,
    shape ``(cells, L)``.

    Memory is bounded for every gamma: the grid has at most ``_MAX_CELLS`` cells (its
    log-q step is ``2 gamma / m`` for gammas where that is about 1e-3, and never below
    ``span / _MAX_CELLS``; the bound above holds for any grid) and ``g`` at the shifted
    ends is evaluated directly, moments in chunks.
    """
    moments = np.asarray(moments)
    eps = 2.0 * gamma
    m = max(1, round(eps / _LOG_Q_STEP))
    step = eps / m
    # top: the largest q where Theorem 3 may apply (1/(1+e^eps)), times e^eps, plus a step.
    top = -np.logaddexp(0.0, eps) + eps + step
    step = max(step, (top - _LOG_Q_FLOOR) / (_MAX_CELLS - 2))
    cells = int(math.ceil((top - _LOG_Q_FLOOR) / step)) + 1
    log_hi = _LOG_Q_FLOOR + step * np.arange(cells)  # upper ends; lower end: one step below
    log_lo = log_hi - step
    first = (np.arange(cells) == 0)[:, None]  # the first cell starts at q = 0

    def g(log_q, chunk):
        return logmgf(np.exp(np.minimum(log_q, 0.0)), eps, chunk)

    envelope = np.empty((cells, moments.size))
    per_chunk = max(1, (1 << 21) // cells)
    for c in range(0, moments.size, per_chunk):
        chunk = moments[c:c + per_chunk]
        g_zero = logmgf(0.0, eps, chunk)
        g_lo = np.where(first, g_zero, g(log_lo, chunk))
        up = g(log_hi + eps, chunk) - g_lo  # g(e^{2 gamma} hi) - g(lo)
        down = g(log_hi, chunk) - np.where(first, g_zero, g(log_lo - eps, chunk))
        envelope[:, c:c + per_chunk] = np.maximum.accumulate(np.maximum(up, down), axis=0)
    hi = np.exp(log_hi)
    hi.flags.writeable = False
    envelope.flags.writeable = False
    return hi, envelope


def smooth_sensitivity(votes, gamma, moments, beta) -> np.ndarray:
    """β-smooth upper bound on the local sensitivity of each query's log moment.

    Formal guarantee: with ``f(d) = logmgf(q_bound(d, gamma), 2 gamma, l)`` (one query,
    one order) and ``LS`` its local sensitivity under one changed teacher vote, returns
    ``S(d) = max_k exp(-beta k) A(k)`` with ``A(k) >= max{LS(d') : dist(d, d') <= k}``.
    ``S`` is then a β-smooth upper bound on ``LS`` (Nissim, Raskhodnikova, Smith 2007,
    Definition 2.1 and Lemma 2.3); PATE 2017 (Appendix C) releases ε with it.
    ``A(k) = B(q_max(k))``: ``q_max(k)`` bounds ``q_bound`` over every histogram within
    distance ``k`` (see :func:`_q_max_at_distance`) and ``B`` bounds the local
    sensitivity of every histogram with a smaller ``q`` (see
    :func:`_sensitivity_envelope`). Once a tie is reachable ``A`` is constant, so
    ``k`` stops there.

    Differs from the published code on two counts. Its ``sens_at_k`` tests
    ``counts[0] < counts[1] + k`` on the *unsorted* counts, so a histogram whose
    plurality is not class 0 got smooth sensitivity 0. And even on sorted counts it
    only measures ``f(d_{k+1}) - f(d_k)`` along the path ``d_k`` that moves votes from the
    top class to the runner-up: that misses the change towards the top class and
    histograms off the path, and underestimates the local sensitivity (a brute-force
    search over small histograms finds it up to e^{1.5} times too small; pinned in the
    tests). This bound holds for every histogram at every distance.

    Args:
      votes: counts, shape ``(..., num_classes)``.
      gamma: inverse Laplace scale of LNMax, > 0.
      moments: orders ``l >= 1``, 1-d.
      beta: smoothness parameter, > 0.

    Returns:
      float64 array of shape ``votes.shape[:-1] + moments.shape``. Data-dependent:
      **private**.
    """
    gamma = check_positive("gamma", gamma)
    beta = check_positive("beta", beta)
    l = check_moments(moments)
    counts = _as_counts(votes)
    lead = counts.shape[:-1]
    flat = -np.sort(-counts.reshape(-1, counts.shape[-1]), axis=-1)
    grid, envelope = _sensitivity_envelope(gamma, l)
    out = np.zeros((flat.shape[0], l.size))
    # k runs to the first tie, ceil(g_2 / 2); blocks of queries with similar g_2 keep the
    # (queries, k, classes) tensor small.
    k_tie = np.ceil((flat[:, 0] - flat[:, 1]) / 2.0).astype(np.int64)
    order = np.argsort(k_tie, kind="stable")
    tops = k_tie[order]
    width = flat.shape[1]
    start = 0
    while start < order.size:
        stop = min(order.size, start + max(1, _BLOCK_ELEMENTS // int((tops[start] + 1) * width)))
        while stop > start + 1 and (stop - start) * (tops[stop - 1] + 1) * width > _BLOCK_ELEMENTS:
            stop = start + (stop - start) // 2
        idx = order[start:stop]
        k_max = int(tops[stop - 1])
        # The distance range in chunks too: one query with a huge vote gap (many
        # teachers) never materialises more than about _BLOCK_ELEMENTS numbers.
        k_step = max(1, _BLOCK_ELEMENTS // (idx.size * max(width, l.size)))
        best = np.zeros((idx.size, l.size))
        for k0 in range(0, k_max + 1, k_step):
            ks = np.arange(k0, min(k_max, k0 + k_step - 1) + 1, dtype=np.float64)
            q_max = _q_max_at_distance(flat[idx], ks, gamma)  # (b, K)
            cell = np.minimum(np.searchsorted(grid, q_max), grid.size - 1)
            with np.errstate(over="ignore"):  # beta * k past the float range: weight 0
                decay = np.exp(-beta * ks)
            weighted = envelope[cell] * decay[None, :, None]  # (b, K, L)
            valid = ks[None, :] <= k_tie[idx][:, None]
            best = np.maximum(best, np.where(valid[..., None], weighted, 0.0).max(axis=1))
        out[idx] = best
        start = stop
    return out.reshape(lead + (l.size,))
