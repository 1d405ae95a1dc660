"""The smooth sensitivity of the 2018 data-dependent RDP (Section B of the 2018 paper):
local-sensitivity profiles of one query's Theorem 6 bound at every distance, the
threshold step's, and their discounted sum over all queries (what the GNSS release in
``analysis.sanitised.gnss`` scales its noise by). All values here are functions of the votes:
**private**.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtri_exp

from analysis.bounds.confident import answer_weight, rdp_confident
from analysis.core.errors import PateError
from analysis.bounds.interactive import check_statistic
from analysis.bounds.gnmax import check_answered_mask, log_q, rdp, rdp_threshold, theorem6
from analysis.accounting.rdp import check_orders
from analysis.core.validation import check_counts, check_sigma, teachers_of

__all__ = ["local_sensitivity_profile", "smooth_sensitivity"]

_SQRT2 = math.sqrt(2.0)

# Below this many nats under the start of the local-sensitivity peak, the profile of a
# query is bounded by its value at the cut (see `_GNMaxLS`). A fixed constant keeps the
# bound a smooth function; it only costs tightness of order e^{-40}·(peak).
_FLOOR_NATS = 40.0
# Points of the grid on which Condition C5 (β monotone in q̃) is checked.
_CHECK_GRID = 4001
# Queries per chunk in the smooth-sensitivity profile (memory ~ chunk × teachers).
_CHUNK = 256


class _GNMaxLS:
    """Local sensitivity of the Theorem 6 bound β(q̃) at one order, as a function of q̃.

    Notation: m classes, T teachers, s = √2σ. For a vote set y, q̃(y) is `log_q` (union
    bound, capped at 1 − 1/m); it is always ≥ q_min = (m−1)Φ(−T/s) (every gap is ≤ T).

    Neighbours (2018 paper, Section B.4). Every gap moves by at most 2 between neighbours
    (also when the argmax changes), so each term Φ(−g/s) moves at most to Φ(Φ⁻¹(·) ± √2/σ).
    That map is concave (+) / convex (−) in its argument, so over all ways to split q̃ into
    m − 1 terms the extremes are at equal terms: q̃(y') ∈ [bl(q̃), bu(q̃)] with
    bu/bl(q) = (m−1) Φ(Φ⁻¹(q/(m−1)) ± √2/σ), clipped to [q_min, 1 − 1/m]. As β is
    non-decreasing in q (Condition C5, checked on a dense grid here; the paper's code
    assumes it), LS(q) = max(β(bu q) − β(q), β(q) − β(bl q)), and on a cell [a, b] of q̃
    values LS ≤ CB = max(β(bu b) − β(a), β(b) − β(bl a)) — using C5 only.

    The paper also relies on Condition C6 (LS rising up to q₁ = bl(q₀), q₀ where β reaches
    λ/σ²). It fails for large orders relative to σ (e.g. σ = 40, λ ≥ 50; σ = 100, λ ≥ 100),
    so here the profile uses running maxima of the cell bounds instead: `env_up(u)` ≥ LS on
    every q̃ ≤ u and `env_down(l)` ≥ LS on every q̃ ≥ l. Cells are uniform in
    z = Φ⁻¹(q/(m−1)), 64 per neighbour step √2/σ (≈ 3% slack), plus one cell [q_min, cut]
    for everything more than `_FLOOR_NATS` below the peak.
    """

    def __init__(self, sigma: float, order: float, num_classes: int, num_teachers: int, cells_per_step=64):
        self.sigma = sigma
        self.order = float(order)
        self.m = int(num_classes)
        self.T = int(num_teachers)
        self._orders = np.array([self.order])
        self.log_m1 = math.log(self.m - 1)
        self.cap = math.log1p(-1.0 / self.m)
        self.qmin = min(self.cap, self.log_m1 + float(log_ndtr(-self.T / (_SQRT2 * sigma))))
        self.indep = self.order / sigma**2
        self.step = _SQRT2 / sigma
        self.trivial = not bool(self.beta(self.qmin) < self.indep)
        if self.trivial:  # β is λ/σ² on every reachable vote set (given C5): f is constant, LS = 0
            self.cut_lo = self.cut_hi = self.cut = self.qmin
            self.peak = 0.0
            self._check_c5()
            return
        lo, hi = self.qmin, self.cap  # bisection for q₀ = sup{q : β(q) < λ/σ²}
        if bool(self.beta(hi) < self.indep):
            lo = hi
        else:
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                if bool(self.beta(mid) < self.indep):
                    lo = mid
                else:
                    hi = mid
                if hi - lo <= 1e-13 * max(1.0, abs(lo)):
                    break
        self.cut_lo = float(self.down(lo))  # ≤ q₁: below it, profiles follow the largest q̃
        self.cut_hi = float(hi)  # ≥ q₀: above it, profiles follow the smallest q̃
        self.cut = max(self.qmin, self.cut_lo - _FLOOR_NATS)
        self._check_c5()
        z = np.arange(float(self._z(self.cut)), float(self._z(self.cap)), self.step / cells_per_step)
        inner = self.log_m1 + log_ndtr(z)
        inner = inner[(inner > self.cut) & (inner < self.cap)]
        edges = np.unique(np.concatenate([[self.qmin, self.cut], inner, [self.cap]]))
        a, b = edges[:-1], edges[1:]
        cb = np.maximum(self.beta(self.up(b)) - self.beta(a), self.beta(b) - self.beta(self.down(a)))
        self.edges = edges
        self.cb = np.maximum(cb, 0.0)
        self._run_up = np.maximum.accumulate(self.cb)
        self._run_down = np.maximum.accumulate(self.cb[::-1])[::-1]
        self.peak = float(self.cb.max())

    def beta(self, logq):
        return theorem6(logq, self.sigma, self._orders)[..., 0]

    def _z(self, logq):
        return ndtri_exp(np.minimum(np.asarray(logq, dtype=float) - self.log_m1, 0.0))

    def up(self, logq, steps=1):
        return np.minimum(self.cap, self.log_m1 + log_ndtr(self._z(logq) + steps * self.step))

    def down(self, logq, steps=1):
        return np.maximum(self.qmin, self.log_m1 + log_ndtr(self._z(logq) - steps * self.step))

    def ls(self, logq):
        """LS at a point q̃ (no cell slack): max(β(bu q) − β(q), β(q) − β(bl q))."""
        b = self.beta(logq)
        return np.maximum(self.beta(self.up(logq)) - b, b - self.beta(self.down(logq)))

    def _check_c5(self):
        """Condition C5 (Section B.4): β non-decreasing in q, on a dense grid."""
        x = np.linspace(math.sqrt(-self.cap), math.sqrt(-self.qmin), _CHECK_GRID)
        near = np.linspace(self.cut_lo - 2.0, self.cut_hi + 2.0, _CHECK_GRID)
        grid = np.unique(np.concatenate([-(x**2), near, [self.cut_lo, self.cut_hi, self.cap, self.qmin]]))
        b = self.beta(grid[(grid >= self.qmin) & (grid <= self.cap)])
        if np.any(np.diff(b) < -1e-9 * np.abs(b[1:]) - 1e-300):
            raise PateError(
                f"smooth sensitivity: the Theorem 6 bound is not monotone in q for sigma={self.sigma:g}, "
                f"order={self.order:g} (Condition C5 of the 2018 paper, Section B.4, fails); choose another order"
            )

    def _cell(self, logq):
        return np.clip(np.searchsorted(self.edges, logq, side="right") - 1, 0, self.cb.size - 1)

    def env_up(self, u):
        """≥ LS(q̃) for every q̃ ≤ u; non-decreasing in u."""
        u = np.asarray(u, dtype=float)
        if self.trivial:
            return np.zeros(u.shape)
        return np.where(u >= self.cut_lo, self.peak, self._run_up[self._cell(u)])

    def env_down(self, l):
        """≥ LS(q̃) for every q̃ ≥ l; non-increasing in l."""
        l = np.asarray(l, dtype=float)
        if self.trivial:
            return np.zeros(l.shape)
        return np.where(l <= self.cut_hi, self.peak, self._run_down[self._cell(l)])


def _distinct_gaps(srt_desc: np.ndarray):
    """For rows sorted descending: top-vs-rest gaps of classes 3..m as (values, counts).

    Padded to the longest row with value 0 / count 0. Classes with equal counts share a
    term of the union bound, which makes the trajectory below cheap.
    """
    n, m = srt_desc.shape
    if m < 3:
        return np.zeros((n, 1), np.int64), np.zeros((n, 1), np.int64)
    gaps = srt_desc[:, :1] - srt_desc[:, 2:]  # ascending along the row
    new = np.ones(gaps.shape, bool)
    new[:, 1:] = gaps[:, 1:] != gaps[:, :-1]
    k = np.cumsum(new, axis=1) - 1
    width = int(k[:, -1].max()) + 1
    vals = np.zeros((n, width), np.int64)
    cnts = np.zeros((n, width), np.int64)
    rows = np.broadcast_to(np.arange(n)[:, None], gaps.shape)
    vals[rows[new], k[new]] = gaps[new]
    np.add.at(cnts, (rows.ravel(), k.ravel()), 1)
    return vals, cnts


def _gnmax_profiles(votes: np.ndarray, sigma: float, order: float, num_teachers: int, ls: _GNMaxLS):
    """Yields (row slice, A) with A[i, d] ≥ max LS over vote sets within distance d of row i.

    d runs over 0..T (beyond T every vote set is within reach). For each row:
    - q̃ below the peak: the largest q̃ within distance d is exact — moving d votes from the
      top class to the runner-up maximises the union bound while the top stays on top
      (Φ(−g/s) is convex for g ≥ 0, so concentrating the moves on the smallest gap is
      best; moves not taking from the top are dominated). Gaps become g₂ − 2d and g_j − d;
      after d > g₂/2 the cap 1 − 1/m is used. Below a fixed cut (`_FLOOR_NATS` under the
      peak) the value at the cut is used; the closed form bu^d locates where the exact
      part starts.
    - q̃ above the peak: the smallest q̃ within distance d is bounded below by bl^d(q̃).
    Each profile is the maximum over a distance-d ball of one fixed function of the vote
    set, or of LS over an interval that nests ([L(D', d), U(D', d)] ⊆ [L(D, d+1), U(D, d+1)]
    for neighbours), which is what makes the β-discounted maximum a β-smooth bound.
    """
    T = num_teachers
    s = _SQRT2 * sigma
    m = votes.shape[-1]
    darange = np.arange(T + 1)
    table = log_ndtr(-np.arange(T + 1) / s)  # log Φ(−x/s), x = 0..T
    logq_all = log_q(votes, sigma)
    cut = ls.cut
    floor_val = 0.0 if ls.trivial else float(ls.env_up(cut - 1.0))
    for start in range(0, votes.shape[0], _CHUNK):
        sl = slice(start, min(start + _CHUNK, votes.shape[0]))
        lq = logq_all[sl]
        n = lq.shape[0]
        if ls.trivial:
            yield sl, np.zeros((n, T + 1))
            continue
        A = np.full((n, T + 1), ls.peak)
        left = np.flatnonzero(lq > ls.cut_hi)
        if left.size:
            A[left] = _left_profiles(lq[left], T, ls)
        right = np.flatnonzero(lq < ls.cut_lo)
        if right.size:
            A[right] = _right_profiles(votes[sl][right], lq[right], T, s, m, table, cut, floor_val, ls, darange)
        yield sl, A


def _left_profiles(lq, T, ls: _GNMaxLS, window=8):
    """Rows with q̃ above the peak: A(d) = env_down(bl^d(q̃)), the peak once bl^d(q̃) ≤ cut_hi.

    LS vanishes for q ≥ bu(q₀) (there β(q) = β(bl q) = λ/σ²), i.e. more than ~2 steps above
    cut_hi, so only a window of `window` distances before the peak is evaluated; the
    distances before it are 0, which is checked (else the whole row is evaluated).
    """
    n = lq.shape[0]
    z0 = ls._z(lq)
    zc = float(ls._z(ls.cut_hi))
    k = np.clip(np.ceil((z0 - zc) / ls.step).astype(np.int64), 0, T + 1)  # first d at/below cut_hi
    out = np.full((n, T + 1), ls.peak)
    d = (k - window)[:, None] + np.arange(window + 1)[None, :]
    dc = np.clip(d, 0, T)
    vals = ls.env_down(ls.down(lq[:, None], dc))
    if np.any((d[:, 0] > 0) & (vals[:, 0] > 0)):  # window too short: evaluate everything
        return ls.env_down(ls.down(lq[:, None], np.arange(T + 1)[None, :]))
    rows = np.broadcast_to(np.arange(n)[:, None], d.shape)
    cols = np.arange(T + 1)[None, :]
    out[cols < np.maximum(k - window, 0)[:, None]] = 0.0
    keep = (d >= 0) & (d <= T)
    out[rows[keep], d[keep]] = vals[keep]
    # At and beyond k the bound is the peak (bl^d ≤ cut_hi); vals there are peak already.
    return out


def _right_profiles(v, lq, T, s, m, table, cut, floor_val, ls: _GNMaxLS, darange, budget=4_000_000):
    """Rows with q̃ below the peak: A(d) = env_up(U(d)), U(d) = the largest q̃ within distance d."""
    n = v.shape[0]
    srt = -np.sort(-v, axis=1)
    g2 = srt[:, 0] - srt[:, 1]
    vals, cnts = _distinct_gaps(srt)
    logc = np.where(cnts > 0, np.log(np.maximum(cnts, 1)), -np.inf)
    # Before d_lo even the closed-form bound bu^d(q̃) is below the cut.
    z0 = ls._z(lq)
    zc = float(ls._z(cut))
    d_lo = np.clip(np.floor((zc - z0) / ls.step), 0, T).astype(np.int64)
    # From d_hi on the runner-up term alone is at the peak, or the top has been overtaken.
    zr = float(ndtri_exp(min(ls.cut_lo, -1e-300)))
    d_hi = np.ceil((g2 + s * zr) / 2.0).astype(np.int64) + 1
    d_hi = np.clip(np.minimum(d_hi, g2 // 2 + 1), d_lo + 1, T + 1)
    out = np.full((n, T + 1), ls.peak)
    out[darange[None, :] < d_lo[:, None]] = floor_val
    length = d_hi - d_lo
    order = np.argsort(length, kind="stable")
    width = vals.shape[1]
    i = 0
    while i < n:  # groups of rows of similar length, ≤ `budget` terms each
        j = i + 1
        while j < n and (j - i + 1) * int(length[order[j]]) * (width + 1) <= budget:
            j += 1
        sub = order[i:j]
        L = int(length[sub].max())
        d = d_lo[sub, None] + np.arange(L)[None, :]
        valid = d < d_hi[sub, None]
        d = np.minimum(d, T)
        x2 = g2[sub, None] - 2 * d
        ub = table[np.clip(x2, 0, T)]
        if m >= 3:
            xr = np.clip(vals[sub][:, None, :] - d[:, :, None], 0, T)
            terms = logc[sub][:, None, :] + table[xr]
            mx = terms[..., 0]  # smallest gap j ≥ 3 (count ≥ 1): the largest term but for ties in count
            mx = np.maximum(mx, terms.max(axis=-1))
            ub = np.logaddexp(ub, mx + np.log(np.exp(terms - mx[..., None]).sum(axis=-1)))
        ub = np.where(x2 >= 0, np.minimum(ub, ls.cap), ls.cap)
        a = ls.env_up(ub)
        rows = np.broadcast_to(sub[:, None], d.shape)
        out[rows[valid], d[valid]] = a[valid]
        i = j
    return out


def local_sensitivity_profile(votes, num_teachers, sigma, order):
    """Upper bounds on the local sensitivity at distance d of the GNMax data-dependent RDP.

    For each vote row D and d = 0..T returns A(d) ≥ max{LS(y) : y within d changed
    teachers of D}, where LS(y) = max over neighbours y' of |β(y) − β(y')| and β is `rdp`
    at `order` (2018 paper, Section B.4; the paper's Algorithms 3–5 compute the same
    quantity by moving votes one at a time). Shape votes.shape[:-1] + (T+1,).
    """
    votes = check_counts(votes)
    sigma = check_sigma(sigma)
    order = float(check_orders([order])[0])
    T = teachers_of(votes, num_teachers)
    check_counts(votes, T)
    flat = votes.reshape(-1, votes.shape[-1])
    ls = _GNMaxLS(sigma, order, flat.shape[-1], T)
    out = np.empty((flat.shape[0], T + 1))
    for sl, A in _gnmax_profiles(flat, sigma, order, T, ls):
        out[sl] = A
    return out.reshape(votes.shape[:-1] + (T + 1,))


def smooth_sensitivity(votes, num_teachers, sigma, order, beta):
    """β-smooth sensitivity of one GNMax answer's data-dependent RDP (2018 paper, Section B).

    SS_β(D) = max_{d ≥ 0} e^{−βd} A(d) with A from `local_sensitivity_profile` (the
    paper's Algorithm 3 gives A(0); Section B.2 the smooth maximum). It satisfies
    SS_β(D) ≥ LS(D) and SS_β(D') ≤ e^β SS_β(D) for neighbours (Nissim, Raskhodnikova,
    Smith 2007). For many queries, `sanitized_eps` bounds the sensitivity of the sum by
    the discounted maximum of the summed profiles, which is smaller than the sum of
    these per-query values. Shape votes.shape[:-1].
    """
    beta = float(beta)
    if not (beta > 0 and math.isfinite(beta)):
        raise PateError(f"beta must be a positive number, got {beta!r}")
    prof = local_sensitivity_profile(votes, num_teachers, sigma, order)
    disc = np.exp(-beta * np.arange(prof.shape[-1]))
    return np.max(prof * disc, axis=-1)


# ------------------------------------------------------------------ the sum over queries


def _threshold_tables(T, threshold, sigma_threshold, sigma, order, joint):
    """Per max-vote v = 0..T: f-part values and the LS bound h(v), plus the weight W₁(v)."""
    orders = np.array([order])
    v = np.arange(T + 1)
    logp = log_ndtr((v - float(threshold)) / sigma_threshold)
    thr = rdp_threshold(logp, sigma_threshold, orders)[:, 0]
    ls_thr = _neighbour_ls(thr)
    if not joint:
        return thr, ls_thr, None, None
    w = np.maximum.accumulate(answer_weight(logp, sigma_threshold, orders)[:, 0])
    e_max = order / sigma**2  # largest GNMax RDP at this order
    b_max = (order - 1.0) * e_max
    # |g(w', e) − g(w, e)| ≤ c·|w' − w| with c = expm1(b_max)/(λ−1), and ≤ e_max (g is in [0, e]).
    lsw = _neighbour_ls(w)
    with np.errstate(over="ignore", invalid="ignore"):
        h = ls_thr + np.where(lsw > 0, np.minimum(np.expm1(b_max) / (order - 1.0) * lsw, e_max), 0.0)
        w_next = np.append(w[1:], w[-1])  # a neighbour's w is at most w(v + 1)
        w1 = np.exp(np.minimum(0.0, np.log(w_next) + b_max))  # min(1, w·e^{b_max})
    return thr, h, w, w1


def _neighbour_ls(f: np.ndarray) -> np.ndarray:
    """max(|f(v±1) − f(v)|) over the neighbours v ± 1 that exist in 0..T."""
    diff = np.abs(np.diff(f))
    out = np.zeros_like(f)
    out[:-1] = diff
    out[1:] = np.maximum(out[1:], diff)
    return out


def _ball_max_sums(h: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """F(d) = Σ_v counts[v] · max{h(v') : |v' − v| ≤ d, 0 ≤ v' ≤ T}, d = 0..T (exact); for
    a ``(k, T + 1)`` array of counts, the ``(k, T + 1)`` array of each row's F."""
    T1 = h.size
    out = np.empty(counts.shape[:-1] + (T1,))
    cur = h.copy()
    top = h.max()
    used = counts.reshape(-1, T1).sum(axis=0) > 0
    for d in range(T1):
        out[..., d] = counts @ cur
        if np.all(cur[used] >= top):
            out[..., d:] = counts.sum(axis=-1)[..., None] * top
            break
        nxt = cur.copy()
        nxt[1:] = np.maximum(nxt[1:], cur[:-1])
        nxt[:-1] = np.maximum(nxt[:-1], cur[1:])
        cur = nxt
    return out


def total_profile(votes, sigma, order, T, *, threshold, sigma_threshold, answered_mask, accounting,
                  offsets=None):
    """F(d) ≥ the local sensitivity at distance d of the whole data-dependent RDP at `order`,
    and f(D) itself (the exact data-dependent RDP at `order`, same function). The threshold's tables
    take v = max_j n_j, or max_j (n_j − o_j) with Interactive-GNMax's ``offsets`` (`analysis.bounds.interactive`:
    also in 0..T, moved by at most d at distance d, which is all the tables assume)."""
    ls = _GNMaxLS(sigma, order, votes.shape[-1], T)
    orders = np.array([order])
    gn = rdp(log_q(votes, sigma), sigma, orders)[:, 0]
    F = np.zeros(T + 1)
    if threshold is None:
        if offsets is not None:
            raise PateError("check offsets apply to Confident-GNMax only")
        for _, A in _gnmax_profiles(votes, sigma, order, T, ls):
            F += A.sum(axis=0)
        return F, float(gn.sum())
    joint = accounting == "joint"
    thr_tab, h, w_tab, w1 = _threshold_tables(T, threshold, sigma_threshold, sigma, order, joint)
    vmax = check_statistic(votes, offsets)
    F += _ball_max_sums(h, np.bincount(vmax, minlength=T + 1).astype(float))
    if joint:
        f = rdp_confident(thr_tab[vmax], gn, w_tab[vmax], order)
        d = np.arange(T + 1)
        for sl, A in _gnmax_profiles(votes, sigma, order, T, ls):
            weight = w1[np.minimum(vmax[sl, None] + d[None, :], T)]
            F += (weight * A).sum(axis=0)
        return F, float(f.sum())
    mask = check_answered_mask(answered_mask, votes.shape[0])
    if np.any(mask):
        for _, A in _gnmax_profiles(votes[mask], sigma, order, T, ls):
            F += A.sum(axis=0)
    return F, float(thr_tab[vmax].sum() + gn[mask].sum())


def prefix_profiles(votes, sigma, order, T, ends, *, threshold=None, sigma_threshold=None, offsets=None):
    """`total_profile` (joint accounting for Confident-GNMax) of every prefix ``votes[:e]``,
    ``e`` in the increasing ``ends``, in one pass: F and f are sums over the queries (the
    ball-maximum sums are linear in the counts), so each prefix is a cumulative sum of
    per-segment sums. Returns ``(F, f)`` of shapes ``(len(ends), T + 1)`` and ``(len(ends),)``.
    Private when the votes are (used on simulated votes by `analysis.planning.headline_target`).
    ``offsets``: Interactive-GNMax's check offsets, one row per vote row (as `total_profile`)."""
    ends = np.asarray(ends, dtype=int)
    if ends.ndim != 1 or ends.size == 0 or np.any(np.diff(ends) <= 0) or ends[0] < 1 or ends[-1] > votes.shape[0]:
        raise PateError(f"ends must increase within 1..{votes.shape[0]}, got {ends.tolist()}")
    votes = votes[:ends[-1]]
    offsets = None if offsets is None else np.asarray(offsets)[:ends[-1]]
    seg = np.searchsorted(ends, np.arange(votes.shape[0]), side="right")  # query i is in segment seg[i]
    F = np.zeros((ends.size, T + 1))
    ls = _GNMaxLS(sigma, order, votes.shape[-1], T)
    gn = rdp(log_q(votes, sigma), sigma, np.array([order]))[:, 0]
    if threshold is None:
        if offsets is not None:
            raise PateError("check offsets apply to Confident-GNMax only")
        for sl, A in _gnmax_profiles(votes, sigma, order, T, ls):
            _segment_add(F, seg[sl], A)
        f = gn
    else:
        thr_tab, h, w_tab, w1 = _threshold_tables(T, threshold, sigma_threshold, sigma, order, True)
        vmax = check_statistic(votes, offsets)
        counts = np.zeros((ends.size, T + 1))
        np.add.at(counts, (seg, vmax), 1.0)
        F += _ball_max_sums(h, counts)
        d = np.arange(T + 1)
        for sl, A in _gnmax_profiles(votes, sigma, order, T, ls):
            _segment_add(F, seg[sl], w1[np.minimum(vmax[sl, None] + d[None, :], T)] * A)
        f = rdp_confident(thr_tab[vmax], gn, w_tab[vmax], order)
    return np.cumsum(F, axis=0), np.cumsum(np.bincount(seg, weights=f, minlength=ends.size))


def _segment_add(F: np.ndarray, seg: np.ndarray, rows: np.ndarray) -> None:
    """F[s] += the sum of the ``rows`` whose (sorted) segment index is s."""
    index, starts = np.unique(seg, return_index=True)
    F[index] += np.add.reduceat(rows, starts, axis=0)
