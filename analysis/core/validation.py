"""The checks every analysis input passes, in one place (numpy only).

Each raises :class:`analysis.core.errors.PateError` with one line naming the parameter, so the
CLI can show it as is. Vote files are read and checked row by row in ``analysis.core.votes``
(``check_votes``); the checks here also accept the broadcast shapes ``(..., classes)``
that the per-query formulas take.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.core.errors import PateError


def check_delta(delta) -> float:
    """``delta`` as a float after checking ``0 < delta < 1``."""
    try:
        delta = float(delta)
    except (TypeError, ValueError):
        raise PateError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not 0.0 < delta < 1.0:
        raise PateError(f"delta must lie strictly between 0 and 1, got {delta}")
    return delta


def check_positive(name: str, value) -> float:
    """``value`` as a finite positive float."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise PateError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise PateError(f"{name} must be a positive number, got {value}")
    return value


def check_count(name: str, value, least: int = 0) -> int:
    """``value`` as an int after checking it is a whole number ``>= least`` (3.0 passes)."""
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise PateError(f"{name} must be a whole number, got {value!r}") from None
    if n < least or n != value:
        raise PateError(f"{name} must be a whole number >= {least}, got {value}")
    return n


def check_sigma(sigma, name: str = "sigma") -> float:
    """A Gaussian noise scale: positive, finite, and large enough that λ/σ² is finite."""
    sigma = check_positive(name, sigma)
    option = "--" + name.replace("_", "-")
    if sigma < 1e-100:  # λ/σ² would overflow: no finite privacy guarantee exists anyway
        raise PateError(f"{option} {sigma:g} is too small to give any finite eps; use at least 1e-100")
    if sigma > 1e100 and name != "sigma_ss":  # σ² would overflow; such noise answers at random
        raise PateError(f"{option} {sigma:g} is too large (σ² overflows); use at most 1e100")
    return sigma


def check_counts(votes, num_teachers: int | None = None) -> np.ndarray:
    """Vote counts of shape ``(..., classes)``, ``classes >= 2``: whole, non-negative,
    finite; with ``num_teachers``, every row sums to it. Returns int64."""
    arr = np.asarray(votes)
    if arr.ndim < 1 or arr.shape[-1] < 2:
        raise PateError(f"votes must have shape (..., classes) with at least 2 classes, got {arr.shape}")
    if arr.size == 0:
        raise PateError("votes is empty")
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise PateError(f"votes must be numeric counts, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise PateError("votes must be real counts, got complex numbers")
    if not np.issubdtype(arr.dtype, np.integer) and arr.dtype != bool:
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise PateError("votes must be whole, finite vote counts")
    if np.any(arr < 0):
        raise PateError("votes must be non-negative counts")
    arr = arr.astype(np.int64, copy=False)  # no copy of an int64 histogram: callers only read it
    if num_teachers is not None:
        sums = arr.sum(axis=-1)
        if np.any(sums != num_teachers):
            bad = np.flatnonzero(np.ravel(sums != num_teachers))
            raise PateError(
                f"{bad.size} vote rows do not sum to {num_teachers} teachers (first: row {bad[0]} sums to "
                f"{np.ravel(sums)[bad[0]]})")
    return arr


def teachers_of(votes: np.ndarray, num_teachers=None) -> int:
    """The teacher count: ``num_teachers`` when given, else the common row sum of ``votes``."""
    if num_teachers is None:
        sums = np.unique(votes.reshape(-1, votes.shape[-1]).sum(axis=-1))
        if sums.size != 1:
            raise PateError(f"vote rows sum to different totals ({sums[:3].tolist()}...); pass num_teachers")
        return int(sums[0])
    num_teachers = int(num_teachers)
    if num_teachers < 1:
        raise PateError(f"num_teachers must be positive, got {num_teachers}")
    return num_teachers
