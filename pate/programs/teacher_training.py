"""The teachers' training program: all teachers as one stacked pytree, one jitted epoch vmapped
over the teacher axis (sharded over a ("teacher",) mesh when there are several devices), their
optimizer and initialisation, and `read_ensemble` / `load_teachers`, which read a trained
ensemble back from a run directory (all of it, or one process's block of it). `pate.steps.teachers` (the command) runs it; `pate.programs.voting` turns its
predictions into vote histograms.

Randomness is explicit (`pate.programs.keys`): teacher t is initialised from
`fold_in(init_key, t)` and shuffles and augments its shard in epoch e from
`fold_in(fold_in(data_key, t), e)`, so a run resumed from a checkpoint, or sharded
differently, sees the same batches.
"""

from __future__ import annotations
import dataclasses
from pathlib import Path
from typing import Any, Callable, Sequence
import jax
import jax.numpy as jnp
import numpy as np
import optax
from analysis.core.errors import PateError
from pate.programs import augment, keys
from pate.store import checkpoints, rundir
from pate.config import Config, TeachersConfig
from pate.programs.models import make_model
from pate.programs.cluster import Cluster
from pate.programs.placement import Placement, process_blocks, teacher_chunk

Params = Any


def make_optimizer(cfg: TeachersConfig, steps_per_epoch: int) -> optax.GradientTransformation:
    """AdamW or SGD+momentum with a cosine (to zero) or constant learning rate."""
    total = cfg.epochs * steps_per_epoch
    if cfg.schedule == "cosine":
        lr = optax.cosine_decay_schedule(cfg.learning_rate, max(total, 1))
    else:
        lr = optax.constant_schedule(cfg.learning_rate)
    if cfg.optimizer == "adamw":
        return optax.adamw(lr, weight_decay=cfg.weight_decay)
    return optax.chain(optax.add_decayed_weights(cfg.weight_decay),
                       optax.sgd(lr, momentum=cfg.momentum or None, nesterov=cfg.momentum > 0))


def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def init_teachers(model, tx: optax.GradientTransformation, image_shape: Sequence[int],
                  seed: int, placement: Placement,
                  teacher_ids: jax.Array | None = None) -> tuple[Params, Any]:
    """Stacked parameters and optimizer states of all teachers, on the devices.

    Teacher t's parameters come from `fold_in(stream(training_key(seed), INIT_STREAM), t)`
    (`pate.programs.keys`).

    Args:
      teacher_ids: the ids to initialise, placed by `placement` (default: all of
        `placement.teacher_ids()`).
    """
    init = make_init_fn(model, tx, image_shape, seed, placement)
    return init(placement.teacher_ids() if teacher_ids is None else teacher_ids)


def make_init_fn(model, tx: optax.GradientTransformation, image_shape: Sequence[int], seed: int,
                 placement: Placement) -> Callable:
    """The jitted initialiser of `init_teachers`: placed teacher ids -> (params, opt_state).
    Build it once to initialise many groups of teachers: each new one compiles again (on a
    GPU about 0.4 s, which 500 teachers initialised one by one would pay 500 times)."""
    init_key = keys.stream(keys.training_key(seed), keys.INIT_STREAM)

    def one(teacher_id):
        params = model.init(jax.random.fold_in(init_key, teacher_id),
                            jnp.zeros((1, *image_shape), jnp.float32))
        return params, tx.init(params)

    return jax.jit(jax.vmap(one), out_shardings=placement.sharding)


