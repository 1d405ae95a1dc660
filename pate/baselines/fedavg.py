"""`pate fedavg`: federated learning with output perturbation on the same private train
split as the teachers (each client a shard), scored on the same evaluation split as the
student, accounted over all rounds.

Round t (the server's model w is public: it is computed from noisy messages only):

- ``fedavg``: each client p takes `local_steps` full-batch steps of plain gradient
  descent from w, every per-example gradient clipped (l1 for Laplace, l2 for Gaussian,
  `clipped_mean_gradient`), and sends w_p + noise; the server averages the messages.
- ``iadmm``: each client sends z_p = w + (λ_p − ḡ_p(w))/ρ + noise; the server sets
  w ← mean_p(z̃_p − λ_p/ρ) and λ_p ← λ_p + ρ(w − z̃_p) from the noisy z̃_p (so λ_p is
  post-processing of released values and never needs to be sent).

Formal guarantee: every message has noise calibrated to the sensitivity of
`analysis.baselines.fedavg_privacy` (derived there: per-example clipping enforced, K local steps
counted with the change of the other examples' gradients along the trajectory, the dual
from the transcript) at the per-round ε̄ (Laplace) or μ (Gaussian) for which R rounds
compose to ``eps`` at ``[privacy] delta``; the released model (and anything computed from
it) is then (eps, delta)-DP for **replace-one** neighbours of the private train split
(the relation of PATE and of the ledger). The charge to the ledger is that composition.
The noise draws from `analysis.core.noise.NoiseSource` (128-bit OS entropy, or a research
seed, never written). With ``[fedavg] grid = K`` > 0 (the default), every message is
released exactly on a public grid, γ·(round(m/γ) + Y) with Y exact discrete Laplace
(Laplace) or exact discrete Gaussian (Gaussian) noise, with the sensitivity in grid units
including rounding (`analysis.baselines.fedavg_privacy`, "Messages on a grid" and "Gaussian
messages on a grid"), so no floating-point low bit carries the data (Mironov 2012); the
record `fp.GRIDS[mechanism]` builds says how. Only with ``grid = 0`` is the noise float64,
not defended against that attack.

With ``[fedavg] mechanism = "ddg"`` or ``"skellam"`` (FedAvg, one local step: DP-FedSGD) no client's
message is noised on its own: each sends its records' quantised clipped gradients summed, plus a
share of noise (ddg: exact discrete Gaussian; skellam: Poisson − Poisson), mod M; an exact secure
sum shows the server the total alone, ONE central release (`analysis.mechanisms.ddg`,
`analysis.mechanisms.skellam`, `pate.baselines.secure_fedavg`), and the rounds are charged as that
central release's composition. The record (`ddg.DDGSum`, `skellam.SkellamSum`) says how: its noise,
its cost, its texts; `train_rounds` asks the plan for its round and tests no name.

Nothing else that depends on the private data is written: no losses, no per-round
values, no wall times (printed only); `fedavg.json` holds the released model's accuracy on
the public evaluation split and public parameters.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from analysis.mechanisms import composition
from analysis.baselines import fedavg_privacy as fp
from analysis.core.errors import OptionError, PateError
from analysis.core.noise import NoiseSource
from pate.store import checkpoints, digests, rundir
from pate.store import ledger as ledger_mod
from pate.config import Config, config_to_dict
from pate.programs.models import Linear
from pate.programs.projection import project, projected_box, public_projection
from pate.programs.student_training import predict
from analysis.mechanisms import ddg, skellam
from analysis.mechanisms.quantised_sum import QuantisedSum
from pate.baselines import secure_fedavg
from pate.baselines.release_step import (accuracy_fields, budgeted_ledger, private_splits, publish_lines,
                                         release_step, result_head, training_loop)

#: The `analysis.core.noise` stream of this step's noise (labels use 0, the sanitised release 1).
NOISE_STREAM = 2


# --------------------------------------------------------------------------- one client


def clipped_mean_gradient(theta: jax.Array, x: jax.Array, y: jax.Array, clip: float, norm: str) -> jax.Array:
    """(1/I) Σ_i g_i min(1, C/‖g_i‖) for softmax regression θ = [W; b] ((D+1) × c).

    The per-example gradient is the rank-one (p_i − e_{y_i}) x̃_iᵀ with x̃ = [x; 1], so its
    l1 norm is ‖p_i − e_y‖₁‖x̃_i‖₁ and its l2 (Frobenius) norm ‖p_i − e_y‖₂‖x̃_i‖₂: the
    clipped sum is one matrix product, no per-example gradient is stored.
    """
    xt = jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], axis=1)
    r = jax.nn.softmax(xt @ theta) - jax.nn.one_hot(y, theta.shape[1], dtype=theta.dtype)
    if norm == "l1":
        gnorm = jnp.sum(jnp.abs(r), axis=1) * jnp.sum(jnp.abs(xt), axis=1)
    else:
        gnorm = jnp.linalg.norm(r, axis=1) * jnp.linalg.norm(xt, axis=1)
    scale = jnp.minimum(1.0, clip / jnp.maximum(gnorm, 1e-12))
    return xt.T @ (r * scale[:, None]) / x.shape[0]


def fedavg_message(theta, x, y, *, clip: float, learning_rate: float, local_steps: int, norm: str):
    """The model client (x, y) sends in a FedAvg round (before noise)."""
    def step(t, _):
        return t - learning_rate * clipped_mean_gradient(t, x, y, clip, norm), None

    out, _ = jax.lax.scan(step, theta, None, length=local_steps)
    return out


def iadmm_message(theta, lam, x, y, *, clip: float, rho: float, norm: str):
    """z_p = w + (λ_p − ḡ_p(w))/ρ, the primal an IADMM client sends (before noise)."""
    return theta + (lam - clipped_mean_gradient(theta, x, y, clip, norm)) / rho


def make_round(algorithm: str, *, clip: float, learning_rate: float, local_steps: int, rho: float,
               norm: str) -> Callable:
    """The jitted messages of all clients, vmapped over the client axis:
    ``messages(theta, lam, xs, ys)`` with xs (P, I, D), ys (P, I), lam (P, D+1, c)."""
    if algorithm == "fedavg":
        one = lambda t, lam, x, y: fedavg_message(t, x, y, clip=clip, learning_rate=learning_rate,  # noqa: E731
                                                   local_steps=local_steps, norm=norm)
    else:
        one = lambda t, lam, x, y: iadmm_message(t, lam, x, y, clip=clip, rho=rho, norm=norm)  # noqa: E731
    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0)))


def add_noise(messages: np.ndarray, source: NoiseSource, mechanism: str, scale: float,
              grid: fp.GridNoise | fp.GaussianGrid | None = None) -> np.ndarray:
    """Every coordinate of every message plus independent float64 Laplace (scale b) or
    Gaussian (std σ) noise; with a `grid`, its exact release instead (`fp.GridNoise.release`,
    `fp.GaussianGrid.release`: each message its own d coordinates)."""
    if grid is not None:
        return grid.release(messages, source)
    messages = np.asarray(messages, np.float64)
    draw = source.laplace if mechanism == "laplace" else source.normal
    return messages + draw(messages.shape, scale)


def server_update(algorithm: str, noisy: np.ndarray, lam: np.ndarray, rho: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The new global model and duals from the *noisy* messages (P, D+1, c) alone.

    FedAvg: the mean. IADMM: w = mean_p(z̃_p − λ_p/ρ), λ_p ← λ_p + ρ(w − z̃_p): the dual
    is post-processing of released values (the server holds the same λ_p as the client),
    so no noiseless state ever leaves a client.
    """
    if algorithm == "fedavg":
        return noisy.mean(axis=0), lam
    theta = (noisy - lam / rho).mean(axis=0)
    return theta, lam + rho * (theta[None] - noisy)


