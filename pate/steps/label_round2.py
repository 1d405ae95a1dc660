"""`pate label --round 2`: the 2018 paper's interactive setting on top of a finished round 1.

Round 1 released ``labels.npz`` and a student learnt from it. That student is public
(post-processing of round 1's release and the public pool), so round 2 may use it twice:

- **which points to ask** (`pate.release.selection`): pool points not queried in round 1
  about which the round-1 student is least sure (``select``: ``uncertain`` or ``margin``).
  How many: ``--queries`` exactly, else ``[rounds] queries`` at most, as many as round 1 left
  unqueried (`round2_queries`: the pool's size and round 1's released indices, both public).
  The choice reads the student and the pool only: no vote, no private value.
- **what the teachers stand on** (`pate.programs.heads`): teacher t of round 2 is a ridge head on
  the student's penultimate features, reduced by a PCA fitted on the public pool only,
  trained on teacher t's round-1 shard (the same partition). Head t depends on shard t
  and public values only, so one replaced example changes one vote (replace-one).

The heads vote on the chosen points and the run's mechanism record (``[aggregation]``,
Confident-GNMax by default) answers through `pate.release.labels.release_labels`. Written through the door
(`pate.store.door.step`, writer ``round2``): ``votes-round2.npz`` (private, 0600),
``labels-round2.npz`` (the second release, same format as ``labels.npz``, which is kept
as it is), ``student-round1/`` + ``student-round1.json`` (the feature map round 2 stood
on, so that round 2 can be labelled again after `pate train-student` has replaced
``student/`` with the student of both rounds) and ``release-round1.json`` (round 1's
published ε, which the headline of both rounds composes). The release is charged to the data set's
ledger as its own ``labels`` entry before it is swapped in; `pate analyze` then publishes
the headline ε of both rounds (`pate.steps.analyze`).
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np

from analysis.mechanisms import composition
from analysis.core.errors import PateError
from analysis.core.noise import seed_record
from analysis.reporting.report_io import render_table
from pate.release import aggregation, target as release_target
from pate.store import digests, rundir
from pate.store import ledger as ledger_mod
from pate.config import Config
from pate.store.door import step
from pate.release.labels import read_labels, release_subjects

#: The door's data check: round 2 stands on a run of this data set.
DATA_CHECK = dict(required="`pate train-teachers`, `pate label` and `pate train-student` (round 1)",
                  held="was labelled on data set {name!r} with a different")


@dataclasses.dataclass(frozen=True)
class RoundResult:
    """What round 2 released and how good it is (benchmark figures use true labels)."""

    num_queries: int
    num_answered: int
    label_accuracy: float  # released labels vs the pool's true labels, answered queries
    plurality_accuracy: float  # noiseless plurality of the heads on the queries (private)
    head_accuracy: float  # mean head accuracy on the evaluation split
    ensemble_accuracy: float  # plurality of the heads on the evaluation split
    mechanism: str
    student_accuracy: float = float("nan")  # the round-1 student's top class on the queries
    corrections: int = 0  # answered queries whose released label differs from the student's
    student_checked: bool = False  # the teachers checked the round-1 student (Interactive-GNMax)

    def summary(self) -> str:
        check = "" if not self.student_checked else (
            f"\nthe round-1 student on the queries: {self.student_accuracy:.4f}; the teachers answered where they "
            f"outvoted it: {self.corrections} of the {self.num_answered} answers differ from its label")
        return "\n".join([
            f"round 2: {self.num_answered} of {self.num_queries} queries answered ({self.mechanism}){check}",
            f"round-2 teachers (ridge heads) on the evaluation split: mean {self.head_accuracy:.4f}, "
            f"plurality {self.ensemble_accuracy:.4f}",
            f"accuracy of released round-2 labels (answered queries): {self.label_accuracy:.4f}",
            f"accuracy of the noiseless plurality on the queries (private): {self.plurality_accuracy:.4f}",
        ])


def round1_student(run: rundir.RunDir) -> tuple[str, str]:
    """Where round 1's student is: ``student/`` when it was trained on ``labels.npz``
    alone, else ``student-round1/`` (kept by an earlier round 2) when that was.

    Raises:
      PateError: no student, or one trained on other labels (both rounds, an older release).
    """
    digest = digests.file_digest(run / rundir.LABELS_NPZ)  # what student.json records
    for record, directory in ((rundir.STUDENT_JSON, rundir.STUDENT_DIR),
                              (rundir.STUDENT_ROUND1_JSON, rundir.STUDENT_ROUND1_DIR)):
        if run.exists(record) and run.exists(directory) and run.read_json(record).get("labels_sha256") == digest:
            return record, directory
    if not (run.exists(rundir.STUDENT_JSON) and run.exists(rundir.STUDENT_DIR)):
        raise PateError(f"{run.path} holds no round-1 student (student/, student.json); run "
                        f"`pate train-student --workdir {run.path}` first: round 2 stands on it")
    raise PateError(f"{run / rundir.STUDENT_JSON} was not trained on {run / rundir.LABELS_NPZ} alone; "
                        f"train the round-1 student again (`pate train-student --workdir {run.path} "
                        "--overwrite`) before round 2")
    return rundir.STUDENT_JSON, rundir.STUDENT_DIR


def round1_release(run: rundir.RunDir) -> tuple[dict, dict, str]:
    """Round 1's labels and release, once round 1 is finished: labels.npz, the
    release.json that publishes its sanitised ε (``release-round1.json`` once round 2 kept
    it) and that file's name. Round 2's headline composes that published value (`analysis.planning.rounds`), and a
    target for both rounds plans round 2 from it (`pate.release.target.choose_round2`).

    Raises:
      PateError: no labels.npz, or round 1 not analysed.
    """
    first = read_labels(run / rundir.LABELS_NPZ)
    subjects = release_subjects(run / rundir.LABELS_NPZ)
    for name in (rundir.RELEASE_JSON, rundir.RELEASE_ROUND1_JSON):
        doc = run.read_json(name) if run.exists(name) else {}
        if (doc.get("meta") or {}).get("labels_sha256") in subjects:
            return first, doc, name
    raise PateError(f"round 1 of {run.path} is not finished: no release.json publishes the eps of "
                    f"{run / rundir.LABELS_NPZ}; run `pate analyze --workdir {run.path}` first")


def round2_queries(configured: int, asked: int | None, left: int) -> int:
    """How many queries round 2 asks: ``asked`` (``--queries``) exactly, else the config's
    ``[rounds] queries`` at most, as many as the ``left`` pool points round 1 did not query.
    Public values only: the pool's size and round 1's released indices.

    Raises:
      PateError: ``asked`` is more than ``left``; nothing is left.
    """
    if asked is not None and asked > left:
        raise PateError(f"--queries = {asked} but only {left} pool points were not queried in round 1; "
                        "ask at most that many")
    if left < 1:
        raise PateError("round 1 queried every pool point: none is left for round 2")
    return asked if asked is not None else min(configured, left)


def label_round2(config: Config, workdir, *, queries: int | None = None, seed: int | None = None,
                 overwrite: bool = False, echo=print) -> RoundResult | None:
    """Releases round 2's labels (module docstring) with ``config.rounds``.

    In a distributed run (`jax.distributed` started: `pate label --round 2 --distributed`) every
    process calls it with the same arguments: each fits and runs the heads of its own block of
    teachers on their own shards, the vote counts are summed exactly across processes
    (`pate.programs.cluster`), and process 0 alone holds the run's lock, chooses the queries
    (from its student, which every process then gets), draws the noise, charges the ledger and
    writes; the others return None. A process that fails stops every process, each with one
    line, before anything is charged.

    Args:
      config: the run's config (its ``[data]``, ``[teachers]`` partition, ``[rounds]``).
      workdir: a run directory with round 1 finished (labels.npz, its student, release.json).
      queries: ask exactly this many; None: ``[rounds] queries`` at most (`round2_queries`).
      seed: noise seed (research only; never written). Default: OS entropy.
      overwrite: replace an existing round-2 release (the student and report made from it
        are moved aside).
      echo: where progress lines go.

    Raises:
      PateError: no finished round 1, ``queries`` above what round 1 left, a release over
        the ledger's budget, a round 2 already there without ``overwrite``; another process
        of a distributed run failed (`pate.programs.cluster.Stopped`).
    """
    from pate.programs import agreement
    from pate.programs.cluster import Cluster

    cluster = Cluster()
    with cluster.together():  # one failure stops every process, each with one line
        agreement.agree(cluster, config, data=True)  # process 0's data set and settings, or all stop
        if not cluster.leader:
            return _heads_for_process_0(config, workdir, seed, cluster, echo)
        door, book, result = _release_round2(config, workdir, queries, seed, overwrite, echo, cluster)
    echo(ledger_mod.cumulative_line(book, config.privacy.delta))
    echo(f"wrote {door.run / rundir.VOTES_ROUND2_NPZ} (private: never publish) and "
         f"{door.run / rundir.LABELS_ROUND2_NPZ} (the round-2 release); `pate train-student` learns from both "
         "rounds, `pate analyze` publishes the headline eps of both")
    return result


def _release_round2(config: Config, workdir, queries, seed, overwrite: bool, echo, cluster):
    """`label_round2` on process 0 (the only process of a run that is not distributed): the
    door, the checks, the queries, the votes of every process's heads, the release. Returns
    the door, the ledger and the result."""
    with step("round2", workdir, config=config, overwrite=overwrite, data=DATA_CHECK, echo=echo) as door:
        aggregation.noise_source(seed)  # refuses a bad seed before anything is computed
        release_target.check_round2(config)
        run = door.run
        first, released1, release_name = round1_release(run)
        student_files = round1_student(run)
        splits, shards = _own_data(config, cluster)
        candidates = np.setdiff1d(np.arange(splits.pool_x.shape[0]), first["indices"])
        rc = dataclasses.replace(config.rounds, queries=round2_queries(config.rounds.queries, queries, candidates.size))
        from pate.release.budget import accountable_record, resolve

        record = accountable_record(dataclasses.replace(config.aggregation, queries=rc.queries), config.privacy)
        resolve(record, rc.queries, num_teachers=config.teachers.num_teachers, pool_size=splits.pool_x.shape[0])
        student, ranked, probs = _student_view(run, student_files, splits, candidates, rc)
        offsets = None  # the student's check offsets on the ranked candidates (Interactive-GNMax)
        if rc.check == "interactive":
            from analysis.bounds.interactive import check_offsets

            offsets = check_offsets(probs, config.teachers.num_teachers)
        # A target for both rounds: round 2 asks as many queries as the published headline of
        # both rounds leaves room for after round 1's releases.
        book = ledger_mod.Ledger.for_teachers(run.path, config)  # the data the teachers saw
        # A run belongs to one ledger: round 2 composes with round 1's releases, charged there.
        book.check_holds_run(run / rundir.LABELS_NPZ, release_subjects(run / rundir.LABELS_NPZ))
        plan = None
        if config.privacy.target_eps:
            from pate.release.round2_report import round1_costs

            plan = release_target.choose_round2(dataclasses.replace(config, rounds=rc), config.teachers.num_teachers,
                                                splits.num_classes, released1, record=record,
                                                earlier=round1_costs(run.path, book, release_name)[1], echo=echo)
        queries = rc.queries if plan is None else plan.num_queries
        cost = composition.labels_cost(record, queries)
        book.check_budget([cost], config.privacy.total_budget, config.privacy.delta, "this round-2 release")
        chosen, probs = ranked[:queries], probs[:queries]
        # Every process is ready: they fit their heads and vote on these points (process 0's).
        cluster.agree(int(chosen.size))
        cluster.share(chosen)
        votes, accuracies = _round2_votes(config, student, splits, shards, chosen, echo, cluster)
        planned = {} if plan is None else {release_target.PLAN_KEY: plan.meta()}
        # the whole split's digest: from memory, or read as a stream where this process holds its own shards
        digest = (book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()) if cluster.count == 1
                  else book.keyed_split_digest(config.data))
        result = _release(door, config, record, votes, (chosen, probs, None if offsets is None else offsets[:queries]),
                          splits, accuracies, seed, book, (cost, digest), planned, echo)
        _keep_round1(run, door.out, student_files, release_name)
    return door, book, result


def _heads_for_process_0(config: Config, workdir, seed, cluster, echo) -> None:
    """`label --round 2` on a process other than 0 of a distributed run: it reads the round-1
    student (public) and the data, fits the heads of its own block of teachers on their own
    shards, votes with them on the points process 0 chose and sends it the counts; it takes no
    lock, draws no noise, charges nothing and writes nothing (process 0 does, once).

    It reads only its own shards' private records (`_own_data`)."""
    from pate.programs.student_training import load_student

    aggregation.noise_source(seed)  # refuses a bad seed as process 0 does
    run = rundir.RunDir(workdir)
    round1_release(run)  # round 1 finished, as process 0 checks it (the same line if not)
    student_files = round1_student(run)
    student = load_student(run.path, record=student_files[0], directory=student_files[1])
    splits, shards = _own_data(config, cluster)
    count = cluster.agree()  # process 0's checks passed: it says how many queries
    chosen = cluster.share(np.zeros(count, np.int32))
    if np.any(chosen < 0) or np.any(chosen >= splits.pool_x.shape[0]):
        raise PateError(f"process 0 chose round-2 queries outside this process's pool of {splits.pool_x.shape[0]} "
                        "points: give every process the same data set")
    _round2_votes(config, student, splits, shards, chosen, lambda _line: None, cluster)
    rows = cluster.rows(config.teachers.num_teachers)
    me = f"process {cluster.index} of {cluster.count}"
    if not rows:
        echo(f"{me}: no teachers of the {config.teachers.num_teachers} to fit a round-2 head for")
        return
    echo(f"{me}: round-2 heads {rows.start}-{rows.stop - 1} fitted on their own shards voted on {count} queries; "
         "process 0 draws the release and writes it")