def make_epoch_fn(model, tx: optax.GradientTransformation, cfg: TeachersConfig,
                  shard_size: int, placement: Placement | None = None) -> Callable:
    """One epoch for all teachers: `(params, opt_state, x, y, teacher_ids, epoch) ->
    (params, opt_state, mean_loss[T], finite[T])`.

    Per teacher, a `lax.scan` over `shard_size // batch_size` batches of its own
    shuffled shard; the optimizer update is inside the vmap, so no operation couples
    teachers. The teachers on a device run `teacher_chunk` at a time (vmapped; chunks
    one after another via `lax.map`), or all at once. With a mesh, `shard_map` gives
    each device its own block of teachers. `finite[t]` is False when teacher t's loss
    or parameters are NaN/inf.
    """
    batch = cfg.batch_size
    num_batches = shard_size // batch
    train_key = keys.stream(keys.training_key(cfg.seed), keys.DATA_STREAM)

    def loss_fn(params, x, y, key):
        logits = model.apply(params, x, train=True, rngs={"dropout": key})
        targets = jax.nn.one_hot(y, logits.shape[-1])
        if cfg.label_smoothing:
            targets = optax.smooth_labels(targets, cfg.label_smoothing)
        return optax.softmax_cross_entropy(logits, targets).mean()

    def teacher_epoch(params, opt_state, x, y, teacher_id, epoch):
        key = jax.random.fold_in(jax.random.fold_in(train_key, teacher_id), epoch)
        k_perm, k_aug = jax.random.split(key)
        order = jax.random.permutation(k_perm, shard_size)[: num_batches * batch]

        def step(carry, inputs):
            params, opt_state = carry
            idx, i = inputs
            k_batch, k_dropout = jax.random.split(jax.random.fold_in(k_aug, i))
            xb = augment.weak_zero_fill(k_batch, x[idx], cfg.augment_shift, cfg.augment_flip)
            loss, grads = jax.value_and_grad(loss_fn)(params, xb, y[idx], k_dropout)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(
            step, (params, opt_state), (order.reshape(num_batches, batch), jnp.arange(num_batches)))
        loss = losses.mean()
        finite = jnp.isfinite(loss) & _all_finite(params)
        return params, opt_state, loss, finite

    all_at_once = jax.vmap(teacher_epoch, in_axes=(0, 0, 0, 0, 0, None))
    chunk = teacher_chunk(cfg, placement.platform if placement else jax.default_backend())

    def local_epoch(params, opt_state, x, y, teacher_ids, epoch):
        if not chunk or chunk >= teacher_ids.shape[0]:
            return all_at_once(params, opt_state, x, y, teacher_ids, epoch)
        return jax.lax.map(lambda args: teacher_epoch(*args, epoch),
                           (params, opt_state, x, y, teacher_ids), batch_size=chunk)

    epoch_fn = local_epoch
    if placement is not None and placement.mesh is not None:
        spec = jax.sharding.PartitionSpec("teacher")
        epoch_fn = jax.shard_map(local_epoch, mesh=placement.mesh,
                                 in_specs=(spec,) * 5 + (jax.sharding.PartitionSpec(),),
                                 out_specs=spec)
    return jax.jit(epoch_fn, donate_argnums=(0, 1))


def state_shapes(model, tx, image_shape: Sequence[int], num_teachers: int):
    """Abstract (unpadded, host) stacked params and optimizer state."""

    def one():
        params = model.init(keys.training_key(0), jnp.zeros((1, *image_shape), jnp.float32))
        return params, tx.init(params)

    params, opt = jax.eval_shape(one)
    stack = lambda s: jax.ShapeDtypeStruct((num_teachers, *s.shape), s.dtype)  # noqa: E731
    return jax.tree.map(stack, params), jax.tree.map(stack, opt)


@dataclasses.dataclass(frozen=True)
class Teachers:
    """A trained ensemble loaded from a run directory (all of it, or one process's block)."""

    params: Params  # stacked, leading axis: the teachers loaded, host arrays
    model: Any
    config: Config
    num_classes: int
    image_shape: tuple[int, ...]

    @property
    def num_teachers(self) -> int:
        """How many teachers were loaded (a process's block holds fewer than the ensemble)."""
        return int(jax.tree.leaves(self.params)[0].shape[0])


