"""`pate train-student`: the student learns from the released labels and the unlabelled
public pool, and nothing else.

What the student reads: ``labels.npz`` (the DP release: which pool points were queried
and their noisy labels, -1 where unanswered), the pool's images, and the evaluation
split (images and true labels, to score it). It never opens ``votes.npz``, the teachers'
checkpoint or ``teachers.json``, and never uses the pool's true labels or the private
training set, so training it is post-processing of the DP release and costs no privacy.

Methods (``[student] method``):

- ``fixmatch`` (Sohn et al., "FixMatch", NeurIPS 2020): each step takes ``batch_size``
  labelled images (weakly augmented, cross-entropy on the released labels) and
  ``mu * batch_size`` pool images. A pool image whose weakly augmented view gets a
  prediction of confidence >= ``threshold`` contributes the cross-entropy of that
  pseudo-label on a strongly augmented view, weighted by ``lambda_u``. Pseudo-labels
  carry no gradient.
- ``supervised``: the labelled images alone (weak augmentation): the baseline that shows
  what the unlabelled pool adds.

An exponential moving average of the weights (decay ``ema``) is what evaluates and what
is saved. Training runs as one jitted loop over chunks of steps (a ``lax.fori_loop``
inside ``jit``), so the host only wakes up between chunks to draw the progress bar.

The training program itself (optimizer, state, the FixMatch step, the jitted loop) is
`pate.programs.student_training`; this module reads the release, runs it, scores and writes the student.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.errors import PateError
from pate.store import checkpoints, digests, rundir
from pate.programs import keys, models
from pate.release import soft_targets
from pate.release.labels import Release, read_release, release_files, require_recorded
from pate.store.identity import directory_for
from pate.config import check_config, Config, config_to_dict, MAX_INT, StudentConfig
from pate.programs.progress import Progress
from pate.programs.student_training import compiled_loop, init_state, label_weights
from pate.store.door import step
from pate.programs import neighbour_student
from pate.programs.student_training import load_student, predict, probabilities

Params = Any

#: Steps per jitted call between progress updates (the last call may be shorter).
CHUNK_STEPS = 50


# --------------------------------------------------------------------------- training length


def steps_for_epochs(cfg: StudentConfig, epochs: float, *, pool_size: int, num_labelled: int) -> int:
    """Training steps that make ``epochs`` passes over the data a step draws most from.

    FixMatch draws ``mu * batch_size`` unlabelled images a step from the whole pool, so an
    epoch is a pass over the pool; the supervised baseline draws ``batch_size`` labelled
    images, so its epoch is a pass over the answered queries. At least one step.
    """
    if not (epochs > 0 and math.isfinite(epochs)):
        raise PateError(f"--epochs must be a positive number, got {epochs}")
    if cfg.method == "fixmatch":
        n, per_step = pool_size, cfg.mu * cfg.batch_size
    else:
        n, per_step = num_labelled, cfg.batch_size
    steps = epochs * n / per_step
    if not steps <= MAX_INT:
        raise PateError(f"--epochs {epochs:g} means {steps:.3g} steps, more than the {MAX_INT} "
                        "a run can take; give fewer epochs")
    return max(1, math.ceil(steps))


# --------------------------------------------------------------------------- predictions


# --------------------------------------------------------------------------- loading


# --------------------------------------------------------------------------- the command


@dataclasses.dataclass(frozen=True)
class StudentResult:
    """What `train_student` did (also written to `student.json`)."""

    method: str
    accuracy: float  # EMA weights on the evaluation split
    accuracy_last: float  # the last (non-averaged) weights, for comparison
    num_labelled: int
    num_queries: int
    num_unlabelled: int
    steps: int
    loss_history: list[float]
    mask_history: list[float]
    wall_time_s: float
    train_time_s: float
    eval_points: int
    accuracy_network: float | None = None  # `[student] neighbours`: the network alone (accuracy: the average)
    neighbours: int = 0

    def summary(self) -> str:
        lines = [
            f"student: {self.method}, {self.steps} steps on {self.num_labelled} labelled "
            f"(of {self.num_queries} queries)"
            + (f" + {self.num_unlabelled} unlabelled pool images" if self.method == "fixmatch"
               else " images"),
            f"student accuracy on the evaluation split ({self.eval_points} points): "
            + (f"{self.accuracy:.4f} (EMA weights; last weights {self.accuracy_last:.4f})" if self.accuracy_network is None
             else f"{self.accuracy:.4f} (the network averaged with its {self.neighbours}-neighbour student; the "
                  f"network alone {self.accuracy_network:.4f}, last weights {self.accuracy_last:.4f})"),
        ]
        if self.method == "fixmatch" and self.mask_history:
            lines.append(f"pool images above the confidence threshold at the end: "
                         f"{self.mask_history[-1]:.1%}")
        lines.append(f"wall time: {self.wall_time_s:.1f} s (training {self.train_time_s:.1f} s)")
        return "\n".join(lines)


#: The door's data check of `train_student`: the labels in the run must belong to this data set.
DATA_CHECK = dict(required="`pate train-teachers` and `pate label`",
                  held="was labelled on data set {name!r} with a different")


def train_student(config: Config, workdir: str | Path, *, overwrite: bool = False,
                  epochs: float | None = None, show_progress: bool = True, rounds: int | None = None,
                  echo: Callable[[str], None] = print) -> StudentResult:
    """Trains the student of ``config.student`` on a labelled run directory.

    Reads ``labels.npz`` and the data set's pool and evaluation split (never the votes,
    the teachers or the pool's true labels); writes ``student/`` (orbax checkpoint of
    the EMA weights), ``student.json`` and ``config.toml``.

    Args:
      config: the resolved config; its ``[data]`` must be the run's.
      workdir: a run directory labelled by `pate label`.
      overwrite: replace an existing student.
      epochs: when given, train `steps_for_epochs` steps instead of ``student.steps``
        (the recorded config says the steps that ran).
      show_progress: draw a rich progress bar.
      rounds: learn from the first ``rounds`` releases only (1: round 1's, as `pate run`
        does before round 2); default every round there is.
      echo: where status lines go.

    Returns:
      A `StudentResult`.

    Raises:
      PateError: no labels, labels that do not fit the pool, another data set's run, labels
        no ledger of the ledger folder records (`pate.release.labels.require_recorded`),
        a student already present without ``overwrite``, NaN/inf loss.
    """
    check_config(config, "pate.train_student")
    from pate.data import load_dataset, split

    start_time = time.time()
    # The old student (if any) is replaced only once the new one is completely written.
    with step("student", workdir, config=config, overwrite=overwrite, data=DATA_CHECK, echo=echo) as door:
        splits = split(load_dataset(config.data), config.data.public_size)
        models.check_input(config.student, splits.pool_x.shape[1:])
        models.check_module(config.student, splits.num_classes, splits.pool_x.shape[1:])
        release = read_release(door.run.path, pool_size=splits.pool_x.shape[0], num_classes=splits.num_classes,
                               rounds=rounds)
        # Nothing trains on labels its run's ledger does not record (another folder's, or none's),
        # found from the labels alone (a student never opens the votes or the teachers).
        require_recorded(directory_for(config.privacy), release_files(door.run.path, rounds), door.run.path,
                         "trained")
        release = soft_targets.with_targets(config, release, release_files(door.run.path, rounds)[0], splits.pool_x,
                                            splits.num_classes, echo)
        init = None
        if release.rounds == 2 and config.rounds.student_init == "round1":
            init = _round1_weights(door.run, config, splits.num_classes, tuple(splits.pool_x.shape[1:]), echo)
        if epochs is not None or (release.rounds == 2 and config.rounds.student_steps):
            steps = config.rounds.student_steps if epochs is None else steps_for_epochs(
                config.student, epochs, pool_size=splits.pool_x.shape[0], num_labelled=release.indices.size)
            config = dataclasses.replace(config, student=dataclasses.replace(config.student, steps=steps))
            door.config = config  # the recorded config says the steps that ran
        result, ema = _train(config, release, splits, show_progress, echo, start_time, init)
        _write_student(door.out, ema, config, result, release, splits)
    return result


def _round1_weights(run: rundir.RunDir, config: Config, num_classes: int, image_shape: tuple, echo) -> Params:
    """The round-1 student's weights (``student-round1/``, kept by round 2) for the student
    of both rounds to start from (``[rounds] student_init = "round1"``): public, a function
    of round 1's release and the pool. Raises PateError when there is none, or it is not
    the network of ``[student]``."""
    if not (run.exists(rundir.STUDENT_ROUND1_JSON) and run.exists(rundir.STUDENT_ROUND1_DIR)):
        raise PateError(f"{run.path} holds no round-1 student (student-round1/) to start from; label round 2 "
                        "again (`pate label --round 2 --overwrite`) or set rounds.student_init = \"scratch\"")
    kept = load_student(run.path, record=rundir.STUDENT_ROUND1_JSON, directory=rundir.STUDENT_ROUND1_DIR).params
    model = models.make_model(config.student, num_classes, jax.default_backend())
    like = jax.eval_shape(lambda: model.init(keys.training_key(0), jnp.zeros((1, *image_shape))))
    if jax.tree.structure(like) != jax.tree.structure(kept) or any(
            a.shape != b.shape for a, b in zip(jax.tree.leaves(like), jax.tree.leaves(kept))):
        raise PateError("the round-1 student's network differs from [student]'s; set rounds.student_init = "
                        "\"scratch\" or keep [student] as round 1 trained it")
    echo(f"student: starting from the round-1 student's weights ({rundir.STUDENT_ROUND1_DIR}/)")
    return kept


def _train(config: Config, release: Release, splits, show_progress: bool, echo, start_time: float,
           init: Params | None = None) -> tuple[StudentResult, Params]:
    """The body of `train_student`: trains on the release and the pool's images (public
    data only) and scores the EMA and the last weights on the evaluation split. ``init``:
    weights to start from (the round-1 student's), else a fresh initialisation."""
    cfg = config.student
    pool_x = splits.pool_x
    xl = jnp.asarray(pool_x[release.indices])
    yl = jnp.asarray(release.labels if release.targets is None else release.targets)
    wl = jnp.asarray(label_weights(release.labels, splits.num_classes, cfg.balance_labels))
    xu = jnp.asarray(pool_x)
    image_shape = tuple(pool_x.shape[1:])
    model = models.make_model(cfg, splits.num_classes, jax.default_backend())
    tx, train = compiled_loop(model, cfg)
    state = init_state(model, tx, image_shape, cfg.seed, splits.num_classes)
    if init is not None:
        params = jax.tree.map(jnp.asarray, init)
        state = dataclasses.replace(state, params=params, ema=jax.tree.map(jnp.copy, params), opt_state=tx.init(params))
    key = keys.stream(keys.training_key(cfg.seed), keys.DATA_STREAM)

    echo(f"student: {cfg.method} on {release.num_queries} queries, {xl.shape[0]} answered "
         f"({release.mechanism}); {xu.shape[0]} pool images")
    losses, masks = [], []
    train_start = time.time()
    with Progress("student step", cfg.steps, ("loss", "confident"), show=show_progress) as bar:
        done = 0
        while done < cfg.steps:
            n = min(CHUNK_STEPS, cfg.steps - done)
            state, sums = train(state, key, xl, yl, wl, xu, jnp.int32(n))
            sums = np.asarray(sums) / n
            done += n
            if not np.isfinite(sums[0]):
                raise PateError(f"the student's loss became NaN/inf at step {done}; "
                                + models.non_finite_advice(cfg, "train again with --overwrite"))
            losses.append(float(sums[0]))
            masks.append(float(sums[2]))
            bar.update(done, loss=f"{losses[-1]:.4f}", confident=f"{masks[-1]:.0%}")
    train_time = time.time() - train_start

    ema = jax.tree.map(np.asarray, state.ema)
    last = jax.tree.map(np.asarray, state.params)
    acc = float(np.mean(predict(model, ema, splits.eval_x, cfg.eval_batch_size) == splits.eval_y))
    acc_last = float(np.mean(predict(model, last, splits.eval_x, cfg.eval_batch_size) == splits.eval_y))
    acc_network = None
    if cfg.neighbours:  # the published predictor: the network averaged with the neighbour student
        vote = neighbour_student.fit(config, splits.pool_x, release.indices, release.labels, splits.num_classes,
                                     targets=release.targets)
        probs = probabilities(model, ema, splits.eval_x, cfg.eval_batch_size)
        acc_network = acc
        acc = float(np.mean(neighbour_student.combine(probs, vote.votes(splits.eval_x)) == splits.eval_y))
    result = StudentResult(
        method=cfg.method, accuracy=acc, accuracy_last=acc_last, num_labelled=int(xl.shape[0]),
        num_queries=release.num_queries, num_unlabelled=int(xu.shape[0]), steps=cfg.steps,
        loss_history=losses, mask_history=masks if cfg.method == "fixmatch" else [],
        wall_time_s=time.time() - start_time, train_time_s=train_time,
        eval_points=int(splits.eval_x.shape[0]), accuracy_network=acc_network, neighbours=cfg.neighbours)
    return result, ema


def with_neighbours(student, workdir: str | Path):
    """A loaded student (`load_student`) as it is published: with its neighbour student attached
    when `[student] neighbours` is set (the run's released labels, or the soft targets the student
    learnt from, and the public pool; no vote, no private record), else as it is."""
    if not student.config.student.neighbours:
        return student
    from pate.data import load_pool

    pool_x = load_pool(student.config.data, student.config.data.public_size)
    release = read_release(workdir, pool_size=pool_x.shape[0], num_classes=student.num_classes)
    # the same soft targets as in training (seeded by the student's seed), when the student took them
    release = soft_targets.with_targets(student.config, release, release_files(workdir, release.rounds)[0], pool_x,
                                        student.num_classes, echo=lambda _line: None)
    vote = neighbour_student.fit(student.config, pool_x, release.indices, release.labels, student.num_classes,
                                 targets=release.targets)
    return dataclasses.replace(student, neighbours=vote)


def _write_student(out: rundir.RunDir, ema, config: Config, result: StudentResult, release: Release,
                   splits) -> None:
    cfg = config.student
    checkpoints.save_params(out / rundir.STUDENT_DIR, ema, then="train the student again")
    out.write_json(rundir.STUDENT_JSON, {
        "checkpoint_sha256": digests.tree_digest(out / rundir.STUDENT_DIR),
        "method": cfg.method,
        "accuracy": result.accuracy,
        "accuracy_last_weights": result.accuracy_last,
        **({"accuracy_network": result.accuracy_network, "neighbours": result.neighbours}
           if result.accuracy_network is not None else {}),
        "eval_points": result.eval_points,
        "num_queries": release.num_queries,
        "num_labelled": result.num_labelled,
        "num_unlabelled": result.num_unlabelled if cfg.method == "fixmatch" else 0,
        "mechanism": release.mechanism,
        "labels_sha256": release.digest,
        "rounds": release.rounds,
        "steps": cfg.steps,
        "student": config_to_dict(config)["student"],
        "num_classes": splits.num_classes,
        "image_shape": list(splits.pool_x.shape[1:]),
        "dataset": config.data.name,
        "loss_history": result.loss_history,
        "confident_fraction_history": result.mask_history,
        "wall_time_s": result.wall_time_s,
        "train_time_s": result.train_time_s,
        "backend": jax.default_backend(),
    }, config)
