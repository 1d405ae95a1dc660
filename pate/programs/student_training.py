"""The student's training program: the optimizer, the state the loop carries, one FixMatch
(or supervised) step and the jitted loop over chunks of steps. Post-processing of the release:
it sees the released labels' images and labels and the public pool, nothing private.

- FixMatch (Sohn et al., NeurIPS 2020): released labels under weak augmentation, pool images
  whose weakly augmented view is predicted with confidence >= ``threshold`` trained on that
  pseudo-label under strong augmentation, weighted by ``lambda_u``.
- Options: FlexMatch's class-wise thresholds (`class_thresholds`), ReMixMatch's distribution
  alignment (`align`), class-balanced sampling of the released labels (`label_weights`).
- An exponential moving average of the weights (decay ramping up to ``ema``).

`pate.steps.student` (the command) reads the release, runs this loop and writes the student.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pate.programs import augment, keys
from pate.config import StudentConfig
from pathlib import Path
from analysis.core.errors import PateError
from pate.store import checkpoints, rundir
from pate.programs import models
from pate.config import Config, config_from_dict

Params = Any

#: Decay of the running mean of pool predictions that distribution alignment divides by.
PRIOR_DECAY = 0.999


def make_optimizer(cfg: StudentConfig, steps: int) -> optax.GradientTransformation:
    """AdamW or SGD (Nesterov momentum) with a cosine learning-rate decay over ``steps``
    and a short linear warm-up."""
    warmup = min(cfg.warmup_steps, max(steps - 1, 0))
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else cfg.learning_rate, peak_value=cfg.learning_rate,
        warmup_steps=warmup, decay_steps=max(steps, warmup + 1), end_value=0.0)
    if cfg.optimizer == "sgd":
        return optax.chain(optax.add_decayed_weights(cfg.weight_decay),
                           optax.sgd(schedule, momentum=cfg.momentum, nesterov=True))
    return optax.adamw(schedule, weight_decay=cfg.weight_decay)


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything the training loop carries (a pytree)."""

    params: Params
    ema: Params
    opt_state: Any
    step: jax.Array
    pool_prior: jax.Array  # running mean of the pool predictions (distribution alignment)
    learned: jax.Array  # running per-class share of confident pool predictions (adaptive threshold)


jax.tree_util.register_dataclass(TrainState, data_fields=["params", "ema", "opt_state", "step", "pool_prior",
                                                          "learned"], meta_fields=[])


def label_weights(labels: np.ndarray, num_classes: int, balance: bool) -> np.ndarray:
    """Sampling probabilities of the labelled examples: uniform, or (``balance``) each
    released class drawn with equal probability (a class with n labels: 1/(K n) each,
    K the number of classes present)."""
    labels = np.asarray(labels)
    if not balance or labels.size == 0:
        return np.full(labels.shape, 1.0 / max(labels.size, 1), np.float32)
    counts = np.bincount(labels, minlength=num_classes)
    present = np.count_nonzero(counts)
    return (1.0 / (present * counts[labels])).astype(np.float32)


def class_thresholds(threshold: float, learned: jax.Array) -> jax.Array:
    """FlexMatch's class-wise thresholds (Zhang et al., NeurIPS 2021, Eq. 6 with the convex
    mapping M(x) = x / (2 - x)): a class whose pool images are rarely predicted confidently
    (its learning status, normalised by the best-learned class) gets a lower threshold."""
    beta = learned / jnp.maximum(jnp.max(learned), 1e-12)
    return threshold * beta / (2.0 - beta)


def align(probs: jax.Array, prior: jax.Array) -> jax.Array:
    """Distribution alignment (ReMixMatch, Berthelot et al. 2020): each row of `probs`
    times `uniform / prior`, renormalised."""
    scaled = probs / jnp.maximum(prior, 1e-6)
    return scaled / jnp.sum(scaled, axis=-1, keepdims=True)


