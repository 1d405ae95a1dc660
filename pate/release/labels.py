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
import os
from pathlib import Path
from typing import Any

import numpy as np

from analysis.mechanisms import registry
from analysis.mechanisms.record import UNANSWERED, Mechanism
from analysis.core.errors import PateError
from pate.store import digests, rundir
from pate.store import ledger as ledger_mod
from pate.release import aggregation, fine_grained_release

#: The array of Interactive-GNMax's check offsets o = floor(T p) in a release (round 2 with
#: ``[rounds] check = "interactive"``; `analysis.bounds.interactive`): one row per query, public.
CHECK_OFFSETS = "check_offsets"


def read_labels(path: str | Path, *, require_mechanism: bool = True, num_classes: int | None = None,
                pool_size: int | None = None) -> dict[str, Any]:
    """Reads a released ``labels.npz`` into a dict of its arrays (``mechanism`` as a str,
    "unknown" where the file has none and ``require_mechanism`` is False; ``meta`` decoded).
    The one validation of a release, whoever reads it (analyze, train-student, run, ledger).

    Args:
      path: the file (a plain file: `pate.store.rundir.open_artifact`).
      require_mechanism: refuse a file without its mechanism (what the analysis needs).
      num_classes: when known (the votes' columns, the data set), labels must lie in
        ``-1 .. num_classes-1``.
      pool_size: when known (the votes' rows, the public pool), indices must lie below it.

    Raises:
      PateError: the file is missing or damaged; it lacks ``indices``, ``labels`` or (when
        required) ``mechanism``; ``indices`` and ``labels`` are not 1-d integer arrays of one
        length; an index is negative, repeated or past the pool; a label is below -1 or
        past the classes.
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise PateError(f"{path} not found: run `pate label --workdir {path.parent}` first")
    required = ("indices", "labels") + (("mechanism",) if require_mechanism else ())
    data = rundir.read_npz(path, required=required)
    indices, labels = np.asarray(data["indices"]), np.asarray(data["labels"])
    if indices.ndim != 1 or indices.shape != labels.shape:
        raise PateError(f"{path}: 'indices' and 'labels' must be 1-d arrays of one length, "
                        f"got {indices.shape} and {labels.shape}")
    if not (np.issubdtype(indices.dtype, np.integer) and np.issubdtype(labels.dtype, np.integer)):
        raise PateError(f"{path}: 'indices' and 'labels' must be integer arrays")
    outside = (indices < 0) | (indices >= (pool_size if pool_size is not None else np.inf))
    if outside.any():
        raise PateError(f"{path} labels pool index {int(indices[outside][0])}, but the public pool " + (
            f"of this config has {pool_size} points" if pool_size is not None else "has no negative index")
            + ": the labels do not belong to this data set / data.public_size")
    if np.unique(indices).size != indices.size:
        raise PateError(f"{path}: 'indices' repeats a pool point (a release labels each point once); "
                        "it was not written by pate label or is damaged")
    if labels.size and (labels.min() < -1 or (num_classes is not None and labels.max() >= num_classes)):
        classes = ("" if num_classes is None else f"the data set has {num_classes} classes "
                   f"(0..{num_classes - 1}, ") + "-1 = unanswered" + ("" if num_classes is None else ")")
        raise PateError(f"{path} holds labels {int(labels.min())}..{int(labels.max())}, but {classes}")
    if CHECK_OFFSETS in data:
        o = np.asarray(data[CHECK_OFFSETS])
        if o.ndim != 2 or o.shape[0] != labels.size or not np.issubdtype(o.dtype, np.integer) or (o < 0).any():
            raise PateError(f"{path}: '{CHECK_OFFSETS}' must be a (queries, classes) array of non-negative "
                            "integers; it was not written by pate label or is damaged")
    if fine_grained_release.NOISY_COUNTS in data:
        c = np.asarray(data[fine_grained_release.NOISY_COUNTS])
        if (c.ndim != 2 or c.shape[0] != labels.size or c.shape[1] < 2 or not np.issubdtype(c.dtype, np.integer)
                or (num_classes is not None and c.shape[1] != num_classes)):
            raise PateError(f"{path}: '{fine_grained_release.NOISY_COUNTS}' must be a (points, classes) integer "
                            "array, one row per label; it was not written by pate label or is damaged")
    data["mechanism"] = str(data["mechanism"]) if "mechanism" in data else "unknown"
    return data


def read_run_labels(workdir: str | Path) -> dict[str, Any]:
    """A run directory's ``labels.npz`` (`read_labels`), checked against the run's own
    ``votes.npz`` when it has one (only its shape is used: a vote file that is no
    histogram is refused, and so is a label past its classes or an index past its rows).
    What `pate run` and `pate ledger --import` read; `pate analyze` does the same with
    the votes it loads anyway."""
    from analysis.core.votes import check_votes

    run = rundir.RunDir(workdir)
    num_classes = pool_size = None
    if run.exists(rundir.VOTES_NPZ):
        votes = check_votes(run.read_npz(rundir.VOTES_NPZ, required=("votes",))["votes"],
                            name=str(run / rundir.VOTES_NPZ))
        pool_size, num_classes = votes.shape
    return read_labels(run / rundir.LABELS_NPZ, num_classes=num_classes, pool_size=pool_size)


def content_digest(labels: dict[str, Any]) -> str:
    """sha256 of what a release says: its indices, labels and mechanism record (every
    array but ``meta``), canonically encoded. Two files with the same release have the
    same digest whatever their zip timestamps or ``meta`` (time written): what the
    ledger and release.json key a release on, so re-releasing the same labels is seen as
    a repeat. Public: the labels are the release."""
    import hashlib
    import json

    doc = {}
    for key in sorted(k for k in labels if k != "meta"):
        v = np.asarray(labels[key])
        if key in ("indices", "labels"):
            doc[key] = v.astype(np.int64).tolist()
        elif v.dtype.kind in "US":
            doc[key] = str(v)
        else:
            doc[key] = v.astype(np.float64).tolist()
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
      targets: (answered, classes) soft targets the student learns from instead of `labels` (rows
        summing to 1, post-processing of the release: `pate.release.soft_targets`), or None.
    """

    indices: np.ndarray
    labels: np.ndarray
    num_queries: int
    mechanism: str
    digest: str
    rounds: int = 1
    targets: np.ndarray | None = None