def _student_view(run, student_files, splits, candidates, rc):
    """The public part of round 2 before any vote: the round-1 student, the ``rc.queries``
    candidates it would ask first (`pate.release.selection.select`; a smaller count asks a prefix) and
    its probabilities on them, in that order."""
    from pate.release.selection import select, student_probs
    from pate.programs.student_training import load_student

    student = load_student(run.path, record=student_files[0], directory=student_files[1])
    probs = student_probs(student.model, student.params, splits.pool_x[candidates],
                          student.config.student.eval_batch_size)
    ranked = select(probs, candidates, rc.queries, rc.select)
    return student, ranked, probs[np.searchsorted(candidates, ranked)]  # candidates are sorted (np.setdiff1d)


def _own_data(config: Config, cluster):
    """``(splits, shards)``: the data a process of round 2 reads, and its teachers' shards as
    positions in ``splits.train_x`` (one row of positions per teacher of its block,
    `pate.programs.cluster.Cluster.rows`). One process reads the whole split (its digest is
    charged from memory). A process of a distributed run makes the partition from the split's
    record count (a file header, `pate.data.train_count`) and reads only the records of its own
    teachers' shards (`pate.data.split_rows`, rows by index): ``splits.train_x`` then holds
    those records alone, in teacher order, and process 0 charges the digest of the whole split
    read as a stream (`pate.store.ledger.Ledger.keyed_split_digest`)."""
    from pate.data import load_dataset, partition, split, split_rows, train_count

    tc = config.teachers
    if cluster.count == 1:
        splits = split(load_dataset(config.data), config.data.public_size)
        return splits, partition(splits.train_x.shape[0], tc.num_teachers, tc.seed).indices
    part = partition(train_count(config.data), tc.num_teachers, tc.seed)
    own = part.indices[cluster.rows(tc.num_teachers)]
    splits = split_rows(config.data, config.data.public_size, own.reshape(-1))
    return splits, np.arange(own.size).reshape(own.shape)