def _cross_entropy(logits, labels):
    """Cross-entropy against integer labels (n,), or against soft targets (n, classes) whose rows
    sum to 1 (`[student] targets = "posterior"`): the one-hot rows of integer labels give the same loss."""
    if labels.ndim == logits.ndim:
        return optax.softmax_cross_entropy(logits, labels)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def make_train_fn(model, tx: optax.GradientTransformation, cfg: StudentConfig,
                  method: str) -> Callable:
    """The jitted training loop: ``train(state, key, xl, yl, wl, xu, num_steps) -> (state, sums)``
    (``wl``: the labelled examples' sampling probabilities, `label_weights`).

    Runs ``num_steps`` steps (a traced count: one compilation serves every chunk).
    Step ``s`` draws its batches and augmentations from ``fold_in(key, s)``, so a run
    is a function of the seed. ``sums`` holds the summed total loss, unlabelled loss and
    fraction of pool images above the confidence threshold over the chunk.
    """
    b, bu = cfg.batch_size, cfg.mu * cfg.batch_size
    fixmatch = method == "fixmatch"

    def loss_fn(params, key, xl, yl, xu, prior, learned):
        k_l, k_w, k_s, k_drop = jax.random.split(key, 4)
        xl = augment.weak(k_l, xl, max_shift=cfg.augment_shift, flip=cfg.augment_flip)
        if not fixmatch:
            logits = model.apply(params, xl, train=True, rngs={"dropout": k_drop})
            loss = jnp.mean(_cross_entropy(logits, yl))
            return loss, (jnp.zeros(()), jnp.zeros(()), prior, learned)
        xw = augment.weak(k_w, xu, max_shift=cfg.augment_shift, flip=cfg.augment_flip)
        xs = augment.strong(k_s, xu, max_shift=cfg.augment_shift, flip=cfg.augment_flip,
                            cutout=cfg.cutout, degrees=cfg.affine_degrees)
        k_drop, k_drop_w = jax.random.split(k_drop)
        # The weakly augmented view only makes the pseudo-labels: its forward pass runs on
        # stopped parameters, so the backward pass skips its rows (no model here couples the
        # rows of a batch: no batch norm): 192 of the 448 rows at the default batch and mu = 3.
        logits_w = model.apply(jax.lax.stop_gradient(params), xw, train=True, rngs={"dropout": k_drop_w})
        logits = model.apply(params, jnp.concatenate([xl, xs]), train=True, rngs={"dropout": k_drop})
        logits_l, logits_s = logits[:b], logits[b:]
        raw = jax.nn.softmax(jax.lax.stop_gradient(logits_w))
        probs = align(raw, prior) if cfg.distribution_alignment else raw
        pseudo = jnp.argmax(probs, axis=-1)
        confidence = jnp.max(probs, axis=-1)
        confident = jax.nn.one_hot(pseudo, probs.shape[-1]) * (confidence >= cfg.threshold)[:, None]
        tau = class_thresholds(cfg.threshold, learned)[pseudo] if cfg.adaptive_threshold else cfg.threshold
        mask = (confidence >= tau).astype(jnp.float32)
        loss_l = jnp.mean(_cross_entropy(logits_l, yl))
        loss_u = jnp.mean(mask * _cross_entropy(logits_s, pseudo))
        return loss_l + cfg.lambda_u * loss_u, (loss_u, jnp.mean(mask), jnp.mean(raw, axis=0),
                                                jnp.mean(confident, axis=0))

    def one_step(state: TrainState, key, xl, yl, wl, xu):
        k_step = jax.random.fold_in(key, state.step)
        k_il, k_iu, k_loss = jax.random.split(k_step, 3)
        if cfg.balance_labels:
            il = jax.random.choice(k_il, xl.shape[0], (b,), p=wl)
        else:
            il = jax.random.randint(k_il, (b,), 0, xl.shape[0])
        iu = jax.random.randint(k_iu, (bu,), 0, xu.shape[0])
        (loss, (loss_u, mask, batch_prior, batch_learned)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, k_loss, xl[il], yl[il], xu[iu] if fixmatch else xu[:0], state.pool_prior,
            state.learned)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        # The EMA decay ramps up as (1 + t) / (10 + t) (as tf.train.ExponentialMovingAverage
        # with num_updates), so that short runs average recent weights, not the init.
        t = state.step.astype(jnp.float32)
        decay = jnp.minimum(cfg.ema, (1.0 + t) / (10.0 + t))
        ema = optax.incremental_update(params, state.ema, 1.0 - decay)
        prior = PRIOR_DECAY * state.pool_prior + (1.0 - PRIOR_DECAY) * batch_prior
        learned = PRIOR_DECAY * state.learned + (1.0 - PRIOR_DECAY) * batch_learned
        return (TrainState(params, ema, opt_state, state.step + 1, prior, learned),
                jnp.stack([loss, loss_u, mask]))

    def train(state: TrainState, key, xl, yl, wl, xu, num_steps):
        def body(_, carry):
            state, sums = carry
            state, metrics = one_step(state, key, xl, yl, wl, xu)
            return state, sums + metrics

        return jax.lax.fori_loop(0, num_steps, body, (state, jnp.zeros(3, jnp.float32)))

    return jax.jit(train, donate_argnums=(0,))


