"""`pate dpsgd`: the DP-SGD baseline, trained on the same private train split as the
teachers and scored on the same evaluation split as the student.

DP-SGD (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Algorithm 1)
with Poisson sampling. Step t:

1. Sampling: every private training example joins the batch independently with
   probability q = batch_size / N (drawn on the host from a generator seeded with the
   run's 128-bit key); the batch size is random, its expectation is `batch_size`.
2. Per-example gradients with ``jax.vmap(jax.grad(loss_of_one_example))``, computed
   `microbatch` examples at a time (the padding of the last microbatch is masked out).
3. Clipping: each example's gradient g_i is scaled to ``g_i min(1, C / ||g_i||_2)``
   (the L2 norm over all parameters), so one example moves the sum by at most C.
4. Noise: ``(sum_i clipped g_i + N(0, sigma^2 C^2 I)) / (q N)``, dividing by the
   *expected* batch size (dividing by the realised size would depend on the data).
   The noise key is ``fold_in(key, t)`` of the ``NOISE_STREAM`` of an ``rbg`` key holding
   128 bits of OS entropy (`pate.programs.keys`).
5. SGD with momentum (optax) on the noisy gradient (post-processing).

Formal guarantee: with sigma from `analysis.baselines.sgd_accounting.calibrate_noise`, the released
parameters (and anything computed from them) are (eps, delta)-DP with respect to
adding or removing one example of the private training split, eps as accounted for
``steps`` Poisson-subsampled Gaussian steps (Abadi et al. 2016, Thm. 1, made tight by
the RDP analysis of Mironov, Talwar & Zhang 2019), q and ``steps`` being fixed in
advance (they follow from the size of the training split, taken as public). For
replace-one neighbours, the relation PATE's ε is stated for, ``dpsgd.json`` gives
``release_eps`` (= ``eps_replace_one``; the add/remove figure is ``eps_add_remove``), after
the data set's cumulative ``eps`` (`pate.baselines.release_step.result_head`)
(`analysis.baselines.sgd_accounting.epsilon_replace_one`: group privacy of
size 2 or the RDP weak triangle inequality, the smaller); with ``[dpsgd] relation =
"replace-one"`` the noise is calibrated so that this is at most the target. Only the
privacy of the training split is protected; the evaluation split and the public pool are not touched in training. Nothing else that depends on the private
data is written: no loss values, no realised batch sizes (a sum of batch sizes reveals
membership), no wall times (the training time grows with the realised batch sizes; they
are printed, not written), no seed.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.core.errors import PateError
from pate.store import checkpoints, digests, rundir
from analysis.baselines import sgd_accounting as dpsgd_accounting
from pate.programs import keys
from pate.config import Config, DpsgdConfig, config_to_dict
from pate.programs import learned_map, public_features
from pate.programs.models import Linear, TanhCNN, cnn_output_side
from pate.programs.student_training import predict
from pate.store import ledger as ledger_mod
from analysis.mechanisms import composition
from pate.baselines import cluster_step
from pate.baselines.release_step import (accuracy_fields, budgeted_ledger, private_splits, publish_lines,
                                         release_step, result_head, training_loop)

Params = Any

# --------------------------------------------------------------------------- models


def make_model(cfg: DpsgdConfig, model: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The network `model` names, checked against the input shape it will see."""
    if len(input_shape) == 1 and model != "linear":
        raise PateError(f"dpsgd.model = {model!r} needs images but the data are embeddings (rows of "
                        f"{input_shape[0]} features); set dpsgd.model = \"linear\"")
    if model in ("scatternet", "linear"):
        return Linear(num_classes)
    h, w = input_shape[:2]
    if min(cnn_output_side(h, cfg), cnn_output_side(w, cfg)) <= 0:
        raise PateError(f"dpsgd.conv_kernels/conv_strides/conv_padding shrink {h}x{w} images to "
                        "nothing (each layer is a convolution then a 2x2 stride-1 max pool); use "
                        "smaller kernels or strides")
    return TanhCNN(num_classes, tuple(cfg.conv_features), tuple(cfg.conv_kernels),
                   tuple(cfg.conv_strides), tuple(cfg.conv_padding), tuple(cfg.hidden))