def release_files(workdir: str | Path, rounds: int | None = None) -> list[Path]:
    """The released label files of a run: ``labels.npz``, and ``labels-round2.npz`` when
    round 2 was released (the first ``rounds`` of them when given)."""
    run = rundir.RunDir(workdir)
    files = [run / rundir.LABELS_NPZ] + ([run / rundir.LABELS_ROUND2_NPZ] if run.exists(rundir.LABELS_ROUND2_NPZ)
                                         else [])
    return files[:rounds]


def release_subjects(path: str | Path) -> tuple[str, str]:
    """What a release.json's ``meta.labels_sha256`` may hold for the labels at `path`: their
    `content_digest` (what pate analyze writes) or, from an older version, the file's sha256."""
    return content_digest(read_labels(path, require_mechanism=False)), digests.file_digest(path)


def release_digest(workdir: str | Path, rounds: int | None = None) -> str:
    """What marks the labels a student learnt from: the sha256 of ``labels.npz`` (one
    round), or the sha256 of both files' sha256 digests (two rounds)."""
    import hashlib

    found = [digests.file_digest(p) for p in release_files(workdir, rounds)]
    return found[0] if len(found) == 1 else hashlib.sha256("\n".join(found).encode()).hexdigest()


def read_release(workdir: str | Path, *, pool_size: int, num_classes: int,
                 rounds: int | None = None) -> Release:
    """Reads the released labels of every round (of the first ``rounds``; `read_labels`
    each, `release_files`) and checks them against the pool they should label.

    Raises:
      PateError: what `read_labels` raises (with the pool and the classes); indices repeated
        across rounds; no query answered.
    """
    files = release_files(workdir, rounds)
    rounds = [read_labels(p, require_mechanism=False, num_classes=num_classes, pool_size=pool_size) for p in files]
    path = files[-1] if len(files) == 1 else f"{files[0]} and {files[1].name}"
    data = rounds[0]
    indices = np.concatenate([np.asarray(r["indices"]) for r in rounds])
    labels = np.concatenate([np.asarray(r["labels"]) for r in rounds])
    if np.unique(indices).size != indices.size:
        raise PateError(f"{path}: 'indices' repeats a pool point")
    answered = labels >= 0
    if not answered.any():
        raise PateError(f"{path} answers none of its {labels.size} queries: the student has no "
                        "labels to learn from; label again with more queries or less noise "
                        "(for Confident-GNMax, a lower threshold)")
    return Release(indices=indices[answered].astype(np.int64), labels=labels[answered].astype(np.int32),
                   num_queries=int(labels.size), mechanism=data["mechanism"],
                   digest=release_digest(workdir, len(rounds)),
                   rounds=len(rounds))


