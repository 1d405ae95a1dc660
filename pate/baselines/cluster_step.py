"""`pate dpsgd --distributed`: DP-SGD on JAX's multi-controller runtime, each process holding only
its own slice of the private records (`pate.programs.cluster.Cluster.own_records`).

Step t on every process: the Poisson sample of the whole split is drawn as one process draws it
(`pate.baselines.dpsgd.poisson_batch`: ``rng.random(N)``, of which each process keeps its own
records' draws), each process adds the clipped gradients of its own sampled records at the
current parameters (`pate.baselines.dpsgd.batch_gradient_sum`), process 0 alone adds the
Gaussian noise N(0, sigma^2 C^2 I) to its part (from its 128-bit `NOISE_STREAM`, the very noise
one process draws), and the parts are added across processes (`Cluster.sum_floats`: every process
gets the same float32 bits) before every process makes the same optimizer update from them.

The guarantee is one process's (`pate.baselines.dpsgd`): the released parameters are a function
of the noisy sums alone, each sum being the clipped gradients of a Poisson sample plus the noise
drawn once; every record's gradient is clipped to C by the process that holds it and counted
once (the slices are disjoint and cover the split). Each record's inclusion is an independent
draw at rate q: with one seed on every process the draws are one process's, record for record;
without one each process draws its own records' inclusion from its own OS entropy (still
independent Bernoulli(q) draws, record by record). Parameters start as process 0's
(`shared`). What differs from one process is the order in which float32 gradients are added
(by process, then by microbatch), so the parameters equal one process's up to rounding, not
bit for bit (tests/baselines/test_dpsgd_distributed.py bounds the difference).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree


def shared(params, cluster):
    """Process 0's `params` on every process, bit for bit (the others pass their own, of the same
    shapes)."""
    flat, unravel = ravel_pytree(params)
    return unravel(jnp.asarray(cluster.share_floats(np.asarray(flat, np.float32))))


def make_split_step(batch_sum: Callable, add_noise: Callable, tx: optax.GradientTransformation,
                    denominator: float, cluster, params) -> Callable:
    """The DP-SGD step of one process of several, ``step(params, opt_state, x, y, idx, valid,
    key)`` as `pate.baselines.dpsgd.make_step`'s (`idx`, `valid`: this process's sampled records):
    its clipped gradient sum ``batch_sum(params, x, y, idx, valid)``, on process 0 with the noise
    ``add_noise(sum, key)``, added across processes (`Cluster.sum_floats`), divided by
    `denominator`, one update by `tx`. `params`: the parameters' structure. Every process calls
    it at each step."""
    unravel = ravel_pytree(params)[1]
    leader = cluster.leader

    def own_part(params, x, y, idx, valid, key):
        total = batch_sum(params, x, y, idx, valid)
        if leader:  # the noise, drawn once, by process 0
            total = add_noise(total, key)
        return ravel_pytree(total)[0]

    def update(params, opt_state, flat):
        grad = jax.tree.map(lambda g: g / denominator, unravel(flat))
        updates, opt_state = tx.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    own_part, update = jax.jit(own_part), jax.jit(update, donate_argnums=(0, 1))

    def step(params, opt_state, x, y, idx, valid, key):
        total = cluster.sum_floats(np.asarray(own_part(params, x, y, idx, valid, key), np.float32))
        return update(params, opt_state, jnp.asarray(total))

    return step