# --------------------------------------------------------------------------- the DP step


def clipped_gradient_sum(loss_one: Callable, params: Params, x: jax.Array, y: jax.Array,
                         valid: jax.Array, clip_norm: float) -> Params:
    """sum_i valid_i g_i min(1, C / ||g_i||) with g_i = grad loss_one(params, x_i, y_i).

    Per-example gradients come from ``jax.vmap(jax.grad(loss_one))``; the norm is the L2
    norm over all parameters of one example's gradient. Each example's contribution has
    norm at most `clip_norm` (the sensitivity of the sum under add/remove-one).
    """
    grads = jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))(params, x, y)
    leaves = jax.tree.leaves(grads)
    sq = sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves)
    norms = jnp.sqrt(sq)
    scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-12)) * valid
    return jax.tree.map(lambda g: jnp.tensordot(scale, g, axes=1), grads)


def linear_clipped_gradient_sum(params: Params, x: jax.Array, y: jax.Array, valid: jax.Array,
                                clip_norm: float) -> Params:
    """`clipped_gradient_sum` of the softmax cross-entropy of `Linear` (one dense layer on the
    flattened inputs), in closed form: example i's gradient is ``x_i (p_i - e_{y_i})^T`` for the
    kernel and ``p_i - e_{y_i}`` for the bias (p_i the softmax of its logits), so its L2 norm is
    ``sqrt(||x_i||^2 + 1) ||p_i - e_{y_i}||`` and the clipped sum is ``X^T diag(s) (P - E)`` and
    ``sum_i s_i (p_i - e_{y_i})`` with ``s_i = valid_i min(1, C / norm_i)``: the same sum, each
    example's part of norm at most C, without holding a (batch, features, classes) array of
    per-example gradients (tested against `clipped_gradient_sum`)."""
    dense = params["params"]["Dense_0"]
    rows = x.reshape(x.shape[0], -1)
    logits = rows @ dense["kernel"] + dense["bias"]
    residual = jax.nn.softmax(logits) - jax.nn.one_hot(y, logits.shape[-1], dtype=logits.dtype)
    norms = jnp.sqrt(jnp.sum(rows ** 2, axis=1) + 1.0) * jnp.sqrt(jnp.sum(residual ** 2, axis=1))
    scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-12)) * valid
    weighted = residual * scale[:, None]
    return {"params": {"Dense_0": {"kernel": rows.T @ weighted, "bias": jnp.sum(weighted, axis=0)}}}


def noisy_mean(grad_sum: Params, key: jax.Array, noise_std: float, denominator: float) -> Params:
    """``(grad_sum + N(0, noise_std^2 I)) / denominator``, independent noise per
    coordinate, one subkey per parameter array (split from `key`).

    With `noise_std` = sigma C this is the Gaussian mechanism on a sum of sensitivity C:
    (alpha, alpha / (2 sigma^2))-RDP (Mironov 2017, Prop. 7) before subsampling.
    """
    leaves, treedef = jax.tree.flatten(grad_sum)
    subkeys = jax.random.split(key, len(leaves))
    noisy = [(g + noise_std * jax.random.normal(k, g.shape, g.dtype)) / denominator
             for g, k in zip(leaves, subkeys)]
    return jax.tree.unflatten(treedef, noisy)


