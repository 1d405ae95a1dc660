"""DP-FedSGD with distributed noise (`pate fedavg` with ``[fedavg] mechanism = "ddg"`` or ``"skellam"``):
each client's integer message and the server's step on the decoded sum.

Round t: every client computes its records' per-example gradients of the softmax regression at
the public model w, clips each to l2 norm C, quantises each (`quantised_sums`: round(s c_i), a
record whose squared norm exceeds the public bound S contributes zero), sums them exactly in
int32, adds its share (the record's: exact N_ℤ(0, σ²) for ``ddg``, Poisson(μ/n) − Poisson(μ/n) for
``skellam``) and sends the result mod M; the messages are summed exactly mod M and decoded; the
server steps w ← w − η · total/(s N). One local step of full-batch clipped gradient descent per
round: DP-FedSGD. Everything private is in the analysis record, a
`analysis.mechanisms.quantised_sum.QuantisedSum` (`ddg.DDGSum`, `skellam.SkellamSum`: their
docstrings prove the sensitivity, the shares' law, the modulus and the accounting); this module is
the JAX program and the round, the same for every record.

The secure sum here is the **in-process exact modular sum**: the same arithmetic Flower's SecAgg+
carries exactly for integers in its proved ranges (`pate.programs.secure_sum`), with the
clients and the server in one process. The server's step reads the decoded total only.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from analysis.mechanisms.quantised_sum import QuantisedSum


def quantised_sum(theta: jax.Array, x: jax.Array, y: jax.Array, *, clip: float, scale: float, bound: int,
                  bound2: int) -> jax.Array:
    """Σ_i q_i (int32, the shape of θ) over one client's records: q_i = round(s · clipped g_i),
    coordinates clamped to ±⌊√S⌋ and any q_i with ‖q_i‖₂² > S replaced by zero (the enforced
    bound of `analysis.mechanisms.quantised_sum`, exact in int32 since d⌊√S⌋² < 2^31)."""
    xt = jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], axis=1)
    r = jax.nn.softmax(xt @ theta) - jax.nn.one_hot(y, theta.shape[1], dtype=theta.dtype)
    gnorm = jnp.linalg.norm(r, axis=1) * jnp.linalg.norm(xt, axis=1)
    factor = jnp.minimum(1.0, clip / jnp.maximum(gnorm, 1e-12)) * scale
    g = factor[:, None, None] * xt[:, :, None] * r[:, None, :]
    g = jnp.where(jnp.isfinite(g), g, 0.0)  # a NaN would survive the clip and cast to any int32 (INT_MIN: q² wraps to 0)
    q = jnp.clip(jnp.rint(g), -bound, bound).astype(jnp.int32)
    ok = jnp.sum(q * q, axis=(1, 2)) <= bound2
    return jnp.sum(jnp.where(ok[:, None, None], q, 0), axis=0)


@functools.lru_cache(maxsize=8)
def quantised_sums(record: QuantisedSum) -> Callable:
    """The jitted ``sums(theta, xs, ys)``: every client's Σ_i q_i, (P, D+1, c) int32, one client at a
    time (`jax.lax.map`: one client's (I, D+1, c) per-example tensor in memory)."""
    q = record.quantiser
    one = lambda t, x, y: quantised_sum(t, x, y, clip=q.clip, scale=q.scale, bound=q.coordinate_bound,  # noqa: E731
                                        bound2=q.bound2)
    return jax.jit(lambda t, xs, ys: jax.lax.map(lambda xy: one(t, *xy), (xs, ys)))


def secure_round(record: QuantisedSum, learning_rate: float) -> Callable:
    """``round(theta, lam, xs, ys, source) -> (theta − η · noisy mean gradient, lam)``: the clients'
    messages (their sums plus shares, mod M), the exact sum mod M, and the server's step on the
    decoded total alone (``lam`` passes through: FedAvg has no dual)."""
    sums_fn = quantised_sums(record)

    def one_round(theta, lam, xs, ys, source):
        sums = np.asarray(sums_fn(jnp.asarray(theta, jnp.float32), xs, ys), np.int64)
        flat = sums.reshape(sums.shape[0], -1)
        messages = record.encode(flat, record.shares(source, flat.shape[1:]))  # what each client sends
        total = record.total(messages)  # the secure sum: the server sees this alone
        return theta - learning_rate * record.mean_gradient(total).reshape(theta.shape), lam

    return one_round