def _round2_votes(config: Config, student, splits, shards, chosen, echo, cluster):
    """The private part of round 2: heads on the shards (on the student's features and a PCA
    of the public pool) and their votes on the ``chosen`` pool points. Each process fits and
    runs the heads of its own block of teachers (all of them in one process) and their counts,
    on the queries and on the evaluation split, are summed exactly across processes
    (`pate.programs.cluster.Cluster.sum_counts`); every process calls it at the same point.
    Returns the votes and the heads' accuracy on the evaluation split (mean, plurality)."""
    import jax.numpy as jnp

    from pate.programs import heads
    from pate.programs.voting import plurality_accuracy

    rc, tc = config.rounds, config.teachers
    batch = student.config.student.eval_batch_size
    queries, classes = chosen.size, splits.num_classes
    pca = heads.fit_pca(heads.features(student.model, student.params, splits.pool_x, batch), rc.pca_dim)
    spread = f" ({cluster.count} processes, each its own block of heads)" if cluster.count > 1 else ""
    echo(f"round 2: {tc.num_teachers} ridge heads on the round-1 student's features ({pca.components.shape[0]} "
         f"-> {pca.components.shape[1]} by a PCA of the pool), {queries} queries chosen by rounds.select = "
         f"{rc.select}{spread}")
    rows = cluster.rows(tc.num_teachers)
    counts = np.zeros((queries + splits.eval_y.size, classes), np.int32)  # no heads here: no votes
    if rows:
        # this process's shards, teacher by teacher (positions in splits.train_x: `_own_data`)
        own = shards if cluster.count > 1 else shards[rows.start:rows.stop]
        shard_size = own.shape[1]
        z = heads.features(student.model, student.params, splits.train_x[own.ravel()], batch, project=pca,
                           group=shard_size)
        z = jnp.asarray(z.reshape(len(rows), shard_size, -1))
        w, b = heads.fit_heads(z, jnp.asarray(splits.train_y[own]), rc.ridge, num_classes=classes)
        for start, images in ((0, splits.pool_x[chosen]), (queries, splits.eval_x)):
            points = jnp.asarray(heads.features(student.model, student.params, images, batch, project=pca))
            counts[start:start + images.shape[0]] = np.asarray(heads.head_votes(w, b, points, num_classes=classes))
    total = cluster.sum_counts(counts, tc.num_teachers)
    votes, on_eval = total[:queries], total[queries:]
    if np.any(votes.sum(axis=1) != tc.num_teachers):
        raise PateError("internal error: a round-2 vote row does not count every head once")
    # A head's vote for the true class is a correct prediction: their mean over heads and points.
    mean = float(on_eval[np.arange(on_eval.shape[0]), splits.eval_y].sum() / max(on_eval.sum(), 1))
    return votes, (mean, plurality_accuracy(on_eval, splits.eval_y))