def batch_gradient_sum(model: nn.Module, clip_norm: float) -> Callable:
    """``sum(params, x, y, idx, valid)``: the clipped gradient sum of one batch (`idx` (K, M): its
    row indices in `x`/`y` cut into K microbatches of M, padding rows with ``valid == 0``), the
    microbatches added in order by a scan. A `Linear` model's clipped sum is computed in closed
    form (`linear_clipped_gradient_sum`), any other by `clipped_gradient_sum`'s vmapped
    per-example gradients. Not jitted: a part of the programs that call it."""

    def loss_one(params, x, y):
        logits = model.apply(params, x[None])
        return optax.softmax_cross_entropy_with_integer_labels(logits, y[None])[0]

    def batch_sum(params, x, y, idx, valid):
        def body(acc, chunk):
            i, v = chunk
            if isinstance(model, Linear):
                g = linear_clipped_gradient_sum(params, x[i], y[i], v, clip_norm)
            else:
                g = clipped_gradient_sum(loss_one, params, x[i], y[i], v, clip_norm)
            return jax.tree.map(jnp.add, acc, g), None

        zero = jax.tree.map(jnp.zeros_like, params)
        total, _ = jax.lax.scan(body, zero, (idx, valid))
        return total

    return batch_sum


def make_step(model: nn.Module, tx: optax.GradientTransformation, clip_norm: float,
              noise_std: float, denominator: float) -> Callable:
    """The jitted DP-SGD step ``step(params, opt_state, x, y, idx, valid, key)``: the batch's
    clipped gradient sum (`batch_gradient_sum`; `idx`, `valid` as it takes them), its noisy
    mean (`noisy_mean`; `key` is this step's noise key), one optimizer update."""
    batch_sum = batch_gradient_sum(model, clip_norm)

    def step(params, opt_state, x, y, idx, valid, key):
        grad = noisy_mean(batch_sum(params, x, y, idx, valid), key, noise_std, denominator)
        updates, opt_state = tx.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return jax.jit(step, donate_argnums=(0, 1))


