"""`pate label`: the teachers vote on the public pool and a noisy aggregator releases
labels for the queried points.

Writes ``votes.npz`` (the vote histogram of the queried pool points, row i = pool point i:
**private**, never publish)
and ``labels.npz`` (the DP release: ``indices``, ``labels`` with -1 for unanswered
queries, the mechanism and its noise parameters — nothing else; no votes, no noise
values, no seed; ``meta.research_seed`` is true when a ``--seed`` made the noise). Both
are computed before either is written, and written atomically.

`pate label --distributed` runs it on several processes (JAX's multi-controller runtime), each
with its own block of teachers; process 0 alone writes (docs/scale.md).

`pate.steps.label_votes` does the same from a vote histogram computed elsewhere (`pate
label --votes FILE`); both draw and charge the release through `pate.release.labels`
(`released_arrays`, `charge_release`), and every release goes through its `release_labels`,
the one place that calls the aggregator.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.core.errors import PateError
from analysis.core.noise import seed_record
from pate.release import aggregation, outcome, target as release_target, tuning
from pate.store import rundir
from pate.store import ledger as ledger_mod
from analysis.reporting.report_io import render_table
from pate.config import check_config, Config
from pate.programs.data_facts import say_data_note, with_data_defaults
from pate.store.door import Door, step
from pate.release.budget import accountable_record, budget_line, budget_plan, resolve
from pate.release import fine_grained_release as fine_release
from pate.release.labels import charge_release, check_run_ledger, content_digest, read_labels, released_arrays
from pate.programs.public_features import MapSettings, check_ready, teacher_inputs


@dataclasses.dataclass(frozen=True)
class LabelResult:
    """What `label` released and how good it is (pool labels are known in benchmarks)."""

    mechanism: str
    num_queries: int
    num_answered: int
    label_accuracy: float  # released labels vs true pool labels, on answered queries
    plurality_accuracy: float  # noiseless plurality vote vs true labels, on the queries
    params: dict

    def summary(self) -> str:
        params = ", ".join(f"{k} {v}" if isinstance(v, str) else f"{k} {v:g}" for k, v in self.params.items())
        return "\n".join([
            f"mechanism: {self.mechanism} ({params})",
            f"queries: {self.num_queries}  answered: {self.num_answered}",
            f"accuracy of released labels (answered queries): {self.label_accuracy:.4f}",
            *([] if self.plurality_accuracy != self.plurality_accuracy else  # NaN: no teachers voted
              [f"accuracy of the noiseless plurality vote (queries, private): {self.plurality_accuracy:.4f}"]),
        ])


def label(config: Config, workdir, *, seed: int | None = None, overwrite: bool = False,
          budget: float | None = None, accountant: str = "rdp", echo=print) -> LabelResult | None:
    """Computes the votes on the pool, releases noisy labels and writes both files.

    In a distributed run (`jax.distributed` started: `pate label --distributed`) every process
    calls it with the same arguments: each loads and runs only its own block of teachers, the
    vote counts are summed exactly across processes (`pate.programs.cluster`), and process 0
    alone holds the run's lock, draws the noise, charges the ledger and writes; the others
    return None. A process that fails stops every process, each with one line, before
    anything is charged.

    Args:
      config: the run's config with the `[aggregation]` section to use.
      workdir: a run directory with trained teachers.
      seed: noise seed (research only; never written anywhere). Default: OS entropy.
      overwrite: replace existing votes.npz / labels.npz.
      budget: stop answering where the data-independent ε of what is published — the
        labels and the sanitised ε of `pate analyze` with ``config.privacy`` — would exceed
        it (see `budget_plan`); None answers `aggregation.queries` queries.
      accountant: how `budget` is measured: "rdp" or "pld" (see `budget_plan`).
      ``config.privacy.target_eps``: plan the queries and release first (`pate.release.target`).
      echo: where progress lines go.

    With ``[aggregation] mechanism = "fine-grained"`` no teacher votes: the private records'
    own votes label the whole pool in one release (`label_fine_grained`).

    Raises:
      PateError: no teachers; labels exist and not `overwrite`; bad parameters; another
        process of a distributed run failed (`pate.programs.cluster.Stopped`).
    """
    check_config(config, "pate.label")
    config = with_data_defaults(config)  # a fine-grained release's keys the file left out, from the data
    from pate.data import load_dataset, load_public, split
    from pate.programs import agreement
    from pate.programs.cluster import Cluster

    cluster = Cluster()
    if not registry.record_type(config.aggregation.mechanism).needs_teachers:
        return label_fine_grained(config, workdir, seed=seed, overwrite=overwrite, budget=budget, echo=echo,
                                  cluster=cluster)
    from pate.programs.teacher_training import read_ensemble

    with cluster.together():  # one failure stops every process, each with one line
        # Before anything is read or drawn: every process votes with process 0's teachers (their
        # checkpoint's digest) at process 0's settings, or all stop with one line.
        agreement.agree(cluster, config, teachers=workdir)
        if not cluster.leader:
            return _vote_for_process_0(config, workdir, cluster, echo)
        # Votes, labels and config.toml are swapped in together once all three are written.
        with step("label", workdir, config=config, overwrite=overwrite, echo=echo) as door:
            aggregation.noise_source(seed)  # refuses a bad seed before any vote is computed
            record = accountable_record(config.aggregation, config.privacy)
            ensemble = read_ensemble(door.run.path)
            # the run's ledger before anything is planned or printed: a refusal is one line
            check_run_ledger(ledger_mod.Ledger.for_teachers(door.run.path, config), door.run.path)
            agg = config.aggregation
            if cluster.count > 1:  # the public pool alone; the split's keyed digest is read as a stream
                public = load_public(config.data)
                pool_x, pool_y = public.pool_x, public.pool_y
                data_digest = lambda book: book.keyed_split_digest(config.data)
            else:
                splits = split(load_dataset(config.data), config.data.public_size)
                pool_x, pool_y = splits.pool_x, splits.pool_y
                data_digest = lambda book: book.keyed_digest(splits.train_x.tobytes(),
                                                             splits.train_y.tobytes())
            _check_pool(pool_x, ensemble)
            resolve(record, agg.queries, num_teachers=ensemble.num_teachers, pool_size=pool_x.shape[0])
            # A target headline plans the queries and the release before any teacher votes.
            target = release_target.choose(config, ensemble.num_teachers, ensemble.num_classes, record=record,
                                           budget=budget, echo=echo)
            plan = None if target is None else release_target.budget_plan(target)
            if budget is not None:
                plan = budget_plan(record, agg.queries, budget, config.privacy.delta, moments=config.privacy.moments,
                                   conversion=config.privacy.conversion, accountant=accountant,
                                   privacy=config.privacy)
                echo(budget_line(budget, plan, accountant))
            planned = {} if target is None else {release_target.PLAN_KEY: target.meta()}
            # What the release is expected to buy, on simulated public votes: near chance is refused
            # here, before any teacher votes or anything is charged.
            expected = outcome.of_config(config, record, ensemble.num_teachers, ensemble.num_classes,
                                         queries=agg.queries if plan is None else plan.num_queries,
                                         max_answers=None if plan is None else plan.max_answers,
                                         override=outcome.LABEL_OVERRIDE, echo=echo)
            planned.update(outcome.meta(expected))
            result = _release_from_teachers(door, config, record, ensemble, (pool_x, pool_y, data_digest), plan,
                                            seed, echo, planned,
                                            cluster)
    echo(ledger_mod.cumulative_line(ledger_mod.Ledger.for_teachers(door.run.path, config), config.privacy.delta))
    gives = "the sanitised eps and the headline eps" if record.sanitised else "the headline eps (no sanitised eps)"
    echo(f"wrote {door.run / rundir.VOTES_NPZ} (private: never publish) and {door.run / rundir.LABELS_NPZ} "
         f"(the release); `pate analyze` gives {gives}")
    return result


def _check_pool(pool_x: np.ndarray, ensemble) -> None:
    """The pool's inputs, as the teachers see them (through their public map, if any), have the
    shape they were trained on."""
    seen = teacher_inputs(ensemble.config, pool_x[:1], pool_x).shape[1:]
    if seen != tuple(ensemble.image_shape):
        raise PateError(f"the pool's inputs, as the teachers see them, have shape {seen} but the teachers "
                        f"were trained on {tuple(ensemble.image_shape)}: is this the same data set?")


def _votes(config: Config, ensemble, images: np.ndarray, cluster) -> np.ndarray:
    """The ensemble's vote histogram on `images`: each process counts its own block of teachers
    (all of them in one process) and the counts are summed exactly across processes
    (`pate.programs.cluster.Cluster.sum_counts`). Every process calls it at the same point."""
    from pate.programs.voting import block_votes

    teachers = ensemble.load(cluster)
    counts = block_votes(teachers.params, teachers.model, images, ensemble.num_classes,
                         batch_size=config.teachers.eval_batch_size)
    return cluster.sum_counts(counts, ensemble.num_teachers)


def _vote_for_process_0(config: Config, workdir, cluster, echo) -> None:
    """`label` on a process other than 0 of a distributed run: it reads the public pool (not the
    private train split) and its own block of teachers, votes on the points process 0 queries
    and sends it the counts; it takes no lock, draws no noise, charges nothing and writes
    nothing (process 0 does, once)."""
    import jax

    from pate.data import load_pool
    from pate.programs.teacher_training import read_ensemble

    ensemble = read_ensemble(workdir)
    pool_x = load_pool(config.data, config.data.public_size)  # the public pool only: no private record
    _check_pool(pool_x, ensemble)
    num_queries = cluster.agree()  # process 0's checks passed: it says how many points
    rows = cluster.rows(ensemble.num_teachers)
    _votes(config, ensemble, teacher_inputs(ensemble.config, pool_x[:num_queries], pool_x), cluster)
    me = f"process {cluster.index} of {cluster.count}"
    if not rows:
        echo(f"{me}: no teachers of the {ensemble.num_teachers} to vote with")
        return
    echo(f"{me}: teachers {rows.start}-{rows.stop - 1} voted on {num_queries} pool points "
         f"({jax.local_device_count()} device(s)); process 0 draws the release and writes it")


def _release_from_teachers(door: Door, config: Config, record: Mechanism, ensemble, public, plan,
                           seed, echo, planned: dict, cluster) -> LabelResult:
    """The body of `label` once its inputs are checked: the ledger's budget, the votes,
    the release, the brief report; writes votes.npz and labels.npz through `door`. `public`:
    the pool's inputs and labels, and the ledger's keyed digest of the private split (a
    function of the ledger: process 0 of a distributed run reads the split as a stream)."""
    pool_x, pool_y, data_digest = public
    from pate.programs.voting import plurality_accuracy

    # The ledger of the private data set refuses a release over its total budget before
    # any teacher votes (`pate.store.ledger`).
    agg = config.aggregation
    num_queries = agg.queries if plan is None else plan.num_queries
    cost = composition.labels_cost(record, num_queries, max_answers=None if plan is None else plan.max_answers)
    book = ledger_mod.Ledger.for_teachers(door.run.path, config)  # the data the teachers saw, not the file now
    check_run_ledger(book, door.run.path)  # a relabelled run: its earlier releases' ledger, or a refusal
    book.check_budget([cost], config.privacy.total_budget, config.privacy.delta, "this label release")

    # Votes only for the queried points (the first ones of the pool): nothing else is
    # answered, and a vote nobody needs is private data kept for no reason.
    cluster.agree(num_queries)  # every process is ready: they vote on these points
    queried = np.arange(num_queries)
    echo(f"voting: {ensemble.num_teachers} teachers on {queried.size} pool points"
         + (f" ({cluster.count} processes, each its own block of teachers)" if cluster.count > 1 else ""))
    inputs = teacher_inputs(ensemble.config, pool_x[queried], pool_x,
                            door.run / rundir.DPSGD_FEATURES_DIR, "queries")
    votes = _votes(config, ensemble, inputs, cluster)
    if np.any(votes.sum(axis=1) != ensemble.num_teachers):
        raise PateError("internal error: a vote row does not count every teacher once")

    cap = None if plan is None else plan.max_answers
    labels = released_arrays(votes[queried], queried, record, seed, cap)
    params = {**record.params(), **({} if cap is None else {"max_answers": cap})}
    released, truth = labels["labels"], pool_y[queried]
    answered = released >= 0
    result = LabelResult(
        mechanism=agg.mechanism, num_queries=int(queried.size), num_answered=int(answered.sum()),
        label_accuracy=float(np.mean(released[answered] == truth[answered])) if answered.any() else float("nan"),
        plurality_accuracy=plurality_accuracy(votes[queried], truth),
        params=params)

    # The brief report is computed before anything is written: a release the analysis
    # cannot account for is never written (drawing noise that is never published costs nothing).
    from pate.release.privacy_report import report_for_release

    p = config.privacy
    table = render_table(report_for_release(votes, labels, delta=p.delta, moments=p.moments,
                                            conversion=p.conversion, sanitize=False))
    door.out.write_npz(rundir.VOTES_NPZ, {"votes": votes.astype(np.int32)}, config,
                       meta={"data_set": book.source, "ledger_directory": str(book.directory)})
    door.out.write_npz(rundir.LABELS_NPZ, labels, config,
                       meta={"ledger": book.public_name(), **seed_record(seed), **planned})
    # Charged when the door commits the release (written first, renamed into place right after).
    charge_release(door, book, cost, record, door.out / rundir.LABELS_NPZ, num_queries, config.privacy,
                   data_digest=data_digest(book),
                   num_classes=ensemble.num_classes)
    say_data_note(config, echo)  # which values the data chose (none refused by then)
    echo(result.summary())
    echo(table)
    return result




def label_fine_grained(config: Config, workdir, *, seed: int | None = None, overwrite: bool = False,
                       budget: float | None = None, echo=print, cluster=None) -> LabelResult | None:
    """`pate label` with ``mechanism = "fine-grained"``: one release labels every pool point
    (`pate.release.fine_grained_release`); needs no teachers. Writes labels.npz only (no vote file: the
    private histogram never leaves memory) and charges the release's data-independent cost,
    ``[fine_grained] eps``, to the data set's ledger.

    In a distributed run (`cluster` of several processes, `pate label --distributed`) each
    process counts the votes of its own slice of the private records, the histograms are
    summed exactly across processes, and process 0 alone holds the run's lock, draws the
    noise, charges the ledger and writes; the others return None. A process that fails stops
    every process, each with one line, before anything is charged (docs/scale.md).

    Raises:
      PateError: a budget or target plan (the release spends ``fine_grained.eps`` once; set
        that), over the ledger's total budget, bad settings or data; labels exist and not
        `overwrite`; another process of a distributed run failed.
    """
    from pate.programs import agreement
    from pate.programs.cluster import Cluster

    if budget is not None or config.privacy.target_eps:  # the same line on every process: the config's
        raise PateError("--budget and privacy.target_eps plan a teachers' release; a fine-grained release "
                        "spends fine_grained.eps once, whatever it labels: set that instead")
    check_ready(config.features.map, MapSettings.of(config))  # before any data is read
    cluster = cluster or Cluster(0, 1, gather=lambda x: np.asarray(x)[None])
    with cluster.together():  # one failure stops every process, each with one line
        # Before any record is read: every process holds process 0's data set (its digest) and
        # settings (eps, noise, randomized response, votes per record, the map), or all stop.
        agreement.agree(cluster, config, data=True)
        if not cluster.leader:
            aggregation.noise_source(seed)  # refuses a bad seed as process 0 does
            config, _ = tuning.settle(config, cluster, echo=lambda _line: None)  # process 0's choice, agreed on
            fine_release.contribute(config, cluster, seed, echo)
            return None
        return _release_fine_grained(config, workdir, seed, overwrite, echo, cluster)


def _release_fine_grained(config: Config, workdir, seed, overwrite: bool, echo, cluster) -> LabelResult:
    """`label_fine_grained` on process 0 (the only process of a run that is not distributed)."""
    from pate.data import load_dataset, split

    with step("label-fine-grained", workdir, config=config, overwrite=overwrite, echo=echo) as door:
        source = aggregation.noise_source(seed)  # refuses a bad seed before any private value is read
        written = config  # config.toml and labels.npz keep the keys left to the proxy as written (0, "auto")
        # The keys left to the public proxy, chosen there with the release's noise (the public pool alone).
        config, tuned = tuning.settle(config, cluster if cluster.count > 1 else None, echo=echo)
        p = config.privacy
        cost = fine_release.noise_of(config.fine_grained, p.delta).cost()
        book = ledger_mod.Ledger.for_config(config)
        check_run_ledger(book, door.run.path)  # --overwrite: the run's earlier release's ledger, or a refusal
        book.check_budget([cost], p.total_budget, p.delta, "this fine-grained release")
        # In a distributed release each process (this one too) reads and counts its own slice of
        # the private records only (`Cluster.own_records`); the ledger's keyed digest of the
        # whole split is then read as a stream (`Ledger.keyed_split_digest`).
        if cluster.count > 1:
            splits, _start, total = cluster.own_records(config.data, config.data.public_size)
            data_digest = book.keyed_split_digest(config.data)
        else:
            splits, total = split(load_dataset(config.data), config.data.public_size), None
            data_digest = book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes())
        made = fine_release.release(config, splits, source, echo, cluster=cluster, seed=seed, total=total)
        chosen = {} if tuned is None else {tuning.META_KEY: tuned.meta()}
        door.out.write_npz(rundir.LABELS_NPZ, made.arrays, written,
                           meta={"ledger": book.public_name(), **seed_record(seed), **chosen})
        describe = (f"labels: every pool point ({splits.pool_x.shape[0]}) from one fine-grained release, "
                    f"{made.noise.kind} noise, eps {made.eps:.6g}")
        door.charge(book, "labels", cost, run=door.run.path, budget=p.total_budget, delta=p.delta,
                    mechanism={"name": made.record.name, "noise": made.noise.kind, "eps": made.eps,
                               "votes_per_record": made.noise.votes, "describe": describe,
                               **fine_release.label_dp_record(made.arrays)},
                    subject=content_digest(read_labels(door.out / rundir.LABELS_NPZ)),
                    release=ledger_mod.release_identity("labels", door.out / rundir.LABELS_NPZ),
                    data_digest=data_digest)
    labels = made.arrays["labels"]
    result = LabelResult(mechanism=made.record.name, num_queries=int(labels.size),
                         num_answered=int(labels.size),
                         label_accuracy=float(np.mean(labels == splits.pool_y)),
                         plurality_accuracy=float("nan"),
                         params={"eps": made.eps, "delta": made.delta, "votes_per_record": made.noise.votes,
                                 "smoothing": config.fine_grained.smoothing,
                                 "smoothing_weights": config.fine_grained.smoothing_weights})
    say_data_note(config, echo)  # which values the data chose (none refused by then)
    echo(ledger_mod.cumulative_line(book, p.delta))
    echo(result.summary())
    echo(f"wrote {door.run / rundir.LABELS_NPZ} (the release: every pool point labelled); `pate analyze` "
         "writes its report")
    return result
