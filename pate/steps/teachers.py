"""The teacher ensemble: all teachers as one stacked pytree, trained by one jitted step
vmapped over the teacher axis (sharded over a ("teacher",) mesh when there are several
devices), checkpointed with orbax and evaluated; `load_teachers` reads a trained ensemble back.
Its predictions and vote histograms are `pate.programs.voting`'s.

Randomness is explicit (`pate.programs.keys`): teacher t is initialised from `fold_in(init_key, t)`
and shuffles and augments its shard in epoch e from `fold_in(fold_in(data_key, t), e)`,
so a run resumed from a checkpoint, or sharded differently, sees the same batches.

Multi-host: run the same command on every host with `--distributed`, which calls
`jax.distributed.initialize()` (coordinator address, process count and this process's
id from `--coordinator`, `--num-processes`, `--process-id`, or detected by JAX under
SLURM, Open MPI and the like). The teacher axis is sharded over all devices of all hosts; every
process makes the same partition from the split's record count (a file header) and reads only
the records of the teachers on its own devices (`pate.data.split_rows`, placed with
`Placement.put_local`); orbax writes the checkpoint collectively, and process 0 writes
the JSON artifacts; the run directory must be on a file system every host sees.

The processes agree (`pate.programs.cluster.Cluster`) three times before they commit to
anything: first, before anything is read, on the data set's digest (read as a stream) and every
setting (`pate.programs.agreement`: a process whose differ from process 0's fails, naming the
first); once their data and config checks have passed, before config.toml or any checkpoint is
written; and once the teachers are trained and scored, before process 0 writes teachers.json.
A process that fails before an agreement
(pate's own error: bad data, a shard smaller than a batch, a config that differs) stops every
process there, each with one line naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.errors import PateError
from pate.store import checkpoints, digests, rundir
from pate.store import ledger as ledger_mod
from pate.config import check_config, Config, TeachersConfig
from pate.programs.data_facts import say_data_note, with_data_defaults
from pate.data import Partition, Splits, dataset_name, load_dataset, partition, split, split_rows, train_count
from pate.programs import agreement, public_features
from pate.programs.cluster import Cluster
from pate.programs.models import check_input, check_module, conv_impl, make_model, non_finite_advice
from pate.programs.placement import Placement, to_host, unpad
from pate.programs.progress import Progress
from pate.programs.voting import plurality_accuracy, teacher_predictions, votes_from_predictions
from pate.store.door import Door, step
from pate.programs.teacher_training import state_shapes, init_teachers, make_epoch_fn, make_optimizer

Params = Any


# --------------------------------------------------------------------------- training program


# --------------------------------------------------------------------------- loading


# --------------------------------------------------------------------------- the command


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `train_teachers` did (also written to `teachers.json`)."""

    accuracies: np.ndarray  # (T,) per-teacher accuracy on the evaluation split
    ensemble_accuracy: float
    epochs: int
    loss_history: list[float]
    wall_time_s: float
    train_time_s: float
    devices: list[str]
    shard_size: int
    left_out: int
    resumed_from: int | None

    def summary(self) -> str:
        """A few lines for the terminal."""
        a = self.accuracies
        lines = [
            f"teachers: {len(a)} x {self.shard_size} points each ({self.left_out} left out), "
            f"{self.epochs} epochs" + (f", resumed from epoch {self.resumed_from}"
                                       if self.resumed_from is not None else ""),
            f"teacher accuracy: min {a.min():.4f}  median {np.median(a):.4f}  "
            f"max {a.max():.4f}  (mean {a.mean():.4f})",
            f"ensemble plurality accuracy: {self.ensemble_accuracy:.4f}",
            f"wall time: {self.wall_time_s:.1f} s (training {self.train_time_s:.1f} s) on "
            f"{len(self.devices)} device(s): {', '.join(sorted(set(self.devices)))}",
        ]
        return "\n".join(lines)