def poisson_batch(rng: np.random.Generator, n: int, rate: float, microbatch: int, rows: range | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """A Poisson sample of ``range(n)`` at `rate`, as (K, microbatch) indices and
    validity mask (K >= 1; rows past the sample are index 0 with mask 0).

    `rows`: the records this process holds (a distributed run: its slice of the split, `x`'s
    row i being record ``rows.start + i``); the indices are then its own sampled records, counted
    from ``rows.start``. The draw is the same ``rng.random(n)`` in every layout, so with one
    seed the processes' samples together are one process's sample, record for record.
    """
    draws = rng.random(n)
    rows = range(n) if rows is None else rows
    chosen = np.flatnonzero(draws[rows.start:rows.stop] < rate)
    k = max(1, math.ceil(chosen.size / microbatch))
    idx = np.zeros(k * microbatch, np.int32)
    valid = np.zeros(k * microbatch, np.float32)
    idx[: chosen.size] = chosen
    valid[: chosen.size] = 1.0
    return idx.reshape(k, microbatch), valid.reshape(k, microbatch)


# --------------------------------------------------------------------------- the command


@dataclasses.dataclass(frozen=True)
class DpsgdResult:
    """What `train_dpsgd` did (written to `dpsgd.json`, but for the wall time: printed only)."""

    model: str
    accuracy: float
    accuracy_test: float
    eval_points: int
    test_points: int
    eps: float
    target_eps: float
    delta: float
    noise_multiplier: float
    steps: int
    epochs: float
    batch_size: int
    wall_time_s: float
    eps_replace_one: float = math.nan
    target_relation: str = "add/remove-one"
    data_set: dict | None = None  # the ledger's summary with this release (`Ledger.summary`)
    features: str = ""  # the public map the model saw its inputs through ([dpsgd] features), or ""

    def summary(self) -> str:
        on = f" on the public map {self.features!r}" if self.features else ""
        return "\n".join([
            *publish_lines(self.data_set, rundir.DPSGD_JSON),
            f"dpsgd: {self.model}{on}, {self.steps} steps (expected batch {self.batch_size}, "
            f"{self.epochs:.1f} epochs), noise multiplier {self.noise_multiplier:.4f}",
            f"dpsgd accuracy on the evaluation split ({self.eval_points} points): {self.accuracy:.4f} "
            f"(whole test split, {self.test_points} points: {self.accuracy_test:.4f})",
            f"dpsgd eps = {self.eps:.4f} at delta = {self.delta:g} (add/remove-one neighbours); "
            f"replace-one neighbours: eps = {self.eps_replace_one:.4f}; target {self.target_eps:g} "
            f"({self.target_relation})",
            f"wall time: {self.wall_time_s:.1f} s (printed only: it depends on the private batch sizes)",
        ])


def train_dpsgd(config: Config, workdir: str | Path, *, seed: int | None = None,
                overwrite: bool = False, show_progress: bool = True,
                echo: Callable[[str], None] = print) -> DpsgdResult | None:
    """Trains `config.dpsgd.model` with DP-SGD at `config.dpsgd.eps`, `config.privacy.delta`.

    Reads the data set's train split (private: the teachers' shards together) and its
    evaluation split (and the public pool, scored as part of the whole test split);
    writes ``dpsgd.json`` and ``dpsgd/`` (orbax checkpoint of the parameters) into
    `workdir`, and ``config.toml`` when the directory has none (an existing run's config
    is left alone). ScatterNet features, and the rows of a public map (``[dpsgd] features``),
    are cached in ``dpsgd-features/`` (private).

    In a distributed run (`jax.distributed` started: `pate dpsgd --distributed`) every process
    reads only its own slice of the private records (`pate.programs.cluster.Cluster.own_records`)
    and adds the clipped gradients of its sampled records; the sums are added across processes
    before each update (`pate.baselines.cluster_step`), process 0 alone draws the noise,
    charges the ledger and writes, and every other process returns None.

    Args:
      config: the resolved config.
      workdir: the run directory.
      seed: None (fresh OS entropy: anything released) or an integer in [0, 2**128) for
        reproducible research; never written.
      overwrite: replace an existing ``dpsgd.json``.
      show_progress: draw a progress bar.
      echo: where status lines go.

    Raises:
      PateError: bad eps/delta/seed, missing data, an existing result without
        `overwrite`, a run directory of another data set, an image too small for the
        CNN, a map whose weights are missing or that does not take the data's inputs,
        a non-finite parameter after training; another process of a distributed run failed
        (`pate.programs.cluster.Stopped`).
    """
    from pate.programs import agreement
    from pate.programs.cluster import Cluster

    cluster = Cluster()
    with cluster.together():  # one failure stops every process, each with one line
        # Before any record is read: process 0's data set and settings (clip_norm, eps, the map), or all stop.
        agreement.agree(cluster, config, data=True)
        if not cluster.leader:
            return _contribute(config, cluster, seed, echo)
        return _train(config, workdir, seed, overwrite, show_progress, echo, cluster)


def _train(config: Config, workdir, seed, overwrite: bool, show_progress: bool, echo, cluster) -> DpsgdResult:
    """`train_dpsgd` on process 0 (the only process of a run that is not distributed)."""
    start = time.time()
    cfg = config.dpsgd
    delta = config.privacy.delta
    with release_step("dpsgd", workdir, config, cfg.eps, overwrite=overwrite, echo=echo) as door:
        key = keys.noise_key(seed)  # checks the seed before any work
        splits, rows, n = own_splits(config, cluster)
        plan = Plan.of(cfg, n, delta)
        # The model is a release of the private train split (`pate.store.ledger`).
        book = budgeted_ledger(config, plan.cost, "this DP-SGD model")
        cluster.agree()  # process 0 passed its checks: every process maps its own records
        feature_start = time.time()
        train_x, scale, view, pool_rows = train_inputs(config, splits, door.run / rundir.DPSGD_FEATURES_DIR,
                                                       cluster, show_progress)
        test_x, test_y = _test_inputs(config, splits, door.run / rundir.DPSGD_FEATURES_DIR, view, scale, pool_rows)
        feature_time = time.time() - feature_start
        model = make_model(cfg, cfg.model, splits.num_classes, tuple(train_x.shape[1:]))
        params, train_time = fit(model, cfg, plan, train_x, splits.train_y, key, delta, show_progress, echo,
                                 cluster, rows)
        result = dataclasses.replace(
            _score(model, params, cfg, plan, test_x, test_y, splits.pool_x.shape[0], delta, start),
            data_set=book.summary(delta, extra=[plan.cost]), features=cfg.features)
        checkpoints.save_params(door.out / rundir.DPSGD_DIR, params, then="run `pate dpsgd --overwrite` again")
        door.out.write_json(rundir.DPSGD_JSON, _record(config, plan, result, params, train_x, seed,
                                                       splits.num_classes, scale), config)
        # One process holds the whole split; process 0 of several reads it as a stream for its digest.
        data_digest = (book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()) if cluster.count == 1
                       else book.keyed_split_digest(config.data))
        door.charge(book, "dpsgd", plan.cost, run=door.run.path, budget=config.privacy.total_budget, delta=delta,
                    subject="dpsgd:" + digests.file_digest(door.out / rundir.DPSGD_JSON),
                    mechanism={"name": "dpsgd", "model": cfg.model, "describe": f"DP-SGD {cfg.model}"
                               + (f" on the public map {cfg.features}" if cfg.features else "") + f": "
                               f"{plan.steps} steps, q {plan.rate:.4g}, sigma {plan.noise_multiplier:.4g}"},
                    data_digest=data_digest)
    echo(ledger_mod.cumulative_line(book, delta))
    echo(f"dpsgd: training {train_time:.1f} s, features {feature_time:.1f} s (not written to "
         f"{rundir.DPSGD_JSON}: the training time grows with the private batch sizes)")
    return result