@functools.lru_cache(maxsize=8)
def compiled_loop(model, cfg: StudentConfig):
    """The optimizer and jitted loop of a config, built once per process (a second
    student with the same config and data shapes reuses the compiled loop)."""
    tx = make_optimizer(cfg, cfg.steps)
    return tx, make_train_fn(model, tx, cfg, cfg.method)


def init_state(model, tx, image_shape, seed: int, num_classes: int) -> TrainState:
    init_key = keys.stream(keys.training_key(seed), keys.INIT_STREAM)
    params = model.init(init_key, jnp.zeros((1, *image_shape), jnp.float32))
    uniform = jnp.full((num_classes,), 1.0 / num_classes, jnp.float32)
    return TrainState(params, jax.tree.map(jnp.copy, params), tx.init(params), jnp.zeros((), jnp.int32),
                      uniform, jnp.copy(uniform))


# --------------------------------------------------------------------------- predictions and loading


@functools.lru_cache(maxsize=8)
def _predict_fn(model):
    return jax.jit(lambda params, x: jnp.argmax(model.apply(params, x), axis=-1))


def _probabilities_fn(model):
    return jax.jit(lambda params, x: jax.nn.softmax(model.apply(params, x), axis=-1))


def probabilities(model, params: Params, images: np.ndarray, batch_size: int = 500) -> np.ndarray:
    """The student's softmax for each image (fixed-size batches, the last padded)."""
    return _batched(_probabilities_fn(model), params, images, batch_size)


def predict(model, params: Params, images: np.ndarray, batch_size: int = 500) -> np.ndarray:
    """The student's predicted class for each image (fixed-size batches, the last padded)."""
    return _batched(_predict_fn(model), params, images, batch_size)


def _batched(fn, params: Params, images: np.ndarray, batch_size: int) -> np.ndarray:
    images = np.asarray(images, np.float32)
    out = []
    for start in range(0, images.shape[0], batch_size):
        chunk = images[start: start + batch_size]
        real = chunk.shape[0]
        if real < batch_size and images.shape[0] > batch_size:
            chunk = np.concatenate([chunk, np.zeros((batch_size - real, *chunk.shape[1:]), np.float32)])
        out.append(np.asarray(fn(params, jnp.asarray(chunk)))[:real])
    return np.concatenate(out) if out else np.zeros((0,), np.int64)


@dataclasses.dataclass(frozen=True)
class Student:
    """A trained student loaded from a run directory."""

    params: Params
    model: Any
    config: Config
    num_classes: int
    image_shape: tuple[int, ...]
    neighbours: Any = None  # `pate.programs.neighbour_student.NeighbourVote` ([student] neighbours), or None

    def predict(self, images: np.ndarray) -> np.ndarray:
        """The published predictor's class for each input: the network, averaged with the
        neighbour student when `[student] neighbours` is set (`pate.steps.student.with_neighbours`)."""
        if self.neighbours is None:
            return predict(self.model, self.params, images, self.config.student.eval_batch_size)
        from pate.programs.neighbour_student import combine

        probs = probabilities(self.model, self.params, images, self.config.student.eval_batch_size)
        return combine(probs, self.neighbours.votes(images))


def load_student(workdir: str | Path, *, record: str = rundir.STUDENT_JSON,
                 directory: str = rundir.STUDENT_DIR) -> Student:
    """The trained student of a run directory (the EMA weights); ``record`` and
    ``directory`` name another copy (round 2's ``student-round1``).

    Raises:
      PateError: the directory holds no finished `train-student` run.
    """
    where = directory
    record = checkpoints.read_record(workdir, record=record, directory=directory,
                                     noun="student", command="train-student", pronoun="it")
    info, config = record.info, record.config
    try:
        scfg = config_from_dict({"student": info["student"]}).student if "student" in info else config.student
    except (KeyError, TypeError, ValueError, AttributeError, PateError):
        raise record.refuse("student") from None
    model = models.make_model(scfg, record.num_classes)
    like = jax.eval_shape(lambda: model.init(keys.training_key(0), jnp.zeros((1, *record.image_shape))))
    directory = record.run / where
    params = checkpoints.verified_restore("student checkpoint", directory, info.get("checkpoint_sha256"),
                                          record.remake, lambda: checkpoints.restore_params(directory, like))
    return Student(params, model, config, record.num_classes, record.image_shape)
