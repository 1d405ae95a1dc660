"""`pate synth --method merf`: DP-MERF (Harder, Adamczewski & Park, AISTATS 2021). The
class-conditional mean embedding of the private train split in random Fourier features is
released **once** with discrete Gaussian noise (`analysis.baselines.merf`); a generator is fitted to
that release (`pate.baselines.merf_generator`) and released with a synthetic data set and its
train-on-synthetic, test-on-real scores, as the PATE-GAN method does (`pate.baselines.synth`).

**Fixed before any private value is read, from public values only:** the features (D,
the frequencies from the config seed, the length-scale from the config or the public
pool), the noise multiplier m (`analysis.baselines.merf.calibrate_multiplier`: the least m whose one
release costs at most ``synth.eps`` at ``[privacy] delta`` by the ledger's RDP figure) and
every generator setting. There is one release, so there is no query count to fix and no
stopping rule.

**Formal guarantee.** The integer sum S has L2 sensitivity 2B under **replace-one**
neighbours of the private train split and the release S + N_ℤ(0, (m·2B)²)^{D×C} is
(α, α/(2m²))-RDP for every α > 1 (`analysis.baselines.merf`, module docstring: Canonne, Kamath &
Steinke 2020, Proposition 5; van Erven & Harremoës 2014, Theorem 28), hence (ε, δ)-DP with
ε = `analysis.baselines.merf.release_eps` (Balle et al. 2020, Theorem 21). The noise is exact
(integer, OS entropy), so no floating-point δ is added. The generator, the samples, the
picture and the scores are post-processing of the release. Pixels are scaled by their
public bound (/255, clamped); classes are balanced by construction (a public prior), so no
class count is read or accounted.

Nothing private is written: not S, not the noisy S̃ or μ̃ (they stay in memory; the
generator is their post-processing), no losses, no wall times (printed only), no seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Callable

import numpy as np

from analysis.mechanisms import composition
from analysis.baselines import merf
from analysis.core.noise import NoiseSource, seed_record
from pate.store import checkpoints, rundir
from pate.store import ledger as ledger_mod
from pate.baselines import merf_generator as program
from pate.config import Config, config_to_dict
from pate.programs.progress import Progress
from pate.baselines.synthetic_scores import public_scale, released_pixels, sample_grid, SynthesisResult, tstr
from pate.baselines.release_step import budgeted_ledger, private_splits, release_step, result_head

#: The `analysis.core.noise` stream of this release (labels 0, sanitised ε 1, fedavg 2, PATE-GAN 3).
NOISE_STREAM = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class MerfResult(SynthesisResult):
    """What `train_merf` did: the embedding released and its noise."""

    multiplier: float
    features: int
    length_scale: float
    points: int

    def headline(self) -> str:
        return (f"synth: DP-MERF, class-conditional mean embedding of {self.points} points in {self.features} "
                f"random Fourier features (length-scale {self.length_scale:.4g}), released once, noise "
                f"multiplier {self.multiplier:.4g}")


def train_merf(config: Config, workdir: str | Path, *, seed: int | None = None, overwrite: bool = False,
               show_progress: bool = True, echo: Callable[[str], None] = print) -> MerfResult:
    """Releases the DP-MERF embedding of the private train split at ``config.synth.eps``,
    ``config.privacy.delta``, trains the generator on it and writes what `pate synth`
    writes (`pate.baselines.synth.train_synth`): ``synth/``, ``synthetic.npz``,
    ``synth-samples.png``, ``synth.json``, charged to the ledger once all are
    written, right before they are put in place.

    Args:
      seed: None (fresh OS entropy) or an integer in [0, 2**128) for research; never written.

    Raises:
      PateError: bad eps/delta/seed, missing data, an existing result without
        `overwrite`, a run of another data set, over the ledger's budget.
    """
    start = time.time()
    cfg, delta = config.synth, config.privacy.delta
    with release_step("synth", workdir, config, cfg.eps, overwrite=overwrite, echo=echo) as door:
        source = NoiseSource(seed, stream=NOISE_STREAM)  # checks the seed before any work
        multiplier = merf.calibrate_multiplier(cfg.eps, delta)
        cost = merf.cost(multiplier)
        eps = composition.single_eps(cost, delta)
        splits = private_splits(config)
        book = budgeted_ledger(config, cost, "this synthetic data set")
        scale = cfg.merf_length_scale or program.median_length_scale(public_scale(splits.pool_x))
        spec = program.MerfSpec.of(cfg, splits.train_x.shape[1:], splits.num_classes, scale)
        points = int(splits.train_x.shape[0])
        echo(f"synth: DP-MERF, {cfg.merf_features} features (length-scale {scale:.4g}), one release at noise "
             f"multiplier {multiplier:.4g} for eps {eps:.4g} (replace-one, delta {delta:g})")
        gen = program.MerfGenerator(spec)
        total = program.private_sum(public_scale(splits.train_x), splits.train_y, gen.omega, splits.num_classes)
        released = merf.noisy_sum(total, merf.noise_variance(multiplier, cfg.merf_features), source)
        del total  # PRIVATE: only the noisy release goes on
        with Progress("synth step", cfg.merf_steps, show=show_progress) as bar:
            gen.train(merf.embedding(released, points), cfg.merf_steps, bar.update)
        images, labels = gen.sample(cfg.samples)
        pixels = released_pixels(images, "merf_learning_rate")
        scores = tstr(config, pixels.astype(np.float32) / 255.0, labels, splits)
        result = MerfResult(eps=eps, delta=delta, multiplier=multiplier, features=cfg.merf_features, length_scale=scale,
                            points=points, scores=scores, wall_time_s=time.time() - start,
                            data_set=book.summary(delta, extra=[cost]))
        digest = hashlib.sha256(pixels.tobytes() + labels.tobytes()).hexdigest()
        checkpoints.save_params(door.out / rundir.SYNTH_DIR, gen.params, then="run `pate synth --overwrite` again")
        door.out.write_npz(rundir.SYNTHETIC_NPZ, {"images": pixels, "labels": labels})
        rundir.atomic_write_bytes(door.out / rundir.SYNTH_PNG, sample_grid(pixels, labels, splits.num_classes))
        door.out.write_json(rundir.SYNTH_JSON, _record(config, result, cost, seed, splits, pixels.shape), config)
        door.charge(book, "synth", cost, run=door.run.path, budget=config.privacy.total_budget, delta=delta,
                    subject="synth:" + digest,
                    mechanism={"name": "dp-merf", "noise_multiplier": multiplier, "features": cfg.merf_features,
                               "describe": f"DP-MERF: one mean-embedding release, {cfg.merf_features} features, "
                                           f"discrete Gaussian noise multiplier {multiplier:.4g}"},
                    data_digest=book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()))
    echo(ledger_mod.cumulative_line(book, delta))
    return result


def _record(config: Config, result: MerfResult, cost: composition.Cost, seed, splits, shape) -> dict:
    """synth.json: public parameters and results only (no embedding, no wall time, no seed)."""
    cfg = config.synth
    units = merf.sensitivity(cfg.merf_features)
    return {
        **result_head(result.data_set, result.eps, cfg.eps, result.delta, composition.RELATION, cost),
        "method": "merf",
        "sampling_delta": 0.0,
        "accounting": ("data-independent: one release of the integer class-conditional feature sum, L2 "
                       "sensitivity 2B under replace-one, exact discrete Gaussian noise of scale m * 2B: "
                       "(alpha, alpha / (2 m^2))-RDP (Canonne, Kamath & Steinke 2020, Proposition 5; "
                       "coordinates add), converted by Balle et al. 2020, Theorem 21; the generator, "
                       "samples and scores are post-processing"),
        "cost": cost.to_json(),
        "mechanism": {"name": "dp-merf", "noise_multiplier": result.multiplier, "grid": merf.GRID,
                      "row_bound": merf.row_bound(cfg.merf_features), "sensitivity_units": units,
                      "noise_scale_units": result.multiplier * units},
        "noise_std_embedding": result.multiplier * units / (merf.GRID * result.points),
        "features": cfg.merf_features,
        "length_scale": result.length_scale,
        "length_scale_from": "config" if cfg.merf_length_scale else "median distance of the public pool",
        "frequencies": "N(0, I / length_scale^2) from synth.seed (public)",
        "private_points": result.points,
        "train_on_synthetic_test_on_real": result.scores,
        "samples": int(shape[0]),
        "class_prior": "uniform (public; no label count read)",
        "scaling": "pixels / 255 clamped to [0, 1] (public bounds; nothing fitted on the data)",
        "noise": "exact discrete gaussian on the integer sum, " + (
            "OS entropy" if seed is None else "research seed (not recorded)"),
        **seed_record(seed),
        "synth": config_to_dict(config)["synth"],
        "dataset": config.data.name,
        "num_classes": splits.num_classes,
        "image_shape": list(shape[1:]),
    }