def _contribute(config: Config, cluster, seed: int | None, echo) -> None:
    """`train_dpsgd` on a process other than 0 of a distributed run: it reads its own slice of the
    private records, makes the checks process 0 makes, and takes its part in every step (its
    records' clipped gradients, `pate.baselines.cluster_step`); it takes no lock, draws no noise,
    charges nothing and writes nothing (process 0 does, once)."""
    cfg = config.dpsgd
    key = keys.noise_key(seed)  # refuses a bad seed as process 0 does
    splits, rows, n = own_splits(config, cluster)
    plan = Plan.of(cfg, n, config.privacy.delta)
    cluster.agree()  # process 0 passed its checks
    train_x = train_inputs(config, splits, None, cluster)[0]  # nothing of it written
    model = make_model(cfg, cfg.model, splits.num_classes, tuple(train_x.shape[1:]))
    fit(model, cfg, plan, train_x, splits.train_y, key, config.privacy.delta, False, lambda line: None, cluster, rows)
    echo(f"process {cluster.index} of {cluster.count}: the clipped gradients of records {rows.start}-{rows.stop - 1} "
         f"in {plan.steps} steps ({jax.local_device_count()} device(s)); process 0 drew the noise and writes the model")


def own_splits(config: Config, cluster) -> tuple:
    """``(splits, rows, n)``: the data set cut as every command cuts it, its private train split
    this process's records `rows` of the split's `n` (one process: all of them; one of several:
    its own slice alone, `pate.programs.cluster.Cluster.own_records`), after the checks made
    before anything is charged: a learned map's weights (before any data is read), the map
    against the inputs (images or embeddings), the model against their shape.

    Raises:
      PateError: a check failed, the data are missing or damaged, or this process of several
        holds no record.
    """
    cfg = config.dpsgd
    if cfg.features:  # a learned map's weights, before any data is read
        public_features.check_ready(cfg.features, public_features.MapSettings.of(config))
    if cluster.count == 1:
        splits = private_splits(config)
        n = int(splits.train_x.shape[0])
        rows = range(n)
    else:
        splits, first, n = cluster.own_records(config.data, config.data.public_size)
        rows = range(first, first + int(splits.train_x.shape[0]))
        if not rows:  # it would add padding rows' gradients, masked but not finite, to the sum
            raise PateError(f"process {cluster.index} of {cluster.count} holds none of the {n} private records "
                            f"(slices of {-(-n // cluster.count)}): run DP-SGD on fewer processes")
    if cfg.features:  # images against embeddings, before anything is written
        public_features.check_input(cfg.features, splits.pool_x, "dpsgd.features")
    elif cfg.model != "linear":  # refused on embeddings before anything is charged
        make_model(cfg, cfg.model, splits.num_classes, tuple(splits.train_x.shape[1:]))
    return splits, rows, n


