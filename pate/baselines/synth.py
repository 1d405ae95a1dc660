"""`pate synth`: a synthetic-data generator trained on the private train split, released as
a generator, a synthetic data set and its train-on-synthetic, test-on-real score. Two
methods (`[synth] method`): "merf", DP-MERF (`pate.baselines.dp_merf`, `analysis.baselines.merf`:
one noisy release of the class-conditional mean embedding, the default because it learns
best), and "gan", the PATE-GAN below (`pate.baselines.pate_gan`): at chance on Fashion-MNIST as
Jordon et al. built it; with the public pool's images given to its student (``public_real``,
docs/baselines.md) class-correct at ε 10, near chance at ε 1, below DP-MERF at both. The
pool is public, so reading it costs nothing.

**What is fixed before training, from public values only** (`Plan.of`): the number of
queries N = ``steps × batch_size`` (every step votes on ``batch_size`` generated points;
there is no stopping rule, so the step count says nothing about the data) and the GNMax
noise σ of the 2-class vote, the smallest for which N answers cost at most ``eps`` at
``[privacy] delta`` as the ledger counts them (`analysis.mechanisms.composition.single_eps` of the
record's `Cost`: μ-GDP with μ² = 2N/σ², the smaller of RDP and PLD). σ starts from the
exact Gaussian-DP μ (Balle & Wang 2018, Theorem 8; `analysis.accounting.pld.gaussian_mu_for`) and grows
until the ledger's figure meets the budget.

**Formal guarantee.** Everything released (generator, synthetic.npz, the picture,
synth.json's scores) is post-processing of the noisy labels, so the release is
(ε, δ + δ_s)-DP for **replace-one** neighbours of the private train split, with ε the
planned figure and δ_s the float64 samplers' `analysis.core.noise.sampling_delta` (module
`pate.baselines.pate_gan` for why each answer is a GNMax answer with sensitivity √2). No
data-dependent ε is computed or reported. The pixels are scaled by the public bound of
their type (uint8 / 255, `pate.data`) and clamped to [0, 1]: no minimum, maximum or encoder
is fitted on the private data. Classes are drawn uniformly (a public prior): no label count
is read, so none is accounted. Theorem 3 of PATE-GAN (LNMax moments bound, precondition
q < 1/(1 + e^{2λ})) is not used: GNMax's data-independent RDP needs no precondition.

Nothing else that depends on the private data is written: no votes, no per-teacher value, no
losses, no wall times (printed only), no seed (``research_seed: true`` when one was given).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np

from analysis.mechanisms import composition
from analysis.core.errors import PateError
from analysis.mechanisms.noisy_max import GNMax
from analysis.core.noise import NoiseSource, sampling_delta, sampling_tv, seed_record
from analysis.accounting.pld import gaussian_mu_for
from analysis.core.validation import check_delta, check_positive
from pate.store import checkpoints, rundir
from pate.store import ledger as ledger_mod
from pate.config import Config, config_to_dict
from pate.programs.progress import Progress
from pate.baselines.synthetic_scores import public_scale, released_pixels, sample_grid, SynthesisResult, tstr
from pate.baselines.pate_gan import GanSpec, PateGan, teacher_shards, train
from pate.baselines.release_step import budgeted_ledger, private_splits, release_step, result_head

#: The `analysis.core.noise` stream of this step's noise (labels 0, sanitised release 1, fedavg 2).
NOISE_STREAM = 3
VOTE_CLASSES = 2  # real / fake


def calibrate_sigma(eps: float, delta: float, queries: int) -> float:
    """The smallest σ (to 1e-4 relative) whose ``queries`` GNMax answers cost at most
    ``eps`` at ``delta`` by the ledger's own figure (module docstring). Public inputs only."""
    check_positive("eps", eps)
    check_delta(delta)
    if queries < 1:
        raise PateError(f"a PATE-GAN needs at least one query, got {queries}")
    sigma = math.sqrt(2.0 * queries) / gaussian_mu_for(eps, delta)
    while composition.single_eps(GNMax(sigma).cost(queries), delta) > eps:
        sigma *= 1.0001
    return sigma


