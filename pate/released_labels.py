"""`labels.npz`, the release of `pate label`: the queried pool indices, their released labels
(-1 where a query went unanswered), the mechanism with its parameters, and `meta`.

One reader with one set of format checks, for `pate analyze` (which needs the mechanism and
its parameters), `pate train-student` (which also checks the file against the pool it should
label: `read_release`) and `pate run`. Nothing here is private: the file is the release.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from analysis.errors import PateError
from pate import rundir


def read_labels(path: str | Path, *, require_mechanism: bool = True) -> dict[str, Any]:
    """Reads a released ``labels.npz`` into a dict of its arrays (``mechanism`` as a str,
    "unknown" where the file has none and ``require_mechanism`` is False; ``meta`` decoded).

    Raises:
      PateError: the file is missing or damaged; it lacks ``indices``, ``labels`` or (when
        required) ``mechanism``; ``indices`` and ``labels`` are not 1-d integer arrays of one length.
    """
    path = Path(path)
    if not path.exists():
        raise PateError(f"{path} not found: run `pate label --workdir {path.parent}` first")
    required = ("indices", "labels") + (("mechanism",) if require_mechanism else ())
    data = rundir.read_npz(path, required=required)
    indices, labels = np.asarray(data["indices"]), np.asarray(data["labels"])
    if indices.ndim != 1 or indices.shape != labels.shape:
        raise PateError(f"{path}: 'indices' and 'labels' must be 1-d arrays of one length, "
                        f"got {indices.shape} and {labels.shape}")
    if not (np.issubdtype(indices.dtype, np.integer) and np.issubdtype(labels.dtype, np.integer)):
        raise PateError(f"{path}: 'indices' and 'labels' must be integer arrays")
    data["mechanism"] = str(data["mechanism"]) if "mechanism" in data else "unknown"
    return data


@dataclasses.dataclass(frozen=True)
class Release:
    """The public inputs of the student.

    Attributes:
      indices: pool indices of the answered queries.
      labels: their released (noisy) labels.
      num_queries: how many queries were made (answered or not).
      mechanism: the aggregator that released them.
      digest: sha256 of ``labels.npz`` (ties the student to this release).
    """

    indices: np.ndarray
    labels: np.ndarray
    num_queries: int
    mechanism: str
    digest: str


def read_release(workdir: str | Path, *, pool_size: int, num_classes: int) -> Release:
    """Reads ``labels.npz`` (`read_labels`) and checks it against the pool it should label.

    Raises:
      PateError: what `read_labels` raises; indices outside the pool or repeated; labels
        outside ``-1 .. num_classes-1``; no query answered.
    """
    path = rundir.RunDir(workdir) / rundir.LABELS_NPZ
    data = read_labels(path, require_mechanism=False)
    indices, labels = np.asarray(data["indices"]), np.asarray(data["labels"])
    if indices.size and (indices.min() < 0 or indices.max() >= pool_size):
        raise PateError(f"{path} labels pool points up to index {int(indices.max())}, but the "
                        f"public pool of this config has {pool_size} points: the labels do not "
                        "belong to this data set / data.public_size")
    if np.unique(indices).size != indices.size:
        raise PateError(f"{path}: 'indices' repeats a pool point")
    if labels.size and (labels.min() < -1 or labels.max() >= num_classes):
        raise PateError(f"{path} holds labels {int(labels.min())}..{int(labels.max())}, but the "
                        f"data set has {num_classes} classes (0..{num_classes - 1}, -1 = unanswered)")
    answered = labels >= 0
    if not answered.any():
        raise PateError(f"{path} answers none of its {labels.size} queries: the student has no "
                        "labels to learn from; label again with more queries or less noise "
                        "(for Confident-GNMax, a lower threshold)")
    return Release(indices=indices[answered].astype(np.int64), labels=labels[answered].astype(np.int32),
                   num_queries=int(labels.size), mechanism=data["mechanism"], digest=rundir.file_digest(path))