@dataclasses.dataclass(frozen=True)
class Plan:
    """The DP-SGD schedule fixed before training: Poisson rate, steps, noise, cost."""

    n: int  # private training points
    batch_size: int  # expected batch
    learning_rate: float
    rate: float
    steps: int
    noise_multiplier: float
    cost: composition.Cost
    relation: str  # the neighbouring relation the target eps holds for

    @classmethod
    def of(cls, cfg: DpsgdConfig, n: int, delta: float) -> "Plan":
        """The schedule of `cfg` on `n` points, its noise calibrated to ``cfg.eps`` at `delta`."""
        batch_size, learning_rate, epochs = cfg.training()
        rate = min(1.0, batch_size / n)
        steps = max(1, round(epochs / rate))
        relation = dpsgd_accounting.RELATION_REPLACE if cfg.relation == "replace-one" else dpsgd_accounting.RELATION
        noise_multiplier = dpsgd_accounting.calibrate_noise(cfg.eps, delta, rate, steps, cfg.accountant,
                                                            relation=relation)
        return cls(n, batch_size, learning_rate, rate, steps, noise_multiplier,
                   composition.dpsgd_cost(rate, noise_multiplier, steps), relation)


def train_inputs(config: Config, splits, cache: Path | None, cluster, show_progress: bool = False):
    """(train_x, scale, view, pool_rows): this process's private records as the model sees them:
    pixels (or rows) as given, ScatterNet features, or each input's row under the public map
    ``[dpsgd] features`` (`view`, else None) times `scale` (`public_scale` of the pool's rows
    `pool_rows`, which process 0 computes and shares, bit for bit; 1 and None otherwise). Features
    of private records are cached in `cache` (a private folder of the run, made owner-only when the
    first rows are written: `pate.store.rundir.cached_rows`; None: not cached)."""
    cfg = config.dpsgd
    if cfg.features:
        view = public_features.map_view(config, cfg.features, splits.pool_x, cache, key="dpsgd.features",
                                        show_progress=show_progress)
        train_x = view(splits.train_x, "train")
        pool_rows = view(splits.pool_x, "pool") if cluster.leader else None
        scale = public_scale(pool_rows) if cluster.leader else np.float32(0)
        scale = cluster.share_floats(np.array([scale], np.float32))[0]  # the public pool's alone
        train_x *= scale
        return train_x, scale, view, pool_rows
    if cfg.model != "scatternet":
        return splits.train_x, np.float32(1), None, None
    from pate.programs import scattering

    return (scattering.features(splits.train_x, cfg.scattering_j, cfg.scattering_l, cfg.groups, cache, "train"),
            np.float32(1), None, None)


def _test_inputs(config: Config, splits, cache: Path, view, scale, pool_rows) -> tuple[np.ndarray, np.ndarray]:
    """(test_x, test_y): the test split (the pool and the evaluation split together) as the model
    sees it (`train_inputs`'s `view`, `scale` and the pool's rows under the view), its features
    cached in `cache`."""
    cfg = config.dpsgd
    test_y = np.concatenate([splits.pool_y, splits.eval_y])
    if view is not None:
        test_x = np.concatenate([pool_rows, view(splits.eval_x, "eval")])
        test_x *= scale
        return test_x, test_y
    test_x = np.concatenate([splits.pool_x, splits.eval_x])
    if cfg.model != "scatternet":
        return test_x, test_y
    from pate.programs import scattering

    return scattering.features(test_x, cfg.scattering_j, cfg.scattering_l, cfg.groups, cache, "test"), test_y