def server_momentum(theta: np.ndarray, averaged: np.ndarray, velocity: np.ndarray, beta: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """FedAvgM's server step (Hsu, Qi & Brown 2019): v ← βv + (w − w̄), w ← w − v, from the
    previous public model w and the average w̄ of the noisy messages. A function of released
    values only (post-processing: the round's cost does not depend on β); β = 0 returns w̄."""
    velocity = beta * velocity + (theta - averaged)
    return theta - velocity, velocity


def to_flax(theta: np.ndarray) -> dict:
    """θ = [W; b] as the parameters of `pate.programs.models.Linear`."""
    theta = np.asarray(theta, np.float32)
    return {"params": {"Dense_0": {"kernel": theta[:-1], "bias": theta[-1]}}}


# --------------------------------------------------------------------------- the command


@dataclasses.dataclass(frozen=True)
class FedavgResult:
    """What `train_fedavg` did (written to `fedavg.json`, but for the wall time)."""

    algorithm: str
    mechanism: str
    model: str
    accuracy: float
    accuracy_test: float
    eval_points: int
    eps: float
    delta: float
    per_round: float
    per_round_eps: float
    rounds: int
    clients: int
    client_size: int
    sensitivity: float
    noise_scale: float
    grid: fp.GridNoise | fp.GaussianGrid | QuantisedSum | None
    wall_time_s: float
    data_set: dict | None = None  # the ledger's summary with this release (`Ledger.summary`)
    averaged_eps: float | None = None  # fp.averaged_model_eps: the noise the global model carries

    how: str = "output perturbation"  # Plan.how: what the noise covers

    def summary(self) -> str:
        what = "mu" if self.mechanism == "gaussian" else "eps"
        return "\n".join([
            *publish_lines(self.data_set, rundir.FEDAVG_JSON),
            f"fedavg: {self.algorithm}, {self.mechanism} {self.how}, {self.model} model; "
            f"{self.clients} clients of {self.client_size} points, {self.rounds} rounds",
            f"fedavg accuracy on the evaluation split ({self.eval_points} points): {self.accuracy:.4f} "
            f"(whole test split: {self.accuracy_test:.4f})",
            f"fedavg eps = {self.eps:.4f} at delta = {self.delta:g} over all {self.rounds} rounds "
            f"(replace-one neighbours); per round {what} {self.per_round:.4g} (per-round eps "
            f"{self.per_round_eps:.4g}: the figure per-round accounting such as APPFL's reports)",
            f"sensitivity {self.sensitivity:.4g}, noise scale {self.noise_scale:.4g} per coordinate",
            *_averaged_lines(self.averaged_eps, self.clients, self.eps),
            _grid_line(self.grid),
            f"wall time: {self.wall_time_s:.1f} s (printed only)",
        ])


def _averaged_lines(averaged_eps: float | None, clients: int, eps: float) -> list[str]:
    if averaged_eps is None or clients < 2:
        return []
    return [f"the average of {clients} clients' noised messages carries the noise of one central full-batch "
            f"run at eps {averaged_eps:.3g}, not {eps:.3g}: each client's noise covers its own message "
            f"(analysis/fedavg_privacy.py, \"What the averaged model carries\")"]


def _grid_line(grid: fp.GridNoise | fp.GaussianGrid | None) -> str:
    if grid is None:
        return "noise: float64, not on a grid (fedavg.grid = 0: not defended against Mironov 2012's floating-point attack)"
    return grid.describe()


def client_shards(n: int, config: Config) -> np.ndarray:
    """(P, I) indices of each client's points: the teachers' partition (``clients = 0``) or
    the same seeded permutation cut into ``clients`` shards."""
    from pate.data import partition

    p = config.fedavg.clients or config.teachers.num_teachers
    if p > n:
        raise PateError(f"{p} clients but only {n} training points: each client needs at least one; "
                        "lower fedavg.clients (--clients)")
    return partition(n, p, config.teachers.seed).indices


def train_fedavg(config: Config, workdir: str | Path, *, seed: int | None = None, overwrite: bool = False,
                 show_progress: bool = True, echo: Callable[[str], None] = print) -> FedavgResult:
    """Trains `config.fedavg` on the private train split cut into clients and releases the
    model at `config.fedavg.eps` in total, `config.privacy.delta` (module docstring).

    Writes ``fedavg.json`` and ``fedavg/`` (orbax checkpoint of the `pate.programs.models.Linear`
    parameters) into `workdir`, and ``config.toml`` when it has none; charges the release
    to the data set's ledger first.

    Args:
      config: the resolved config.
      workdir: the run directory.
      seed: None (fresh OS entropy) or an integer in [0, 2**128) for research; never written.
      overwrite: replace an existing ``fedavg.json``.
      show_progress: draw a progress bar.
      echo: where status lines go.

    Raises:
      PateError: bad eps/delta/seed/clients, missing data, an existing result without
        `overwrite`, a run of another data set, over the ledger's budget, divergence.
    """
    start = time.time()
    cfg = config.fedavg
    delta = config.privacy.delta
    with release_step("fedavg", workdir, config, cfg.eps, overwrite=overwrite, echo=echo) as door:
        source = NoiseSource(seed, stream=NOISE_STREAM)  # checks the seed before any work
        splits = private_splits(config)
        shards = client_shards(int(splits.train_x.shape[0]), config)
        train_x, test_x, test_y, lipschitz, projection = _features(config, splits, door.run)
        plan = PLANS[cfg.mechanism](cfg, shards.shape[1], lipschitz, delta, (train_x.shape[1] + 1) * splits.num_classes,
                                    shards.shape[0])
        book = budgeted_ledger(config, plan.cost, "this federated model")
        theta, train_time = train_rounds(cfg, plan, shards, train_x, splits.train_y, splits.num_classes, source,
                                         show_progress, echo)
        params = to_flax(theta)
        pred = predict(Linear(splits.num_classes), params, test_x, cfg.eval_batch_size)
        if projection is not None:  # the released model is the public projection, then the linear map
            params = {**params, "projection": projection}
        pool = splits.pool_x.shape[0]
        result = FedavgResult(algorithm=cfg.algorithm, mechanism=cfg.mechanism, model=cfg.model,
                              accuracy=float(np.mean(pred[pool:] == test_y[pool:])),
                              accuracy_test=float(np.mean(pred == test_y)), eval_points=int(test_y.size - pool),
                              eps=plan.eps, delta=delta, per_round=plan.per_round, per_round_eps=plan.per_round_eps,
                              rounds=cfg.rounds, clients=shards.shape[0], client_size=shards.shape[1],
                              sensitivity=plan.sensitivity, noise_scale=plan.scale, grid=plan.grid, how=plan.how,
                              wall_time_s=time.time() - start, data_set=book.summary(delta, extra=[plan.cost]),
                              averaged_eps=fp.averaged_model_eps(cfg.mechanism, cfg.algorithm, cfg.local_steps,
                                                                 plan.per_round, cfg.rounds, shards.shape[0],
                                                                 delta))
        checkpoints.save_params(door.out / rundir.FEDAVG_DIR, params, then="run `pate fedavg --overwrite` again")
        door.out.write_json(rundir.FEDAVG_JSON, _record(config, plan, result, theta, train_x, seed,
                                                        splits.num_classes, int(test_y.size)), config)
        door.charge(book, "fedavg", plan.cost, run=door.run.path, budget=config.privacy.total_budget, delta=delta,
                    subject="fedavg:" + digests.file_digest(door.out / rundir.FEDAVG_JSON),
                    mechanism={"name": "fedavg", "algorithm": cfg.algorithm, "describe":
                               f"{cfg.algorithm} {cfg.mechanism}: {plan.cost.describe()}, "
                               f"{shards.shape[0]} clients"},
                    data_digest=book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()))
    echo(ledger_mod.cumulative_line(book, delta))
    echo(f"fedavg: training {train_time:.1f} s (printed only)")
    return result