# --------------------------------------------------------------------------- drawing a release


#: The keys labels.npz may hold besides `meta` (config hash and package version), each named
#: once: the queried pool indices and their labels (`released_arrays`), the mechanism record's
#: arrays (`analysis.mechanisms.Mechanism.to_arrays`), the answer cap, the check offsets, and a
#: fine-grained release's record (`pate.release.fine_grained_release.record_arrays`).
MAX_ANSWERS = "max_answers"
RELEASED_KEYS = ("indices", "labels", *registry.ARRAY_KEYS, MAX_ANSWERS, CHECK_OFFSETS,
                 *fine_grained_release.ARRAY_KEYS)


def cap_answers(labels: np.ndarray, max_answers: int | None) -> np.ndarray:
    """Withholds every answer after the first ``max_answers`` (label -1)."""
    if max_answers is None:
        return labels
    answered = np.cumsum(labels >= 0)
    return np.where((labels >= 0) & (answered > max_answers), UNANSWERED, labels)


def release_labels(votes: np.ndarray, record: Mechanism, *, seed: int | None = None,
                   max_answers: int | None = None, offsets=None) -> np.ndarray:
    """Noisy labels for every row of ``votes``: THE one call of the aggregator.

    Draws a fresh noise key (``seed`` for research only; never written anywhere), runs the
    mechanism record (`pate.release.aggregation.run`) and withholds every answer past the
    ``max_answers``-th (`cap_answers`); ``offsets``: Interactive-GNMax's check. int32, -1 = not answered.
    """
    released = aggregation.run(votes, record, aggregation.noise_source(seed), offsets)
    return cap_answers(released, max_answers)


def released_arrays(votes: np.ndarray, indices: np.ndarray, record: Mechanism,
                    seed: int | None, cap: int | None, offsets=None) -> dict:
    """What labels.npz holds: the queried `indices`, their noisy labels (`release_labels`
    over `votes`, their rows), the record's arrays (its name and noise), ``max_answers``
    when `cap` withheld answers and the public ``check_offsets`` with `offsets`."""
    released = release_labels(votes, record, seed=seed, max_answers=cap, offsets=offsets)
    labels = {"indices": indices.astype(np.int64), "labels": released.astype(np.int32), **record.to_arrays()}
    labels.update({} if cap is None else {MAX_ANSWERS: np.array(float(cap))})
    labels.update({} if offsets is None else {CHECK_OFFSETS: np.asarray(offsets).astype(np.int32)})
    assert set(labels) <= set(RELEASED_KEYS), sorted(labels)
    return labels


def charge_release(door, book, cost, record, labels_path, num_queries: int, privacy, *,
                   data_digest: str | None = None, num_classes: int | None = None) -> None:
    """Charges a label release, written at ``labels_path`` through ``door``, to the data set's
    ledger when the door commits it (`pate.store.door.Door.charge`; refused over ``total_budget``
    or the ledger's budget), with the float64 samplers' total variation over ``num_classes``
    classes (`Mechanism.sampling_tv`: 0 for an exact sampler; a threshold step is one more coordinate)."""
    mechanism = {"name": record.name, **record.params(), "queries": int(num_queries),
                 "describe": f"labels: {num_queries} queries of {record.describe()}"}
    door.charge(book, "labels", cost, run=door.run.path, mechanism=mechanism,
                subject=content_digest(read_labels(labels_path)), budget=privacy.total_budget,
                delta=privacy.delta, data_digest=data_digest,
                release=ledger_mod.release_identity("labels", labels_path),
                sampling_tv=0.0 if num_classes is None else record.sampling_tv(int(num_queries), int(num_classes)))