def public_scale(pool_rows: np.ndarray) -> np.float32:
    """The one factor that brings the public pool's rows (n, F) to a mean squared coordinate of 1:
    ``(mean_i ||x_i||^2 / F)^(-1/2)``. The group-normalised ScatterNet features have that scale by
    construction (each group of each example standardised), and `[dpsgd]`'s `clip_norm` and learning
    rates were set for it; a map's rows (a concatenation's parts of norm ~1, an encoder's
    activations) would otherwise be clipped and stepped at an arbitrary scale. A function of
    the public pool alone: every private row is then multiplied by a public constant."""
    x = np.asarray(pool_rows, np.float64).reshape(len(pool_rows), -1)
    mean_square = float(np.mean(np.square(x))) if x.size else 0.0
    return np.float32(1.0 / np.sqrt(mean_square) if mean_square > 0 else 1.0)


def fit(model, cfg: DpsgdConfig, plan: Plan, train_x, train_y, key, delta: float, show_progress: bool,
        echo, cluster, rows: range) -> tuple[Params, float]:
    """DP-SGD itself: parameters from the key's `INIT_STREAM` (process 0's on every process),
    Poisson batches from its `DATA_STREAM` (this process's records `rows` of them, `poisson_batch`),
    noise from its `NOISE_STREAM` (`pate.programs.keys`; process 0's alone). Returns host
    parameters and the training time."""
    n, rate = plan.n, plan.rate
    params = model.init(keys.stream(key, keys.INIT_STREAM), jnp.zeros((1, *train_x.shape[1:]), jnp.float32))
    num_params = int(sum(p.size for p in jax.tree.leaves(params)))
    tx = optax.sgd(plan.learning_rate, momentum=cfg.momentum if cfg.momentum > 0 else None)
    noise_std = plan.noise_multiplier * cfg.clip_norm
    if cluster.count == 1:
        dp_step = make_step(model, tx, cfg.clip_norm, noise_std, rate * n)
    else:
        params = cluster_step.shared(params, cluster)  # process 0's initialisation on every process
        dp_step = cluster_step.make_split_step(
            batch_gradient_sum(model, cfg.clip_norm), lambda g, k: noisy_mean(g, k, noise_std, 1.0), tx, rate * n,
            cluster, params)
    opt_state = tx.init(params)
    rng = keys.numpy_generator(keys.stream(key, keys.DATA_STREAM))
    k_noise = keys.stream(key, keys.NOISE_STREAM)
    x_dev, y_dev = jnp.asarray(train_x), jnp.asarray(train_y)
    microbatch = min(cfg.microbatch, max(1, plan.batch_size))
    spread = f" ({cluster.count} processes, each its own slice)" if cluster.count > 1 else ""
    echo(f"dpsgd: {cfg.model} ({num_params} parameters) on {n} private training points{spread}; "
         f"{plan.steps} steps of Poisson rate {rate:.5f} (expected batch {rate * n:.0f}), "
         f"noise multiplier {plan.noise_multiplier:.4f} for eps {cfg.eps:g} ({plan.relation}) at delta {delta:g} "
         f"({cfg.accountant.upper()})")

    def dp_step_at(t, state):
        idx, valid = poisson_batch(rng, n, rate, microbatch, rows)
        return dp_step(*state, x_dev, y_dev, jnp.asarray(idx), jnp.asarray(valid), jax.random.fold_in(k_noise, t))

    (params, _), seconds = training_loop(
        "dpsgd step", plan.steps, dp_step_at, (params, opt_state), show_progress=show_progress, every=10,
        diverged=f"DP-SGD diverged (non-finite parameters); lower dpsgd.{cfg.model}_learning_rate and run "
                 "again with --overwrite")
    return params, seconds


