"""Reading and validating vote histograms: the one gate every analysis input passes.

A vote histogram is an integer array ``(n, num_classes)``: row ``i`` counts how many
teachers predicted each class for query ``i``. Every row sums to the number of teachers.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from analysis.core.errors import PateError
from analysis.core.files import open_plain


#: The largest vote histogram (queries x classes) built from predicted labels, and the
#: largest count a histogram may hold: bounds on memory and on the smooth sensitivity's
#: distance range, far above any real ensemble.
MAX_VOTE_ENTRIES = 1 << 27
MAX_TEACHERS = 10**7


def check_votes(votes, *, num_teachers: int | None = None, name: str = "votes") -> np.ndarray:
    """Validates a vote histogram and returns it as int64 ``(n, num_classes)``.

    Args:
      votes: array-like of non-negative integer counts, shape ``(n, num_classes)``.
      num_teachers: when given, every row must sum to it.
      name: how the input is named in error messages.

    Raises:
      PateError: empty, wrong rank, fewer than two classes, NaN, fractional or negative
        counts, or rows that sum to different teacher counts.
    """
    arr = np.asarray(votes)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool) \
            or np.issubdtype(arr.dtype, np.complexfloating):
        raise PateError(f"{name} must be real numeric counts, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise PateError(
            f"{name} must be a 2-d histogram (queries × classes), got shape {arr.shape}; "
            "pass --input-is-labels for a teachers × queries matrix of predicted labels")
    if arr.shape[0] == 0:
        raise PateError(f"{name} is empty (0 queries)")
    if arr.shape[1] < 2:
        raise PateError(f"{name} has {arr.shape[1]} class column(s); a histogram needs at least 2")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)):
            bad = int(np.argwhere(~np.isfinite(arr))[0][0])
            raise PateError(f"{name} row {bad} holds NaN or infinite counts")
        if np.any(np.abs(arr) > MAX_TEACHERS):
            raise PateError(f"{name} holds counts above {MAX_TEACHERS:g} teachers; is it a vote histogram?")
        if np.any(arr != np.round(arr)):
            bad = int(np.argwhere(arr != np.round(arr))[0][0])
            raise PateError(f"{name} row {bad} holds fractional counts; votes are whole teacher counts")
    if np.any(arr < 0):
        bad = int(np.argwhere(arr < 0)[0][0])
        raise PateError(f"{name} row {bad} holds negative counts")
    arr = arr.astype(np.int64)
    if arr.max() > MAX_TEACHERS:
        raise PateError(f"{name} holds counts above {MAX_TEACHERS:g} teachers; is it a vote histogram?")
    sums = arr.sum(axis=1)
    expected = int(sums[0]) if num_teachers is None else int(num_teachers)
    wrong = np.flatnonzero(sums != expected)
    if wrong.size:
        i = int(wrong[0])
        raise PateError(
            f"{name} has {wrong.size} row(s) not summing to {expected} teachers "
            f"(row {i} sums to {int(sums[i])}); every query must count every teacher once")
    if expected <= 0:
        raise PateError(f"{name} rows sum to {expected}; there must be at least one teacher")
    return arr


def labels_to_votes(predictions, num_classes: int | None = None) -> np.ndarray:
    """Turns a ``(num_teachers, n)`` matrix of predicted labels into a vote histogram.

    This is the input format of the 2017 paper's ``analysis.py`` (``--input_is_counts``
    false). Unlike PySyft's port, the class count is never inferred from the labels that
    happen to appear when ``num_classes`` is given; without it, it is ``max label + 1``.
    """
    pred = np.asarray(predictions)
    if np.issubdtype(pred.dtype, np.complexfloating):
        raise PateError(f"predicted labels must be real class indices, got dtype {pred.dtype}")
    if pred.ndim != 2 or pred.size == 0:
        raise PateError(f"predicted labels must be a non-empty teachers × queries matrix, got shape {pred.shape}")
    if np.issubdtype(pred.dtype, np.floating):
        if not np.all(np.isfinite(pred)) or np.any(pred != np.round(pred)):
            raise PateError("predicted labels must be whole class indices (found NaN or fractions)")
    elif not np.issubdtype(pred.dtype, np.integer):
        raise PateError(f"predicted labels must be integers, got dtype {pred.dtype}")
    if pred.min() < 0:
        raise PateError("predicted labels hold a negative class index")
    n = pred.shape[1]
    top = int(pred.max()) + 1
    for what, classes in (("the largest predicted label + 1", top), ("--num-classes", num_classes)):
        if classes is not None and classes * n > MAX_VOTE_ENTRIES:
            raise PateError(f"{what} is {classes}: a vote histogram of {n} queries x {classes} "
                            f"classes exceeds {MAX_VOTE_ENTRIES:g} entries; is that the class count?")
    pred = pred.astype(np.int64)
    if num_classes is None:
        num_classes = max(top, 2)
    elif top > num_classes:
        raise PateError(f"predicted labels go up to class {top - 1} but num_classes is {num_classes}")
    votes = np.zeros((n, num_classes), dtype=np.int64)
    np.add.at(votes, (np.broadcast_to(np.arange(n), pred.shape), pred), 1)
    return votes


_REMEDY = "give the plain .npz or .npy file itself"


def _load_array(path: str, keys: tuple[str, ...], what: str, hint: str = "") -> np.ndarray:
    """The array of a ``.npy`` file, or of the first of ``keys`` an ``.npz`` holds; errors
    name the ``what`` file (``hint`` appended to a read error)."""
    try:
        if path.endswith(".npz"):
            with open_plain(path, remedy=_REMEDY) as fh, np.load(fh, allow_pickle=False) as data:
                found = list(data.keys())
                key = next((k for k in keys if k in found), None)
                if key is None:
                    raise PateError(f"{path} has no array named '{keys[0]}' (found: {', '.join(found) or 'none'})")
                return data[key]
        with open_plain(path, remedy=_REMEDY) as fh:
            return np.load(fh, allow_pickle=False)
    except PateError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise PateError(f"cannot read {what} file {path}: {err}{hint}") from None


def load_votes(path: str | os.PathLike, *, input_is_labels: bool = False,
               num_classes: int | None = None) -> np.ndarray:
    """Loads a vote histogram from ``.npz`` (key ``votes``) or ``.npy`` and validates it.

    With ``input_is_labels`` the array is a teachers × queries matrix of predicted
    labels (key ``labels`` or ``votes`` in an ``.npz``) and is converted to counts.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise PateError(f"votes file {path} does not exist; pass the .npz written by `pate label` or a .npy array")
    arr = _load_array(path, ("votes", "labels") if input_is_labels else ("votes",), "votes",
                      "; is it a .npz or .npy written by numpy?")
    if input_is_labels:
        return labels_to_votes(arr, num_classes)
    return check_votes(arr, name=os.path.basename(path))


