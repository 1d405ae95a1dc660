"""`labels.npz`, the release of `pate label`: the queried pool indices, their released labels
(-1 where a query went unanswered), the mechanism with its parameters, and `meta`; and
`labels-round2.npz`, round 2's release (`pate label --round 2`), in the same format, beside
it (round 1's file is never rewritten, so every record of its digest stays true).

One reader with one set of format checks, for `pate analyze` (which needs the mechanism and
its parameters), `pate train-student` (which also checks the files against the pool they
should label and reads both rounds: `read_release`) and `pate run`. Nothing here is
private: the files are the release.
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
      digest: `release_digest` (ties the student to this release).
      rounds: how many rounds released them (1 or 2).
    """

    indices: np.ndarray
    labels: np.ndarray
    num_queries: int
    mechanism: str
    digest: str
    rounds: int = 1


def release_files(workdir: str | Path, rounds: int | None = None) -> list[Path]:
    """The released label files of a run: ``labels.npz``, and ``labels-round2.npz`` when
    round 2 was released (the first ``rounds`` of them when given)."""
    run = rundir.RunDir(workdir)
    files = [run / rundir.LABELS_NPZ] + ([run / rundir.LABELS_ROUND2_NPZ] if run.exists(rundir.LABELS_ROUND2_NPZ)
                                         else [])
    return files[:rounds]


def release_digest(workdir: str | Path, rounds: int | None = None) -> str:
    """What marks the labels a student learnt from: the sha256 of ``labels.npz`` (one
    round), or the sha256 of both files' sha256 digests (two rounds)."""
    import hashlib

    digests = [rundir.file_digest(p) for p in release_files(workdir, rounds)]
    return digests[0] if len(digests) == 1 else hashlib.sha256("\n".join(digests).encode()).hexdigest()


def read_release(workdir: str | Path, *, pool_size: int, num_classes: int,
                 rounds: int | None = None) -> Release:
    """Reads the released labels of every round (of the first ``rounds``; `read_labels`
    each, `release_files`) and checks them against the pool they should label.

    Raises:
      PateError: what `read_labels` raises; indices outside the pool or repeated (within
        or across rounds); labels outside ``-1 .. num_classes-1``; no query answered.
    """
    files = release_files(workdir, rounds)
    rounds = [read_labels(p, require_mechanism=False) for p in files]
    path = files[-1] if len(files) == 1 else f"{files[0]} and {files[1].name}"
    data = rounds[0]
    indices = np.concatenate([np.asarray(r["indices"]) for r in rounds])
    labels = np.concatenate([np.asarray(r["labels"]) for r in rounds])
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
                   num_queries=int(labels.size), mechanism=data["mechanism"],
                   digest=release_digest(workdir, len(rounds)),
                   rounds=len(rounds))