# --------------------------------------------------------------------------- the run's ledger


def check_run_ledger(book, workdir) -> None:
    """A run belongs to one ledger (docs/ledger.md): refuses, in one line and before anything
    is drawn, trained or charged, a command that would charge or publish on ``book`` (the
    ledger its command found under the current ledger folder) for a run whose releases belong
    to a ledger that folder does not hold: each labels file's ledger
    (`pate.store.ledger.Ledger.check_holds_run`), and the folder its votes were labelled under
    (`pate.store.ledger.Ledger.check_holds_votes`). A labels or votes file that cannot be read
    is passed over here: the command's own reader refuses it, or (``--overwrite``) replaces it."""
    run = rundir.RunDir(workdir)
    for name in (rundir.LABELS_NPZ, rundir.LABELS_ROUND2_NPZ):
        if run.exists(name):
            try:
                subjects = release_subjects(run / name)
            except PateError:
                continue
            book.check_holds_run(run / name, subjects)
    if run.exists(rundir.VOTES_NPZ):
        book.check_holds_votes(run / rundir.VOTES_NPZ)


def require_recorded(directory, files, workdir, doing: str) -> None:
    """`require_charged` for a command that reads the labels alone (`pate train-student`: a
    student never opens the votes or the teachers, which name the run's data set): each of the
    label ``files`` must be recorded by a ledger of the ledger folder ``directory``
    (`pate.store.ledger.labels_recorded_in`), else refused in one line: labels charged to a
    ledger that folder does not hold (their ``meta.ledger``) name the way back to it, others
    `pate ledger --import`."""
    for path in files:
        if ledger_mod.labels_recorded_in(directory, path, release_subjects(path)):
            continue
        try:
            meta = rundir.read_npz(path).get("meta") or {}
        except PateError:
            meta = {}
        named = meta.get("ledger") if isinstance(meta, dict) else None
        run = rundir.RunDir(workdir).path
        if isinstance(named, str) and named and not ledger_mod.Ledger(named, directory).exists():
            raise PateError(f"{path} belongs to the ledger {named!r} in another ledger folder, which the ledger "
                            f"folder {directory} does not hold (another HOME, $PATE_LEDGER_DIR or [privacy] ledger?); "
                            f"nothing was {doing}: set $PATE_LEDGER_DIR or [privacy] ledger to the folder it was "
                            f"labelled under, or count its releases here on purpose first with `pate ledger --import "
                            f"{run}`")
        raise PateError(f"{path} is a label release no ledger records (written by a script, or by a pate before the "
                        f"ledger?): no ledger in {directory} counts it, so nothing was {doing}; count it first with "
                        f"`pate ledger --import {run}` (or point $PATE_LEDGER_DIR or [privacy] ledger at the folder "
                        "that charged it)")


def require_charged(book, files, workdir, doing: str) -> None:
    """Nothing trains or publishes on labels no ledger records: refuses, in one line, each of
    the label ``files`` (already read and checked by the caller) that ``book`` does not record
    (`pate.store.ledger.Ledger.records_labels`: charged when made, or imported), naming
    `pate ledger --import`, which charges every release of the run once. The run's own ledger
    is checked first (`check_run_ledger`): labels charged in another ledger folder are
    refused naming that folder instead. ``doing``: what the command would do on them."""
    check_run_ledger(book, workdir)
    for path in files:
        if not book.records_labels(path, release_subjects(path)):
            raise PateError(f"{path} is a label release no ledger records (written by a script, or by a pate before "
                            f"the ledger?): the ledger {book.name!r} in {book.directory} does not count it, so "
                            f"nothing was {doing}; count it first with `pate ledger --import {rundir.RunDir(workdir).path}` "
                            "(or point $PATE_LEDGER_DIR or [privacy] ledger at the folder that charged it)")