@dataclasses.dataclass(frozen=True)
class Plan:
    """What is fixed before training: the sensitivity, the per-round noise that makes the
    rounds' total ``cfg.eps``, and the release's ledger cost."""

    norm: str
    lipschitz: float | None
    sensitivity: float
    per_round: float  # Laplace: the per-round eps; Gaussian: the per-round mu
    per_round_eps: float
    scale: float
    cost: composition.Cost
    eps: float
    grid: fp.GridNoise | fp.GaussianGrid | QuantisedSum | None  # [fedavg] grid > 0: the exact release
    how: str = "output perturbation"
    accounting: str | None = None  # fedavg.json's "accounting" and "noise" when the record says otherwise
    noise: str | None = None
    rounds_by: Callable | None = None  # (plan, cfg) -> the round; None: noise on every client's message

    def round(self, cfg) -> Callable:
        """``round(theta, lam, xs, ys, source) -> (new theta, lam)`` before server momentum: the plan's
        own (`rounds_by`: the secure sum's), else each client's noised message averaged."""
        return (self.rounds_by or Plan._client_noise_round)(self, cfg)

    def _client_noise_round(self, cfg) -> Callable:
        messages_fn = make_round(cfg.algorithm, clip=cfg.clip_norm, learning_rate=cfg.learning_rate,
                                 local_steps=cfg.local_steps, rho=cfg.rho, norm=self.norm)

        def one_round(theta, lam, xs, ys, source):
            sent = np.asarray(messages_fn(jnp.asarray(theta, jnp.float32), jnp.asarray(lam, jnp.float32), xs, ys))
            return server_update(cfg.algorithm, add_noise(sent, source, cfg.mechanism, self.scale, self.grid), lam,
                                 cfg.rho)

        return one_round

    @classmethod
    def distributed(cls, record_type) -> Callable:
        """The planner of distributed noise over an exact secure sum whose record is `record_type`
        (`ddg.DDGSum`, `skellam.SkellamSum`: ``of`` calibrates its noise so that the R central releases
        cost ``cfg.eps`` at `delta`; ``cfg.grid`` is the quantisation's K)."""

        def plan(cfg, size: int, lipschitz: float | None, delta: float, length: int, clients: int) -> "Plan":
            record = record_type.of(cfg.clip_norm, length, cfg.grid, clients, clients * size, cfg.eps, cfg.rounds,
                                    delta)
            cost = record.cost()
            eps = composition.single_eps(cost, delta)
            _check_met(cfg.eps, eps, cost, delta)
            per_round_eps = composition.single_eps(record.cost(1), delta)
            return cls("l2", None, record.sensitivity, per_round_eps, per_round_eps, record.noise_std, cost, eps,
                       record, rounds_by=lambda plan, c: secure_fedavg.secure_round(plan.grid, c.learning_rate),
                       how="distributed noise under an exact secure sum (DP-FedSGD)", accounting=record.accounting,
                       noise=record.noise_text)

        return plan

    @classmethod
    def of(cls, cfg, size: int, lipschitz: float | None, delta: float, length: int, clients: int = 1) -> "Plan":
        """The plan for clients of `size` points sending messages of `length` coordinates
        (public values only; `clients` unused: each message is noised on its own); with a grid,
        the per-round ε̄ or μ̄ is the grid's own (Δ_grid/t, √(S₂/σ²)), calibrated on the grid's cost."""
        norm = fp.NORMS[cfg.mechanism]
        if cfg.algorithm == "fedavg":
            sensitivity = fp.fedavg_sensitivity(cfg.clip_norm, cfg.learning_rate, size, cfg.local_steps,
                                                norm=norm, lipschitz=lipschitz)
        else:
            sensitivity = fp.iadmm_sensitivity(cfg.clip_norm, cfg.rho, size)
        exact = cfg.grid > 0
        per_round = fp.calibrate_per_round(cfg.mechanism, cfg.eps, cfg.rounds, delta, exact=exact)
        grid = None
        if exact:
            grid = fp.GRIDS[cfg.mechanism](sensitivity, length, cfg.grid, per_round)
            per_round = grid.per_round
        cost = grid.cost(cfg.rounds) if grid else fp.round_cost(cfg.mechanism, per_round, cfg.rounds)
        one_round = grid.cost(1) if grid else fp.round_cost(cfg.mechanism, per_round, 1)
        per_round_eps = per_round if cfg.mechanism == "laplace" else composition.single_eps(one_round, delta)
        scale = grid.noise_scale if grid else fp.noise_scale(cfg.mechanism, sensitivity, per_round)
        eps = composition.single_eps(cost, delta)
        _check_met(cfg.eps, eps, cost, delta)
        return cls(norm, lipschitz, sensitivity, per_round, per_round_eps, scale, cost, eps, grid)


