"""Interactive-GNMax's check (2018 paper, Section 4.2 and Algorithm 2): the teachers answer a
query only where they disagree with the student.

The student proposes class probabilities p(x) on a public pool point; they are public
(post-processing of an earlier release and public data). With T teachers and votes n, the
check statistic is

    s(n) = max_j (n_j − o_j),   o_j = ⌊T·p_j⌋  (the student's *check offsets*),

and Confident-GNMax's threshold step runs on s instead of max_j n_j: the teachers answer
(GNMax on n, σ₂) when s + N(0, σ₁²) ≥ t. The offsets are whole numbers here (the paper uses
T·p_j itself) so that s takes the values of a vote count:

- Range. o_j ≥ 0 gives s ≤ max_j n_j ≤ T; Σ_j o_j ≤ T·Σ_j p_j = T gives
  Σ_j (n_j − o_j) ≥ 0, so s ≥ 0. Hence s ∈ {0, …, T}, the domain of max_j n_j.
- Sensitivity. Replace-one (one teacher's vote moves from class a to class b): each
  coordinate n_j − o_j moves by at most 1 and a maximum of 1-Lipschitz coordinates moves by
  at most 1, so s' ∈ {s − 1, s, s + 1} — the integer, sensitivity-1 statistic that every
  threshold-step bound of the Confident-GNMax analysis assumes (`analysis.bounds.gnmax.rdp_threshold`,
  the Hölder weight of `analysis.bounds.confident`, the threshold's local-sensitivity tables of
  `analysis.sanitised.gnmax_sensitivity`: a neighbour at distance d has s' ∈ [s − d, s + d]).

So every Confident-GNMax bound holds with s in place of max_j n_j, the offsets fixed (they do
not depend on the private data). The GNMax part reads n itself. The data-independent cost is
Confident-GNMax's. Where the teachers do not answer, the 2018 paper keeps the student's own
label when it is confident; that is post-processing of the released bit and public values,
and is not released here (the student's own training sees it anyway).
"""

from __future__ import annotations

import numpy as np

from analysis.core.errors import PateError
from analysis.core.validation import check_counts

__all__ = ["check_offsets", "check_statistic"]


def check_offsets(probs, num_teachers: int) -> np.ndarray:
    """o = ⌊T·p⌋ row by row, int64, each row summing to at most T (module docstring).

    ``probs``: the student's class probabilities, shape (..., classes), each row non-negative
    and finite. Rows are normalised in float64 first; a row whose floors still sum above T
    (possible only through rounding) loses the excess from its largest offsets.
    """
    T = int(num_teachers)
    if T < 1:
        raise PateError(f"num_teachers must be >= 1, got {num_teachers}")
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim < 1 or p.shape[-1] < 2:
        raise PateError(f"student probabilities must have shape (..., classes >= 2), got {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise PateError("student probabilities must be finite and non-negative")
    total = p.sum(axis=-1, keepdims=True)
    if np.any(total <= 0):
        raise PateError("a row of student probabilities sums to 0")
    o = np.floor(T * (p / total)).astype(np.int64)
    o = np.clip(o, 0, T)
    excess = o.sum(axis=-1) - T
    while np.any(excess > 0):  # only through float rounding: take one from the largest offset
        rows = np.flatnonzero(excess.ravel() > 0)
        flat = o.reshape(-1, o.shape[-1])
        flat[rows, np.argmax(flat[rows], axis=-1)] -= 1
        o = flat.reshape(o.shape)
        excess = o.sum(axis=-1) - T
    return o


def check_statistic(votes, offsets=None) -> np.ndarray:
    """s = max_j (n_j − o_j) of every row (int64, in 0..T), or max_j n_j without offsets.

    Raises:
      PateError: offsets of another shape, not whole non-negative numbers, or a row of them
        summing above its row's teacher count (then s could be negative: not the check).
    """
    votes = check_counts(votes)
    if offsets is None:
        return votes.max(axis=-1)
    o = np.asarray(offsets)
    if o.shape != votes.shape:
        raise PateError(f"check offsets must have the votes' shape {votes.shape}, got {o.shape}")
    if not np.issubdtype(o.dtype, np.integer):
        raise PateError(f"check offsets must be whole numbers, got dtype {o.dtype}")
    o = o.astype(np.int64)
    if np.any(o < 0) or np.any(o.sum(axis=-1) > votes.sum(axis=-1)):
        raise PateError("check offsets must be non-negative and sum to at most the teacher count per query")
    return (votes - o).max(axis=-1)