def load_indices(path: str | os.PathLike, num_queries: int) -> np.ndarray:
    """Loads the indices of answered queries (``.npy``, or ``.npz`` key ``indices``).

    Entries are checked to lie in ``[0, num_queries)``.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise PateError(f"indices file {path} does not exist")
    idx = _load_array(path, ("indices",), "indices")
    return check_indices(idx, num_queries, name=os.path.basename(path))


def check_indices(indices, num_queries: int, *, name: str = "indices") -> np.ndarray:
    """Validates query indices: 1-d whole numbers in ``[0, num_queries)``."""
    idx = np.asarray(indices)
    if idx.ndim != 1 or idx.size == 0:
        raise PateError(f"{name} must be a non-empty 1-d array of query indices, got shape {idx.shape}")
    if np.issubdtype(idx.dtype, np.floating):
        if not np.all(np.isfinite(idx)) or np.any(idx != np.round(idx)):
            raise PateError(f"{name} must hold whole query indices")
    elif not np.issubdtype(idx.dtype, np.integer):
        raise PateError(f"{name} must hold integer query indices, got dtype {idx.dtype}")
    idx = idx.astype(np.int64)
    bad = (idx < 0) | (idx >= num_queries)
    if np.any(bad):
        raise PateError(
            f"{name} holds index {int(idx[bad][0])}, outside the {num_queries} queries of the votes file")
    return idx


def rows_of(votes: np.ndarray, indices) -> np.ndarray:
    """``votes[indices]``, a view when ``indices`` are consecutive rows in order (``a, a+1, …,
    b−1``: the usual case, every pool point queried), a copy otherwise: the same values
    either way, without a second copy of a large histogram. Read-only use."""
    idx = np.asarray(indices)
    if (idx.ndim == 1 and idx.size and np.issubdtype(idx.dtype, np.integer)
            and 0 <= int(idx[0]) and int(idx[-1]) < len(votes)
            and int(idx[-1]) - int(idx[0]) == idx.size - 1 and (idx.size == 1 or np.all(np.diff(idx) == 1))):
        return votes[int(idx[0]):int(idx[-1]) + 1]
    return votes[idx]


def select_queries(votes: np.ndarray, *, queries: int | None = None,
                   indices: np.ndarray | None = None) -> np.ndarray:
    """The rows of ``votes`` that were answered: ``indices`` if given, then the first
    ``queries`` of them (or of all rows)."""
    rows = votes if indices is None else votes[indices]
    if queries is not None:
        if queries < 1:
            raise PateError(f"--queries must be at least 1, got {queries}")
        if queries > rows.shape[0]:
            raise PateError(
                f"--queries {queries} is more than the {rows.shape[0]} queries available; "
                f"use at most {rows.shape[0]}")
        rows = rows[:queries]
    return rows