#: How each ``[fedavg] mechanism`` plans its release: noise on every client's message (Laplace,
#: Gaussian) or distributed shares under an exact secure sum (exact discrete Gaussian, Skellam).
PLANS = {"laplace": Plan.of, "gaussian": Plan.of, "ddg": Plan.distributed(ddg.DDGSum),
         "skellam": Plan.distributed(skellam.SkellamSum)}


def _check_met(target: float, eps: float, cost: composition.Cost, delta: float) -> None:
    """Refuses a plan whose charged ε (the ledger's figure of ``cost`` at ``delta``, what
    fedavg.json states) is not the ε asked for: above ``target`` (the grid's integer noise
    scale and the accountant's discretisation cannot meet it), or 0 for a release that
    spends something (a target below what the accountant resolves at ``delta``: the file
    would say 0 while the ledger composes a cost).

    Raises:
      OptionError: on ``--eps`` (``fedavg.eps``).
    """
    if eps > target:
        raise OptionError("--eps", f"{target:g} (fedavg.eps) cannot be met on the grid: the nearest release "
                          f"costs eps {eps:.4g} at delta {delta:g}; ask for at least that")
    if eps <= 0.0 and not composition.is_free(cost):
        raise OptionError("--eps", f"{target:g} (fedavg.eps) is below what the accountant resolves at delta "
                          f"{delta:g}: its release ({cost.describe()}) would read as eps 0; ask for a larger eps")