@dataclasses.dataclass(frozen=True)
class Ensemble:
    """What a finished `train-teachers` run records about its ensemble, before any parameter
    is read: its size, classes, input shape and model, and which checkpoint holds it."""

    run: rundir.RunDir
    config: Config
    model: Any
    num_teachers: int
    num_classes: int
    image_shape: tuple[int, ...]
    step: int
    digest: str | None
    remake: str

    def load(self, cluster: Cluster | None = None) -> Teachers:
        """The teachers' parameters, once the checkpoint is the one recorded (its sha256,
        streamed). With a `cluster` of several processes, only this process's block of the
        teacher axis (`Cluster.rows`): the checkpoint is restored sharded over one device per
        process (`placement.process_blocks`), so each process reads and holds its own
        teachers only. Every process of a cluster calls it at the same point.

        Raises:
          PateError: the checkpoint is missing, changed or unreadable.
        """
        tx = make_optimizer(self.config.teachers, 1)
        like, _ = state_shapes(self.model, tx, self.image_shape, self.num_teachers)
        strict, rows = True, range(self.num_teachers)
        if cluster is not None and cluster.count > 1:
            rows = cluster.rows(self.num_teachers)
            padded, sharding = process_blocks(self.num_teachers)
            like = jax.tree.map(lambda s: jax.ShapeDtypeStruct((padded, *s.shape[1:]), s.dtype,
                                                               sharding=sharding), like)
            strict = False  # the padding rows past the last teacher are zeros, dropped below

        def read():
            manager = checkpoints.open_manager(self.run / rundir.TEACHERS_DIR, create=False)
            try:
                return checkpoints.restore_step(manager, self.step, {"params": like}, ("progress",),
                                                strict=strict)
            finally:
                manager.close()

        def restore():
            if strict:
                return read()
            try:
                return read()
            except Exception as err:  # noqa: BLE001 - tensorstore/orbax raise many types
                # Orbax's manager and sharded restore run collectives: a process that died fails them.
                cluster.abandon()
                raise PateError(f"cannot read the teacher checkpoint of epoch {self.step} with the other "
                                f"processes ({checkpoints.short_error(err)}); nothing was charged or written: "
                                f"if one of them stopped, start them all again, else {self.remake}") from None

        restored = checkpoints.verified_restore(f"teacher checkpoint of epoch {self.step}",
                                                self.run / rundir.TEACHERS_DIR / str(self.step), self.digest,
                                                self.remake, restore)
        if strict:
            params = jax.tree.map(np.asarray, restored["params"])
        else:
            params = jax.tree.map(lambda a: np.asarray(a.addressable_data(0))[: len(rows)], restored["params"])
        return Teachers(params, self.model, self.config, self.num_classes, self.image_shape)


def read_ensemble(workdir: str | Path) -> Ensemble:
    """The record of the finished ensemble of a run directory (no parameter read yet).

    Raises:
      PateError: the directory holds no finished `train-teachers` run.
    """
    record = checkpoints.read_record(workdir, record=rundir.TEACHERS_JSON, directory=rundir.TEACHERS_DIR,
                                     noun="teachers", command="train-teachers", pronoun="them")
    run, info, config, remake = record.run, record.info, record.config, record.remake
    try:
        recorded = info.get("checkpoint")
        if recorded is not None:
            step, digest = int(recorded["step"]), str(recorded["sha256"])
        else:  # a run from before checkpoints were recorded: the last epoch's
            step, digest = int(info["epochs"]), None
    except (KeyError, TypeError, ValueError, AttributeError):
        raise record.refuse("checkpoint") from None
    if int(info.get("num_teachers", config.teachers.num_teachers)) != config.teachers.num_teachers:
        raise PateError(f"{record.path} records {info.get('num_teachers')} teachers but "
                        f"{run / rundir.CONFIG_TOML} says {config.teachers.num_teachers}; {remake}")
    model = make_model(config.teachers, record.num_classes)
    return Ensemble(run, config, model, config.teachers.num_teachers, record.num_classes, record.image_shape,
                    step, digest, remake)


def load_teachers(workdir: str | Path) -> Teachers:
    """The finished ensemble of a run directory, all of it (`read_ensemble`, `Ensemble.load`).

    Raises:
      PateError: the directory holds no finished `train-teachers` run.
    """
    return read_ensemble(workdir).load()