def _release(door, config: Config, record, votes, queried, splits, accuracies, seed, book, charge, planned: dict,
             echo) -> RoundResult:
    """The noisy release of round 2, its brief report, the files and the ledger's charge.
    ``queried``: the chosen pool points, the round-1 student's probabilities on them and its
    check offsets (None unless ``[rounds] check = "interactive"``). ``charge``: the release's cost and
    the keyed digest of the private split it is charged with."""
    from pate.release.privacy_report import report_for_release
    from pate.release.labels import released_arrays
    from pate.programs.voting import plurality_accuracy

    chosen, probs, offsets = queried
    cost, data_digest = charge
    interactive = offsets is not None
    labels = released_arrays(votes, chosen, record, seed, None, offsets)
    released, truth = labels["labels"], splits.pool_y[chosen]
    answered = released >= 0
    p = config.privacy
    brief = dict(labels, indices=np.arange(chosen.size))  # rows of the round-2 votes
    table = render_table(report_for_release(votes, brief, delta=p.delta, moments=p.moments,
                                            conversion=p.conversion, sanitize=False))
    door.out.write_npz(rundir.VOTES_ROUND2_NPZ, {"votes": votes.astype(np.int32)}, config,
                       meta={"ledger_directory": str(book.directory)})
    door.out.write_npz(rundir.LABELS_ROUND2_NPZ, labels, config,
                       meta={"ledger": book.name, "round": 2, **seed_record(seed), **planned})
    check = ", the teachers checking the round-1 student (Interactive-GNMax)" if interactive else ""
    mechanism = {"name": record.name, **record.params(), "queries": int(chosen.size), "round": 2,
                 **({"check": "interactive"} if interactive else {}),
                 "describe": f"round-2 labels: {chosen.size} queries of {record.describe()}{check}"}
    # Charged when the door commits the release (written first, renamed into place right after).
    door.charge(book, "labels", cost, run=door.run.path, mechanism=mechanism,
                subject=digests.file_digest(door.out / rundir.LABELS_ROUND2_NPZ), budget=p.total_budget,
                release=ledger_mod.release_identity("labels", door.out / rundir.LABELS_ROUND2_NPZ),
                delta=p.delta, data_digest=data_digest)
    result = RoundResult(
        num_queries=int(chosen.size), num_answered=int(answered.sum()),
        label_accuracy=float(np.mean(released[answered] == truth[answered])) if answered.any() else float("nan"),
        plurality_accuracy=plurality_accuracy(votes, truth), head_accuracy=accuracies[0],
        ensemble_accuracy=accuracies[1], mechanism="interactive-gnmax" if interactive else record.name,
        student_accuracy=float(np.mean(probs.argmax(axis=1) == truth)),
        corrections=int(np.sum(answered & (released != probs.argmax(axis=1)))), student_checked=interactive)
    echo(result.summary())
    echo(table)
    return result


def _keep_round1(run: rundir.RunDir, out: rundir.RunDir, files: tuple[str, str], release: str) -> None:
    """Copies the student round 2 stood on (``student-round1``) and round 1's release
    (``release``, found by `round1_release`) as ``release-round1.json`` into the new artifacts."""
    record, directory = files
    shutil.copytree(run / directory, out / rundir.STUDENT_ROUND1_DIR, dirs_exist_ok=True)
    shutil.copy2(run / record, out / rundir.STUDENT_ROUND1_JSON)
    shutil.copy2(run / release, out / rundir.RELEASE_ROUND1_JSON)