def _features(config: Config, splits, run: rundir.RunDir):
    """(train_x, test_x, test_y, lipschitz, projection): pixels clamped to [0, 1] with their
    input-domain Lipschitz bound, or ScatterNet features (the [dpsgd] settings, cached
    privately) with none (the general recursion); with ``[fedavg] pca`` both projected by
    `public_projection` (None otherwise)."""
    test_x = np.concatenate([splits.pool_x, splits.eval_x])
    test_y = np.concatenate([splits.pool_y, splits.eval_y])
    if config.fedavg.model == "scatternet":
        from pate.programs import scattering

        d = config.dpsgd
        cache = run / rundir.DPSGD_FEATURES_DIR  # features of private data: made owner-only when first written
        train_x = scattering.features(splits.train_x, d.scattering_j, d.scattering_l, d.groups, cache, "train")
        test_x = scattering.features(test_x, d.scattering_j, d.scattering_l, d.groups, cache, "test")
        lipschitz, box = None, None
    else:
        train_x, test_x = np.clip(splits.train_x, 0.0, 1.0), np.clip(test_x, 0.0, 1.0)  # the bound's domain
        box = (0.0, 1.0)
    width = int(np.prod(test_x.shape[1:]))  # not -1: a coordinator across silos has no train record (0 rows)
    train_x = train_x.reshape(train_x.shape[0], width)
    test_x = test_x.reshape(test_x.shape[0], width)
    projection = None
    if config.fedavg.pca:
        pool = splits.pool_x.shape[0]  # the first rows of test_x: the public pool
        projection = public_projection(test_x[:pool], config.fedavg.pca, config.fedavg.whiten)
        train_x, test_x = project(projection, train_x), project(projection, test_x)
    if box is not None:
        per_coordinate = (np.ones(train_x.shape[1]) if projection is None
                          else projected_box(projection, *box))
        norm = fp.NORMS[config.fedavg.mechanism]
        lipschitz = fp.linear_lipschitz(float(per_coordinate.sum()) + 1.0, max(float(per_coordinate.max()), 1.0),
                                        math.sqrt(float(np.sum(per_coordinate ** 2)) + 1.0), norm)
    return train_x, test_x, test_y, lipschitz, projection


