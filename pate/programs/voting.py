"""The ensemble's votes: each teacher's predicted class, or the vote histogram reduced
on the devices (across the mesh when the teachers are sharded), one fixed-size batch of
images at a time; and the plurality vote's accuracy.

The histogram of the queried points is what `pate label` releases labels from
(`votes.npz`, private); `pate train-teachers` evaluates each teacher and the plurality
vote with the same functions.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.errors import PateError
from pate.programs.placement import Placement, placed, teacher_chunk, to_host

Params = Any


_PREDICT_FNS: dict = {}


def _predict_fn(model, num_classes: int | None, placement: Placement, chunk: int):
    """Jitted `(params, x, mask) -> predictions (T, n)` or votes (n, C), cached. A teacher
    whose logits for an input are not all finite predicts -1 there (no class; no vote).

    Teachers run `chunk` at a time on each device (0: all at once); with a mesh each
    device predicts for its own teachers and the votes are summed across devices.
    """
    key = (model, num_classes, placement.mesh, chunk)
    if key in _PREDICT_FNS:
        return _PREDICT_FNS[key]

    def local(params, x, mask):
        def one(p):
            logits = model.apply(p, x)
            finite = jnp.all(jnp.isfinite(logits), axis=-1)  # argmax of NaN would be class 0
            return jnp.where(finite, jnp.argmax(logits, axis=-1), -1).astype(jnp.int32)

        if chunk and chunk < mask.shape[0]:
            preds = jax.lax.map(one, params, batch_size=chunk)
        else:
            preds = jax.vmap(one)(params)  # (T_local, n)
        if num_classes is None:
            return preds
        onehot = jax.nn.one_hot(preds, num_classes, dtype=jnp.int32)
        votes = jnp.einsum("tnc,t->nc", onehot, mask)
        if placement.mesh is not None:
            votes = jax.lax.psum(votes, "teacher")  # reduce the vote across the mesh
        return votes

    fn = local
    if placement.mesh is not None:
        spec, rep = jax.sharding.PartitionSpec("teacher"), jax.sharding.PartitionSpec()
        fn = jax.shard_map(local, mesh=placement.mesh, in_specs=(spec, rep, spec),
                           out_specs=spec if num_classes is None else rep)
    _PREDICT_FNS[key] = jax.jit(fn)
    return _PREDICT_FNS[key]


def _batches(images: np.ndarray, batch_size: int):
    """Fixed-size batches (the last zero-padded) and the count of real rows in each."""
    images = np.asarray(images, dtype=np.float32)
    for start in range(0, images.shape[0], batch_size):
        chunk = images[start: start + batch_size]
        real = chunk.shape[0]
        if real < batch_size:
            pad = np.zeros((batch_size - real, *chunk.shape[1:]), np.float32)
            chunk = np.concatenate([chunk, pad])
        yield jnp.asarray(chunk), real


def teacher_predictions(params: Params, model, images: np.ndarray, batch_size: int = 100,
                        placement: Placement | None = None, chunk: int = 0) -> np.ndarray:
    """Each teacher's predicted class for each image.

    Args:
      params: stacked teacher parameters, leading axis T (host or device arrays).
      model: the flax module they belong to.
      images: (n, H, W, C) float32.
      batch_size: images per call (bounds memory: T * batch_size activations).
      placement: where the teachers run; default: all devices. When given, `params`
        must already be placed by it (padded).
      chunk: teachers evaluated together per device (0: automatic, see `teacher_chunk`).

    Returns:
      int32 (T, n); -1 where a teacher's logits are NaN/inf (no prediction: scored wrong).
    """
    params, placement = placed(params, placement)
    fn = _predict_fn(model, None, placement, teacher_chunk(chunk, placement.platform))
    mask = placement.mask()
    out = [to_host(fn(params, xb, mask))[:, :real] for xb, real in _batches(images, batch_size)]
    preds = np.concatenate(out, axis=1) if out else np.zeros((placement.padded, 0), np.int32)
    return preds[: placement.num_teachers]


def predict_votes(params: Params, model, images: np.ndarray, num_classes: int,
                  batch_size: int = 100, placement: Placement | None = None,
                  chunk: int = 0) -> np.ndarray:
    """The vote histogram of the ensemble on `images`: how many teachers predict each class.

    Predictions are reduced over the teacher axis on the devices (across the mesh when
    sharded), one batch of `batch_size` images at a time, so memory stays bounded by
    `T * batch_size` activations and the host only sees counts.

    Args:
      params: stacked teacher parameters, leading axis T.
      model: the flax module they belong to.
      images: (n, H, W, C) float32 in [0, 1].
      num_classes: number of classes C.
      batch_size: images per device call.
      placement, chunk: as in `teacher_predictions`.

    Returns:
      int32 (n, C); every row sums to T.

    Raises:
      PateError: a teacher's logits were NaN/inf for some input (argmax would have voted class
        0 there): no vote is returned, so none is released.
    """
    params, placement = placed(params, placement)
    fn = _predict_fn(model, num_classes, placement, teacher_chunk(chunk, placement.platform))
    mask = placement.mask()
    out = [to_host(fn(params, xb, mask))[:real] for xb, real in _batches(images, batch_size)]
    if not out:
        return np.zeros((0, num_classes), np.int32)
    votes = np.concatenate(out, axis=0).astype(np.int32)
    short = int(np.count_nonzero(votes.sum(axis=1) != placement.num_teachers))
    if short:
        raise PateError(_non_finite_message(model, short, len(votes)))
    return votes


def _non_finite_message(model, inputs: int, total: int) -> str:
    """One line: the teachers' logits were NaN/inf at evaluation, naming a user's module."""
    inner = getattr(model, "inner", None)  # pate.programs.user_model.UserModule
    if inner is not None:
        cls = type(inner)
        return (f"the teachers' module {cls.__module__}:{cls.__qualname__} gave NaN/inf logits for {inputs} of "
                f"{total} inputs at evaluation (train=False); no vote is released: check what its __call__ does "
                "when train is False (a division, log or normalisation of zero) and that the trained parameters "
                "are finite, then train the teachers again with --overwrite")
    return (f"the teachers gave NaN/inf logits for {inputs} of {total} inputs at evaluation; no vote is released: "
            "check the inputs are finite, then train the teachers again with --overwrite (a lower "
            "teachers.learning_rate)")


def block_votes(params: Params, model, images: np.ndarray, num_classes: int,
                batch_size: int = 100, chunk: int = 0) -> np.ndarray:
    """The vote counts of the teachers this process holds (all of them, or its block of a
    distributed ensemble), on this process's devices only: no collective, so the processes
    of a cluster vote independently and `pate.programs.cluster.Cluster.sum_counts` adds the
    counts up. An empty block (more processes than teachers) counts zeros.

    Returns:
      int32 (n, C); every row sums to the number of teachers in `params`.
    """
    held = int(jax.tree.leaves(params)[0].shape[0])
    if held == 0:
        return np.zeros((len(images), num_classes), np.int32)
    placement = Placement(held, jax.local_devices())
    return predict_votes(placement.put(params), model, images, num_classes, batch_size, placement, chunk)


def votes_from_predictions(preds: np.ndarray, num_classes: int) -> np.ndarray:
    """(T, n) class predictions → (n, C) int32 vote histogram."""
    preds = np.asarray(preds)
    return (preds[:, :, None] == np.arange(num_classes)).sum(axis=0).astype(np.int32)


def plurality_accuracy(votes: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy of the plurality vote (ties go to the lowest class index)."""
    return float(np.mean(np.argmax(votes, axis=1) == labels)) if len(labels) else float("nan")