def _nan_message(bad: np.ndarray, epoch: int, last_good: int | None, ckpt_dir: Path,
                 staged: bool = False, tc=None) -> str:
    ids = ", ".join(str(int(t)) for t in bad[:10]) + (", ..." if len(bad) > 10 else "")
    kept = (f"kept the last good checkpoint (epoch {last_good}) in {ckpt_dir}"
            if last_good else "no checkpoint was written yet")
    if staged:
        kept = f"left the finished teachers in {ckpt_dir} as they were"
    advice = non_finite_advice(tc or TeachersConfig(), "start again with --overwrite")
    return (f"loss or parameters became NaN/inf in epoch {epoch} for {len(bad)} teacher(s) "
            f"(ids {ids}); stopped and {kept}. {advice[0].upper()}{advice[1:]}")


def train_teachers(config: Config, workdir: str | Path, *, resume: bool = False,
                   overwrite: bool = False, show_progress: bool = True,
                   devices: Sequence[jax.Device] | None = None,
                   on_epoch: Callable[[int, float], None] | None = None,
                   echo: Callable[[str], None] = print, cluster: Cluster | None = None) -> TrainResult:
    """Trains the teacher ensemble of `config` and writes it into the run directory.

    Writes `config.toml`, `teachers/` (orbax checkpoints of the stacked params and
    optimizer state, every `checkpoint_every` epochs and at the end) and
    `teachers.json` (per-teacher accuracy, ensemble accuracy, timing, partition).

    Args:
      config: the resolved config (`[data]`, `[teachers]`).
      workdir: the run directory.
      resume: continue from the last checkpoint (the config must be the same).
      overwrite: replace existing teacher artifacts.
      show_progress: draw a rich progress bar.
      devices: devices to shard the teachers over (default: all).
      on_epoch: called as `on_epoch(epochs_done, mean_loss)` after each epoch (and
        after its checkpoint, if one is due).
      echo: where the line about replaced artifacts goes.
      cluster: the processes of a distributed run (default: `Cluster()`, JAX's processes;
        tests pass one with their own all-gather).

    With `overwrite` over finished teachers, the new ensemble is trained in
    ``RUN/.new-teachers/`` and swapped in only once complete (`pate.store.door.step`): a
    failure leaves the old teachers as they were. The artifacts of later steps
    (votes, labels, student, privacy report) are then moved aside, not deleted.

    Returns:
      A `TrainResult`.

    Raises:
      PateError: bad data or config (more teachers than points, shards smaller than a
        batch), artifacts present without `--overwrite`/`--resume`, a config differing
        from the one being resumed, or NaN/inf loss (the last good checkpoint is kept);
        another process of a distributed run failed (`pate.programs.cluster.Stopped`), or
        its data or settings differ from process 0's.
    """
    check_config(config, "pate.train_teachers")
    config = with_data_defaults(config)  # the keys the file left out, from the data's public facts
    start_time = time.time()
    tc = config.teachers
    # Keep the finished teachers until the new ones are complete. (Multi-host runs
    # replace them up front: the staging folder would need a barrier.)
    staged = "when-replacing" if jax.process_count() == 1 else False
    cluster = cluster or Cluster()
    # One failure stops every process, each with one line (`Cluster.together`): it is told at
    # the next agreement, the first of which comes before anything is written.
    with cluster.together(), _agreed(cluster, config), step(
            "teachers", workdir, config=config, overwrite=overwrite, resume=resume, staged=staged, echo=echo) as door:
        done = _already_finished(door, tc) if door.resuming else None
        if done is not None:  # nothing to resume: nothing written (a later `pate run` labels nothing again)
            door.config = None
            echo(f"teachers: {door.run / rundir.TEACHERS_JSON} already records all {tc.epochs} epochs and its "
                 "checkpoint is intact; nothing to resume, nothing written")
            return done
        placement = Placement(tc.num_teachers, devices)
        part, splits, shards = _private_data(config, placement, cluster, echo)
        splits = _teachers_view(config, splits, door.run, show_progress)
        check_input(tc, splits.train_x.shape[1:])
        check_module(tc, splits.num_classes, splits.train_x.shape[1:])  # a user's module, before any step
        model = make_model(config.teachers, splits.num_classes, backend=placement.platform)
        tx = make_optimizer(tc, part.shard_size // tc.batch_size)
        _agree_to_train(cluster, config)
        config = say_data_note(config, echo)  # which values the data chose, once the checks have passed
        with _across_processes(cluster):  # from here every process is in the same collectives
            door.write_config()
            # The teachers are private: their folder is owner-only.
            manager = checkpoints.open_manager(door.out / rundir.TEACHERS_DIR, private=True)
            try:
                params, history, latest, train_time = _train(config, door, manager, placement, model, tx, splits,
                                                             part, shards, show_progress, on_epoch)
            finally:
                manager.close()
            return _evaluate(config, door.out, params, model, placement, dataset_name(config.data), splits, part,
                             history, latest, start_time, train_time, cluster)


@dataclasses.dataclass(frozen=True)
class Shards:
    """This process's teachers' shards: the rows of the padded teacher axis on its own devices
    (`Placement.local_teachers`) and, for each, the positions in ``splits.train_x`` of its
    records (``positions[i]``: teacher ``teachers[i]``'s shard)."""

    teachers: np.ndarray  # (L,) int64
    positions: np.ndarray  # (L, shard_size) int64


def _private_data(config: Config, placement: Placement, cluster: Cluster, echo) -> tuple[Partition, Splits, Shards]:
    """The public partition, the splits and this process's shards. One process reads the whole
    split (`load_dataset`). In a distributed run (`cluster` of several processes) each process
    makes the same partition from the split's record count (a file header, `train_count`) and
    reads only the records of its own teachers (`split_rows`): ``splits.train_x`` then holds
    those rows alone, teacher by teacher (a padding teacher's are teacher 0's).

    Raises:
      PateError: more teachers than records, or a shard smaller than a batch.
    """
    tc = config.teachers
    distributed = cluster.count > 1
    total = train_count(config.data) if distributed else None
    splits = None if distributed else split(load_dataset(config.data), config.data.public_size)
    part: Partition = partition(total if distributed else splits.train_x.shape[0], tc.num_teachers, tc.seed)
    if part.shard_size < tc.batch_size:
        raise PateError(f"each of {tc.num_teachers} teachers gets {part.shard_size} training "
                        f"points, fewer than teachers.batch_size = {tc.batch_size}; lower "
                        "teachers.batch_size or teachers.num_teachers")
    padded = np.concatenate([part.indices, np.repeat(part.indices[:1], placement.padded - tc.num_teachers, axis=0)])
    teachers = placement.local_teachers()
    if not distributed:
        return part, splits, Shards(teachers, padded[teachers])
    rows = padded[teachers]
    splits = split_rows(config.data, config.data.public_size, rows.reshape(-1))
    echo(f"process {cluster.index} of {cluster.count}: teachers {_ranges(teachers, tc.num_teachers)}, "
         f"{rows.size} private records read of {total}")
    return part, splits, Shards(teachers, np.arange(rows.size, dtype=np.int64).reshape(rows.shape))


def _by_teacher(rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``rows[positions]``: a view when `rows` are already the shards in order (a distributed
    process's own records), so they are not copied once more."""
    if positions.size == rows.shape[0] and np.array_equal(positions.reshape(-1), np.arange(rows.shape[0])):
        return rows.reshape(*positions.shape, *rows.shape[1:])
    return rows[positions]


def _ranges(teachers: np.ndarray, num_teachers: int) -> str:
    """The real teachers among `teachers` as ranges ("0-3, 8"), padding teachers left out."""
    real = [int(t) for t in teachers if t < num_teachers]
    if not real:
        return "none (padding only)"
    parts, first = [], real[0]
    for a, b in zip(real, real[1:] + [None]):
        if b != a + 1:
            parts.append(f"{first}-{a}" if a > first else f"{a}")
            first = b
    return ", ".join(parts)


@contextlib.contextmanager
def _agreed(cluster: Cluster, config: Config):
    """The first agreement, before anything is read or written (process 0 has not yet taken the
    lock): every process has process 0's data set (its digest, read as a stream) and settings
    (`pate.programs.agreement`); one whose differ stops them all with its line."""
    agreement.agree(cluster, config, data=True)
    yield


def _agree_to_train(cluster: Cluster, config: Config) -> None:
    """The agreement before training (nothing written yet): every process passed its own data and
    config checks (a shard smaller than a batch, an input its model does not take).

    Raises:
      Stopped: another process failed its checks.
    """
    if cluster.count > 1:
        cluster.agree()  # every process has the same data and settings and passed its checks: they train


@contextlib.contextmanager
def _across_processes(cluster: Cluster):
    """The training and scoring of a multi-process run (`--distributed`), whose every step is a
    collective of all processes: a failure other than pate's own (a peer killed or lost: gloo's
    "Connection closed by peer", NCCL's errors) ends in one line, and this process leaves at exit
    without JAX's shutdown barrier (`pate.programs.cluster.Cluster.abandon`), which would wait
    for the dead peer until its heartbeat timeout (100 s) and abort with a C++ trace. The
    checkpoints written so far are kept: `--resume` (or `pate run`) continues from them."""
    try:
        yield
    except PateError:
        raise
    except Exception as err:  # noqa: BLE001 - XLA, gloo and NCCL raise several types
        if cluster.count == 1:
            raise
        cluster.abandon()
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise PateError(f"the teachers' training across the processes failed ({first}); if one of them stopped, "
                        "start them all again: `pate train-teachers --resume` (or `pate run`) continues from the "
                        "last checkpoint") from None


def _teachers_view(config: Config, splits: Splits, run: rundir.RunDir, show_progress: bool) -> Splits:
    """The splits as the teachers see them: under `[teachers] features`, each private training
    and evaluation input's coefficients under that public map (cached, owner-only, in the run's
    private feature folder); otherwise the splits as they are."""
    if not config.teachers.features:
        return splits
    # The cache folder is made owner-only when its first rows are written (`pate.store.rundir.cached_rows`):
    # a map refused before (its weights, images against rows, a constant map) leaves no folder behind.
    view = public_features.input_map(config, splits.pool_x, run / rundir.DPSGD_FEATURES_DIR,
                                     show_progress=show_progress)
    return dataclasses.replace(splits, train_x=view(splits.train_x, "train"), eval_x=view(splits.eval_x, "eval"))


def _already_finished(door: Door, tc) -> TrainResult | None:
    """The result teachers.json records when it holds every epoch of `tc` and its final
    checkpoint is the one recorded; None when there is training left to resume."""
    if not door.run.exists(rundir.TEACHERS_JSON):
        return None
    info = door.run.read_json(rundir.TEACHERS_JSON)
    checkpoint = info.get("checkpoint")
    if not isinstance(checkpoint, dict) or checkpoint.get("step") != tc.epochs or info.get("epochs") != tc.epochs:
        return None
    digests.check_recorded("teacher checkpoint", door.run / rundir.TEACHERS_DIR / str(tc.epochs),
                           checkpoint.get("sha256"), "run `pate train-teachers --overwrite` to train again")
    try:
        return TrainResult(np.asarray(info["accuracy"], float), float(info["ensemble_accuracy"]), tc.epochs,
                           list(info["loss_history"]), 0.0, 0.0, list(info.get("devices") or []),
                           int(info["shard_size"]), int(info["left_out"]), tc.epochs)
    except (KeyError, TypeError, ValueError):
        return None  # an incomplete record: train on, and write it again


def _train(config: Config, door: Door, manager, placement: Placement, model, tx, splits, part,
           shards: Shards, show_progress: bool, on_epoch):
    """The training loop of `train_teachers`: from the last checkpoint when resuming, else
    from `init_teachers`; checkpoints into `door.out` (the run directory, or its staging
    folder when replacing finished teachers). Returns (params, loss history, epoch
    resumed from, training time)."""
    tc = config.teachers
    image_shape = splits.train_x.shape[1:]
    start_epoch, history = 0, []
    latest = manager.latest_step() if door.resuming else None
    if latest is not None:
        params_like, opt_like = state_shapes(model, tx, image_shape, tc.num_teachers)
        restored = checkpoints.restore_step(manager, latest, {"params": params_like, "opt_state": opt_like},
                                            ("progress",))
        params = placement.put(jax.tree.map(np.asarray, restored["params"]))
        opt_state = placement.put(jax.tree.map(np.asarray, restored["opt_state"]))
        start_epoch, history = int(latest), list(restored["progress"]["loss_history"])
    else:
        params, opt_state = init_teachers(model, tx, image_shape, tc.seed, placement)

    x = placement.put_local(_by_teacher(splits.train_x, shards.positions), shards.teachers)
    y = placement.put_local(_by_teacher(splits.train_y, shards.positions), shards.teachers)
    ids = placement.teacher_ids()
    epoch_fn = make_epoch_fn(model, tx, tc, part.shard_size, placement)

    last_good = latest
    train_start = time.time()
    with Progress("epoch", tc.epochs, ("loss",), start=start_epoch, show=show_progress) as bar:
        for epoch in range(start_epoch, tc.epochs):
            params, opt_state, loss, finite = epoch_fn(params, opt_state, x, y, ids, jnp.int32(epoch))
            loss = to_host(loss)[: tc.num_teachers]
            finite = to_host(finite)[: tc.num_teachers]
            if not finite.all():
                raise PateError(_nan_message(np.flatnonzero(~finite), epoch + 1, last_good,
                                             door.run / rundir.TEACHERS_DIR, door.staged, tc))
            history.append(float(loss.mean()))
            done = epoch + 1
            if done % tc.checkpoint_every == 0 or done == tc.epochs:
                checkpoints.save_step(
                    manager, done, {"params": unpad(params, tc.num_teachers),
                                    "opt_state": unpad(opt_state, tc.num_teachers)},
                    {"progress": {"loss_history": history}}, unit="epoch",
                    then="run `pate train-teachers --resume` (earlier checkpoints are kept)")
                last_good = done
            bar.update(done, loss=f"{history[-1]:.4f}")
            if on_epoch:
                on_epoch(done, history[-1])
    return params, history, latest, time.time() - train_start


def _evaluate(config: Config, out: rundir.RunDir, params, model, placement: Placement, dataset_name: str,
              splits, part, history, latest, start_time: float, train_time: float,
              cluster: Cluster) -> TrainResult:
    """Scores the trained teachers on the evaluation split and writes teachers.json into `out`
    once every process has scored them (an agreement: one that failed stops them all before
    process 0 writes)."""
    tc = config.teachers
    image_shape = splits.train_x.shape[1:]
    preds = teacher_predictions(params, model, splits.eval_x, tc.eval_batch_size, placement,
                                tc.teacher_chunk)
    accuracies = (preds == splits.eval_y[None, :]).mean(axis=1)
    ensemble = plurality_accuracy(votes_from_predictions(preds, splits.num_classes),
                                  splits.eval_y)
    result = TrainResult(
        accuracies=accuracies, ensemble_accuracy=ensemble, epochs=tc.epochs,
        loss_history=history, wall_time_s=time.time() - start_time, train_time_s=train_time,
        devices=[d.device_kind for d in placement.devices], shard_size=part.shard_size,
        left_out=int(part.left_out.size), resumed_from=latest)
    final = out / rundir.TEACHERS_DIR / str(tc.epochs)
    cluster.agree()  # every process trained and scored its teachers: process 0 writes teachers.json
    if cluster.leader:
        out.write_json(rundir.TEACHERS_JSON, {
            "checkpoint": {"step": tc.epochs, "sha256": digests.tree_digest(final)},
            "num_teachers": tc.num_teachers,
            "num_classes": splits.num_classes,
            "image_shape": list(image_shape),
            "dataset": dataset_name,
            # PRIVATE file: the data set's source (sha256 of the training split), which names its ledger
            "data_set": ledger_mod.Ledger.for_config(config).source,
            "train_points": int(part.indices.size + part.left_out.size),
            "shard_size": part.shard_size,
            "left_out": int(part.left_out.size),
            "eval_points": int(splits.eval_x.shape[0]),
            "epochs": tc.epochs,
            "resumed_from_epoch": latest,
            "accuracy": accuracies,
            "accuracy_summary": {"min": float(accuracies.min()),
                                 "median": float(np.median(accuracies)),
                                 "mean": float(accuracies.mean()),
                                 "max": float(accuracies.max())},
            "ensemble_accuracy": ensemble,
            "loss_history": history,
            "wall_time_s": result.wall_time_s,
            "train_time_s": train_time,
            "devices": [str(d) for d in placement.devices],
            "backend": placement.devices[0].platform,
            "process_count": jax.process_count(),
            "conv_impl": conv_impl(tc.conv_impl, placement.devices[0].platform)
                         if tc.model == "cnn" else None,
        }, config)
    return result