def train_rounds(cfg, plan: Plan, shards: np.ndarray, train_x, train_y, num_classes: int, source,
                 show_progress: bool, echo) -> tuple[np.ndarray, float]:
    """The rounds: every client's message from the vmapped local update, noised on the
    host, and the server's update. Returns the final parameters and the training time."""
    clients, size = shards.shape
    flat = np.asarray(train_x, np.float32).reshape(train_x.shape[0], -1)
    xs, ys = jnp.asarray(flat[shards]), jnp.asarray(train_y[shards])
    one_round = plan.round(cfg)
    theta = np.zeros((flat.shape[1] + 1, num_classes))  # public start (Linear's zero init)
    lam = np.zeros((clients, flat.shape[1] + 1, num_classes))
    echo(f"fedavg: {cfg.algorithm}, {cfg.mechanism} noise, {cfg.model} model ({theta.size} parameters); "
         f"{clients} clients of {size} points, {cfg.rounds} rounds"
         f"{f' (server momentum {cfg.server_momentum:g})' if cfg.server_momentum else ''}; sensitivity {plan.sensitivity:.4g} "
         f"({plan.norm}), per round {'mu' if cfg.mechanism == 'gaussian' else 'eps'} {plan.per_round:.4g} for "
         f"total eps {cfg.eps:g} (replace-one)")

    def fl_round(t, state):
        theta, lam, velocity = state
        new, lam = one_round(theta, lam, xs, ys, source)
        if cfg.server_momentum:
            new, velocity = server_momentum(theta, new, velocity, cfg.server_momentum)
        return new, lam, velocity

    (theta, _, _), seconds = training_loop(
        "fedavg round", cfg.rounds, fl_round, (theta, lam, np.zeros_like(theta)), show_progress=show_progress,
        diverged="federated training diverged (non-finite parameters); lower fedavg.learning_rate (or raise "
                 "fedavg.rho) and run again with --overwrite")
    return theta, seconds