@dataclasses.dataclass(frozen=True)
class Plan:
    """What is fixed before training: queries, σ, the record, its cost and ε."""

    queries: int
    mechanism: GNMax
    cost: composition.Cost
    eps: float
    sampling_delta: float

    @classmethod
    def of(cls, cfg, delta: float) -> "Plan":
        queries = cfg.steps * cfg.batch_size
        record = GNMax(calibrate_sigma(cfg.eps, delta, queries))
        cost = record.cost(queries)
        eps = composition.single_eps(cost, delta)
        return cls(queries, record, cost, eps, sampling_delta(queries, VOTE_CLASSES, eps))


# --------------------------------------------------------------------------- the command


@dataclasses.dataclass(frozen=True, kw_only=True)
class SynthResult(SynthesisResult):
    """What `train_synth` did with the PATE-GAN: the votes released and their noise."""

    sigma: float
    queries: int
    teachers: int
    shard_size: int

    def headline(self) -> str:
        return (f"synth: PATE-GAN, {self.teachers} teacher discriminators of {self.shard_size} points, "
                f"{self.queries} GNMax votes (2 classes) at sigma {self.sigma:.4g}")


def train_synth(config: Config, workdir: str | Path, *, seed: int | None = None, overwrite: bool = False,
                show_progress: bool = True, echo: Callable[[str], None] = print):
    """Trains the generator of ``config.synth`` (``method``: DP-MERF, `pate.baselines.dp_merf`,
    returning its `MerfResult`; or the PATE-GAN, module docstring, returning a
    `SynthResult`) and releases it at ``config.synth.eps``, ``config.privacy.delta``.

    Writes ``synth/`` (the generator's parameters, orbax), ``synthetic.npz`` (``images``
    uint8 (N, H, W, C), ``labels``), ``synth-samples.png`` and ``synth.json`` into `workdir`
    (and ``config.toml`` when it has none), charged to the data set's ledger once they are all
    written, right before they are put in place (`pate.store.door.publish`).

    Args:
      seed: None (fresh OS entropy) or an integer in [0, 2**128) for research; never written.

    Raises:
      PateError: bad eps/delta/seed/teachers, missing data, an existing result without
        `overwrite`, a run of another data set, over the ledger's budget.
    """
    from pate.data import partition

    if config.synth.method == "merf":
        from pate.baselines.dp_merf import train_merf

        return train_merf(config, workdir, seed=seed, overwrite=overwrite, show_progress=show_progress, echo=echo)
    start = time.time()
    cfg, delta = config.synth, config.privacy.delta
    with release_step("synth", workdir, config, cfg.eps, overwrite=overwrite, echo=echo) as door:
        source = NoiseSource(seed, stream=NOISE_STREAM)  # checks the seed before any work
        plan = Plan.of(cfg, delta)
        splits = private_splits(config)
        num_teachers = cfg.teachers or config.teachers.num_teachers
        part = partition(int(splits.train_x.shape[0]), num_teachers, config.teachers.seed)
        book = budgeted_ledger(config, plan.cost, "this synthetic data set")
        echo(f"synth: {num_teachers} teachers of {part.shard_size} points, {cfg.steps} steps x {cfg.batch_size} "
             f"queries = {plan.queries} GNMax votes at sigma {plan.mechanism.sigma:.4g} for eps {plan.eps:.4g} "
             f"(replace-one, delta {delta:g})")
        gan = PateGan(GanSpec.of(cfg, splits.train_x.shape[1:], splits.num_classes),
                      *teacher_shards(public_scale(splits.train_x), splits.train_y, part.indices),
                      public_x=public_scale(splits.pool_x) if cfg.public_real else None)
        with Progress("synth step", cfg.warmup_steps + cfg.steps, show=show_progress) as bar:
            answered = train(gan, cfg.steps, plan.mechanism, source, bar.update)
        if answered != plan.queries:  # the planned count is what is charged
            raise PateError(f"internal error: {answered} votes answered, {plan.queries} planned")
        images, labels = gan.sample(cfg.samples)
        pixels = released_pixels(images, "learning_rate")
        scores = tstr(config, pixels.astype(np.float32) / 255.0, labels, splits)
        result = SynthResult(eps=plan.eps, delta=delta, sigma=plan.mechanism.sigma, queries=plan.queries,
                             teachers=num_teachers, shard_size=part.shard_size, scores=scores,
                             wall_time_s=time.time() - start, data_set=book.summary(delta, extra=[plan.cost]))
        digest = hashlib.sha256(pixels.tobytes() + labels.tobytes()).hexdigest()
        checkpoints.save_params(door.out / rundir.SYNTH_DIR, gan.generator[0],
                                then="run `pate synth --overwrite` again")
        door.out.write_npz(rundir.SYNTHETIC_NPZ, {"images": pixels, "labels": labels})
        rundir.atomic_write_bytes(door.out / rundir.SYNTH_PNG, sample_grid(pixels, labels, splits.num_classes))
        door.out.write_json(rundir.SYNTH_JSON, _record(config, plan, result, seed, splits, pixels.shape), config)
        door.charge(book, "synth", plan.cost, run=door.run.path, budget=config.privacy.total_budget, delta=delta,
                    subject="synth:" + digest,
                    mechanism={"name": "pate-gan", **plan.mechanism.params(), "describe":
                               f"PATE-GAN: {plan.queries} GNMax votes (2 classes), sigma "
                               f"{plan.mechanism.sigma:.4g}, {num_teachers} teachers"},
                    data_digest=book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()),
                    sampling_tv=sampling_tv(plan.queries, VOTE_CLASSES))  # the float64 votes' δ, as labels'
    echo(ledger_mod.cumulative_line(book, delta))
    return result


