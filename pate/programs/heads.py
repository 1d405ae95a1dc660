"""Round-2 teachers: a ridge classifier per teacher on a public feature map (the 2018
paper's interactive setting, `pate label --round 2`).

The feature map is the round-1 student's penultimate layer (`pate.programs.models.penultimate`),
reduced by a PCA fitted on the **public pool only** (`fit_pca`). Both are public: the
student is post-processing of round 1's release and the pool is public. Teacher t's head
is the closed-form ridge regression of the one-hot labels of its own shard on those
features (`fit_heads`, one program mapped over the teachers), so head t
is a function of shard t and public values only: replacing one private example changes
one head, hence one vote — the replace-one relation of every PATE bound here.

Every head is fitted, and votes, by the same program whatever the number of heads beside it
(`jax.lax.map` over the teacher axis, and each shard's features computed in batches of that
shard alone: `features`' ``group``), so a process holding one block of the teachers (`pate
label --round 2 --distributed`, `pate.programs.cluster`) makes the same heads and votes, bit for
bit, as one process holding them all.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from pate.programs.models import penultimate


def features(model, params, images: np.ndarray, batch_size: int = 500, project=None,
             group: int | None = None) -> np.ndarray:
    """The student's penultimate features of `images` (N, D), float32, in batches; with
    `project` (a `Pca`), projected on the fly (N, k), so the full features of a large
    split are never held at once. With `group` (N a multiple of it: the rows of consecutive
    shards), no batch crosses a group: each group's rows are computed by the same calls
    whichever groups come before or after it (a process's block of shards or all of them)."""
    fn = jax.jit(lambda p, x: penultimate(model, p, x))
    group = group or max(images.shape[0], 1)
    if images.shape[0] % group:
        raise ValueError(f"internal error: {images.shape[0]} rows are not groups of {group}")
    out = []
    for first in range(0, images.shape[0], group):
        for start in range(first, first + group, batch_size):
            rows = images[start: min(start + batch_size, first + group)]
            f = np.asarray(fn(params, jnp.asarray(rows, jnp.float32)))
            out.append(f if project is None else project(f))
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


@dataclasses.dataclass(frozen=True)
class Pca:
    """A PCA of public features: their mean, the top `dim` principal directions
    (D, dim) and one global scale (the root mean variance along them), so that the ridge
    penalty means the same whatever the feature map's units."""

    mean: np.ndarray
    components: np.ndarray
    scale: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, np.float64) - self.mean) @ self.components / self.scale).astype(np.float32)


def fit_pca(public: np.ndarray, dim: int) -> Pca:
    """The PCA of `public` features (N, D): eigenvectors of their covariance with the
    `dim` largest eigenvalues (at most D). Sees nothing but the rows it is given, which
    are the public pool's."""
    x = np.asarray(public, np.float64)
    mean = x.mean(axis=0)
    centred = x - mean
    cov = centred.T @ centred / max(x.shape[0] - 1, 1)
    values, vectors = np.linalg.eigh(cov)
    k = min(int(dim), x.shape[1])
    top = np.argsort(values)[::-1][:k]
    scale = float(np.sqrt(max(np.mean(values[top]), 1e-12)))
    return Pca(mean, vectors[:, top], scale)


@functools.partial(jax.jit, static_argnames=("num_classes",))
def fit_heads(z: jax.Array, y: jax.Array, ridge: float, *, num_classes: int) -> tuple[jax.Array, jax.Array]:
    """Closed-form ridge heads, one per teacher, mapped over the teacher axis.

    Args:
      z: (T, n, k) the features of each teacher's shard.
      y: (T, n) their labels.
      ridge: the penalty λ on the weights (the bias is not penalised).
      num_classes: C.

    Returns:
      ``(w, b)``: (T, k, C) weights and (T, C) biases; teacher t's scores for features x
      are ``x @ w[t] + b[t]``. Head t minimises ``|Z_t w + b − Y_t|² + λ|w|²`` on its own
      shard: ``w = (Z̄ᵀZ̄ + λI)⁻¹ Z̄ᵀȲ`` with Z̄, Ȳ centred on the shard, ``b = ȳ − z̄ w``.
    """

    def one(shard):
        zt, yt = shard
        targets = jax.nn.one_hot(yt, num_classes, dtype=jnp.float32)
        zm, ym = zt.mean(axis=0), targets.mean(axis=0)
        zc, yc = zt - zm, targets - ym
        gram = zc.T @ zc + ridge * jnp.eye(zt.shape[1], dtype=zt.dtype)
        w = jnp.linalg.solve(gram, zc.T @ yc)
        return w, ym - zm @ w

    return jax.lax.map(one, (z, y))  # one head's program, however many heads (module docstring)


@functools.partial(jax.jit, static_argnames=("num_classes",))
def head_votes(w: jax.Array, b: jax.Array, z: jax.Array, *, num_classes: int) -> jax.Array:
    """The vote histogram (Q, C) of the heads ``(w, b)`` on query features z (Q, k):
    each teacher votes for its highest score. No heads: a histogram of zeros."""
    return jax.nn.one_hot(_predictions(w, b, z), num_classes, dtype=jnp.int32).sum(axis=0)


@jax.jit
def _predictions(w: jax.Array, b: jax.Array, z: jax.Array) -> jax.Array:
    """Each head's top class on z, head by head (the same program however many heads)."""
    return jax.lax.map(lambda head: jnp.argmax(z @ head[0] + head[1], axis=-1), (w, b))


def head_predictions(w: jax.Array, b: jax.Array, z: jax.Array) -> np.ndarray:
    """Each teacher's predicted class on features z: (T, Q) (benchmarks: per-teacher accuracy)."""
    return np.asarray(_predictions(w, b, z))