def _record(config: Config, plan: Plan, result: FedavgResult, theta, train_x, seed, num_classes: int,
            test_points: int) -> dict:
    """fedavg.json: public parameters and results only (no wall time, no seed), led by the data
    set's figure and then this model's own (`pate.baselines.release_step.result_head`)."""
    cfg = config.fedavg
    return {
        **result_head(result.data_set, plan.eps, cfg.eps, result.delta, composition.RELATION, plan.cost),
        "algorithm": cfg.algorithm,
        "mechanism": cfg.mechanism,
        "model": cfg.model,
        **accuracy_fields(result.accuracy, result.eval_points, result.accuracy_test, test_points),
        "cost": plan.cost.to_json(),
        "accounting": plan.accounting or (
                       "composition over rounds (a client's data enters only its own messages), parallel across "
                       "clients; Laplace: R x eps-DP (randomized response, PLD/RDP); Gaussian: "
                       + ("R x (mu^2/2)-zCDP of the discrete Gaussian (RDP; Canonne, Kamath, Steinke 2020, "
                          "Proposition 5)" if plan.grid else "R x mu-GDP")),
        "per_round_eps": plan.per_round_eps,
        "per_round_mu": plan.per_round if cfg.mechanism == "gaussian" else None,
        "per_round_note": "the per-round eps is what per-round accounting (APPFL) reports; the released "
                          "model costs eps",
        "rounds": cfg.rounds,
        "clients": result.clients,
        "client_size": result.client_size,
        "partition": "teachers" if cfg.clients == 0 else "clients",
        "averaged_model_eps": result.averaged_eps,
        "averaged_model_note": ("the law of the global models is that of central noisy full-batch gradient descent "
                                "at this eps (the mean of the clients' independent noises); the data set is "
                                "charged eps, because every client's own message is released to the server; "
                                "null where no such identity holds (Laplace, local_steps > 1) and for distributed "
                                "noise (ddg, skellam: the server sees the central release itself, and is charged for it); "
                                "on a grid, up to "
                                "its rounding and the discreteness of the noise"),
        "sensitivity": plan.sensitivity,
        "sensitivity_norm": plan.norm,
        "lipschitz": plan.lipschitz,
        "noise_scale": plan.scale,
        "grid": None if plan.grid is None else plan.grid.to_json(theta.size),
        "clip_norm": cfg.clip_norm,
        "learning_rate": cfg.learning_rate,
        "local_steps": cfg.local_steps,
        "rho": cfg.rho,
        "optimizer": "plain full-batch gradient descent, per-example clipping",
        "num_params": int(theta.size),
        "noise": plan.noise or (f"exact discrete {cfg.mechanism} on a grid (Canonne, Kamath, Steinke 2020)"
                                if plan.grid else f"float64 {cfg.mechanism}, not on a grid")
        + (", OS entropy" if seed is None else ", research seed (not recorded)"),
        "features": ("pixels clamped to [0, 1]" if cfg.model == "linear" else "scattering (the [dpsgd] settings)")
        + (f", projected onto the top {cfg.pca} principal directions of the public pool"
           f"{', each whitened to unit variance on the pool' if cfg.whiten else ''} (saved with the model)"
           if cfg.pca else ""),
        "fedavg": config_to_dict(config)["fedavg"],
        "dataset": config.data.name,
        "num_classes": num_classes,
        "input_shape": list(train_x.shape[1:]),
    }