def _score(model, params, cfg: DpsgdConfig, plan: Plan, test_x, test_y, pool: int, delta: float,
           start: float) -> DpsgdResult:
    """The model's accuracy (evaluation split; whole test split) and its ε."""
    eps = dpsgd_accounting.epsilon(plan.noise_multiplier, plan.rate, plan.steps, delta, cfg.accountant)
    eps_replace = dpsgd_accounting.epsilon_replace_one(plan.noise_multiplier, plan.rate, plan.steps, delta,
                                                       cfg.accountant)
    pred = predict(model, params, test_x, cfg.eval_batch_size)
    return DpsgdResult(model=cfg.model, accuracy=float(np.mean(pred[pool:] == test_y[pool:])),
                       accuracy_test=float(np.mean(pred == test_y)), eval_points=int(test_y.size - pool),
                       test_points=int(test_y.size), eps=eps, target_eps=cfg.eps, target_relation=plan.relation, delta=delta,
                       noise_multiplier=plan.noise_multiplier, steps=plan.steps, epochs=plan.steps * plan.rate,
                       batch_size=plan.batch_size, wall_time_s=time.time() - start, eps_replace_one=eps_replace)


def _record(config: Config, plan: Plan, result: DpsgdResult, params, train_x, seed, num_classes: int,
            scale: float = 1.0) -> dict:
    """dpsgd.json: nothing that depends on the private data but the model's figures. It leads
    with the data set's replace-one figure, then this model's own (replace-one, the relation
    PATE's ε is stated for); the add/remove figure DP-SGD papers report is ``eps_add_remove``."""
    cfg = config.dpsgd
    return {
        **result_head(result.data_set, result.eps_replace_one, cfg.eps, result.delta,
                      dpsgd_accounting.RELATION_REPLACE, plan.cost),
        "target_relation": plan.relation,
        "eps_add_remove": result.eps,
        "eps_replace_one": result.eps_replace_one,
        "model": cfg.model,
        **accuracy_fields(result.accuracy, result.eval_points, result.accuracy_test, result.test_points),
        "neighbouring_relation_note": dpsgd_accounting.RELATION_NOTE,
        "accountant": cfg.accountant,
        "noise_multiplier": plan.noise_multiplier,
        "clip_norm": cfg.clip_norm,
        "epochs": plan.steps * plan.rate,
        "steps": plan.steps,
        "batch_size": plan.batch_size,
        "sampling": "poisson",
        "sampling_rate": plan.rate,
        "train_points": plan.n,
        "optimizer": "sgd",
        "learning_rate": plan.learning_rate,
        "momentum": cfg.momentum,
        "microbatch": min(cfg.microbatch, max(1, plan.batch_size)),
        "num_params": int(sum(p.size for p in jax.tree.leaves(params))),
        "noise_key": f"{keys.KEY_BITS}-bit {keys.KEY_IMPL} key, "
                     + ("OS entropy" if seed is None else "research seed (not recorded)"),
        "features": (_map_description(config, scale) if cfg.features
                     else "scattering J={} L={}, per-example group norm G={}".format(
                         cfg.scattering_j, cfg.scattering_l, cfg.groups) if cfg.model == "scatternet"
                     else "the rows as given" if train_x.ndim == 2 else "pixels"),
        "features_map": cfg.features,
        "features_scale": float(scale),
        "dpsgd": config_to_dict(config)["dpsgd"],
        "dataset": config.data.name,
        "num_classes": num_classes,
        "input_shape": list(train_x.shape[1:]),
        "backend": jax.default_backend(),
    }


def _map_description(config: Config, scale: float) -> str:
    """dpsgd.json's account of a public map (public values only: the map, its settings, the
    pool's scale)."""
    fg = config.fine_grained
    described = " + ".join(part.describe for part in public_features.parts(config.dpsgd.features))
    settings = []
    if "scattering" in config.dpsgd.features.split("+"):
        settings.append(f"scattering J={fg.scattering_j} L={fg.scattering_l}, per-example group norm G={fg.groups}")
    if "learned" in config.dpsgd.features.split("+"):
        settings.append(f"learned weights sha256 {learned_map.check_weights(config.features.weights)[:12]}")
    whitened = (f"each part's top {fg.pca} principal directions whitened, to unit norm, " if config.features.whiten
                else "")
    return (f"the public map {config.dpsgd.features!r} ({described}{'; ' if settings else ''}{'; '.join(settings)}), "
            f"{whitened}each row times {scale:.6g} (fitted on the public pool)")