def _record(config: Config, plan: Plan, result: SynthResult, seed, splits, shape) -> dict:
    """synth.json: public parameters and results only (no votes, no wall time, no seed)."""
    cfg = config.synth
    return {
        **result_head(result.data_set, plan.eps, cfg.eps, result.delta, composition.RELATION, plan.cost),
        "sampling_delta": plan.sampling_delta,
        "accounting": ("data-independent: queries x GNMax answers on 2-class votes (PATE 2018, Proposition 8), "
                       "mu-GDP with mu^2 = 2 queries / sigma^2; the smaller of RDP and PLD; adaptive "
                       "composition over the steps; generator, students and samples are post-processing "
                       "(of the released votes and, with public_real, of the public pool's images)"),
        "cost": plan.cost.to_json(),
        "mechanism": {"name": plan.mechanism.name, "num_classes": VOTE_CLASSES, **plan.mechanism.params()},
        "sigma": plan.mechanism.sigma,
        "queries": plan.queries,
        "steps": cfg.steps,
        "batch_size": cfg.batch_size,
        "teachers": result.teachers,
        "shard_size": result.shard_size,
        "partition": "the teachers' (teachers.seed), fixed for the whole run",
        "train_on_synthetic_test_on_real": result.scores,
        "samples": int(shape[0]),
        "class_prior": "uniform (public; no label count read)",
        "scaling": "pixels / 255 clamped to [0, 1] (public bounds; nothing fitted on the data)",
        "noise": "float64 gaussian on the votes, " + ("OS entropy" if seed is None else "research seed (not recorded)"),
        **seed_record(seed),
        "synth": config_to_dict(config)["synth"],
        "dataset": config.data.name,
        "num_classes": splits.num_classes,
        "image_shape": list(shape[1:]),
    }
