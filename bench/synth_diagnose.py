"""Research diagnosis of `pate synth` (PATE-GAN) on Fashion-MNIST. Prints JSON. Releases
nothing and charges no ledger: with ``--sigma`` the noise is whatever you ask (0: none),
so its output is never a private release; with ``--eps`` σ is the plan `pate synth` would
use (`pate.baselines.synth.Plan`, public values only) and the training is exactly the
command's, without the release.

Modes:

- ``vote`` (PATE-GAN, `pate.baselines.pate_gan.train`): prints, every 50 steps, the mean fraction of
  teachers voting "real" on the queries and the mean released label, then the
  train-on-synthetic, test-on-real accuracy of a logistic regression (evaluation split).
- ``direct`` (a diagnosis, *not* private, not PATE-GAN): the generator trained against the
  mean teacher logit itself, gradients through the teachers, no student, no vote: the
  signal G-PATE's gradient voting would release with noise. It tells apart "the GAN
  cannot learn here" from "the vote is too poor a signal".

With ``--teacher-lr`` the teachers take their Adam steps at that rate instead of
``synth.learning_rate`` (the student and the generator keep it): a two-timescale test of
whether the teachers merely win the race. The vote-mode trace also gives the student's
mean P(real) on the queries after its step (what the generator's gradient comes from).

With ``--proxy`` nothing private is read at all: the public pool (labelled test points
0 .. data.public_size) is cut in two, the first half standing in for the private train
split (the teachers' shards), the second half the public pool the PATE-GAN's public
student sees (``synth.public_real``) and the points the train-on-synthetic score is taken
on (its labels are public; the evaluation split is left alone). ``--as-teachers T`` scales
the planned σ by teachers / T, so that the proxy's few teachers see the noise-to-margin
ratio of a real run with T teachers (the vote margin grows with the teachers, σ does not).
This is how `configs/fashion_mnist.toml`'s public-pool settings were chosen.

    python bench/synth_diagnose.py [--mode vote|direct] [--teachers 100] [--steps 300]
        [--sigma 0 | --eps E [--as-teachers T]] [--proxy] [--teacher-lr LR]
        [--set synth.KEY=VALUE ...] [--png samples.png]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.mechanisms.noisy_max import GNMax
from analysis.core.noise import NoiseSource
from pate.release import aggregation
from pate.config import load_config, parse_override
from pate.data import load_dataset, partition, split
from pate.programs.models import Linear
from pate.baselines import synth, synthetic_scores as synth_eval
from pate.programs.student_training import predict
from pate.baselines.pate_gan import GanSpec, PateGan, teacher_shards, train


@dataclasses.dataclass(frozen=True)
class _SlowTeacherSpec(GanSpec):
    """A spec with its own teacher learning rate (its own entry in `pate.baselines.pate_gan`'s program cache)."""

    teacher_learning_rate: float = 2e-4


class _SlowTeacherGan(PateGan):
    """PATE-GAN whose teachers use Adam at ``spec.teacher_learning_rate`` (diagnosis only)."""

    def _make_teacher_round(self):
        saved, self.tx = self.tx, optax.adam(self.spec.teacher_learning_rate, b1=0.5)
        try:  # Adam's state has the same structure at any rate: the initialised states fit
            return super()._make_teacher_round()
        finally:
            self.tx = saved


def _direct_step(gan: PateGan):
    """One generator step against the mean teacher logit (non-private diagnosis)."""
    spec = gan.spec

    @jax.jit
    def step(tparams, generator, s):
        gp, go = generator
        kz, ky = jax.random.split(jax.random.fold_in(jax.random.key(spec.synth.seed + 7), s))
        y = jax.nn.one_hot(jax.random.randint(ky, (spec.synth.batch_size,), 0, spec.num_classes), spec.num_classes)
        z = jax.random.normal(kz, (spec.synth.batch_size, spec.synth.latent_dim))

        def loss(p):
            x = gan.gen.apply(p, z, y)
            logits = jax.vmap(lambda q: gan.disc.apply(q, x, y))(tparams)
            return optax.sigmoid_binary_cross_entropy(logits, jnp.ones_like(logits)).mean()

        updates, go = gan.tx.update(jax.grad(loss)(gp), go, gp)
        return optax.apply_updates(gp, updates), go

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/fashion_mnist.toml")
    ap.add_argument("--mode", choices=["vote", "direct"], default="vote")
    ap.add_argument("--teachers", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sigma", type=float, default=0.0, help="GNMax sigma of the votes (0: no noise)")
    ap.add_argument("--eps", type=float, help="sigma from the plan of `pate synth` at this eps instead")
    ap.add_argument("--set", action="append", default=[], metavar="synth.KEY=VALUE")
    ap.add_argument("--teacher-lr", type=float, help="Adam rate of the teachers (default: synth.learning_rate)")
    ap.add_argument("--png", help="write the sample grid here")
    ap.add_argument("--proxy", action="store_true", help="public pool cut in two: stand-in private half, public half")
    ap.add_argument("--as-teachers", type=int, help="with --eps: sigma x teachers / AS_TEACHERS (a real run's ratio)")
    args = ap.parse_args()
    overrides = dict(parse_override(s) for s in args.set)
    overrides.update({"synth.teachers": args.teachers, "synth.steps": args.steps})
    if args.eps is not None:
        overrides["synth.eps"] = args.eps
    config = load_config(args.config, overrides)
    cfg = config.synth
    start = time.time()
    splits = split(load_dataset(config.data), config.data.public_size)
    if args.proxy:  # the labelled pool cut in two; nothing of the private train split is read
        half = splits.pool_x.shape[0] // 2
        splits = dataclasses.replace(splits, train_x=splits.pool_x[:half], train_y=splits.pool_y[:half],
                                     pool_x=splits.pool_x[half:], pool_y=splits.pool_y[half:],
                                     eval_x=splits.pool_x[half:], eval_y=splits.pool_y[half:])
    part = partition(int(splits.train_x.shape[0]), args.teachers, config.teachers.seed)
    sigma = synth.Plan.of(cfg, config.privacy.delta).mechanism.sigma if args.eps is not None else args.sigma
    if args.eps is not None and args.as_teachers:
        sigma *= args.teachers / args.as_teachers
    spec = GanSpec.of(cfg, splits.train_x.shape[1:], splits.num_classes)
    shards = teacher_shards(synth_eval.public_scale(splits.train_x), splits.train_y, part.indices)
    public_x = synth_eval.public_scale(splits.pool_x) if cfg.public_real else None
    if args.teacher_lr is None:
        gan = PateGan(spec, *shards, public_x=public_x)
    else:
        gan = _SlowTeacherGan(_SlowTeacherSpec(spec.image_shape, spec.num_classes, spec.synth, teacher_learning_rate=args.teacher_lr),
                              *shards, public_x=public_x)
    trace, window = [], []
    real_run = aggregation.run

    def spy(votes, mechanism, source):  # research only: the votes are read here, never written
        labels = real_run(votes, mechanism, source)
        window.append([float(np.mean(votes[:, 1]) / args.teachers), float(np.mean(labels))])
        return labels

    real_post = type(gan).update_student_and_generator

    def post(self, s, x, y, labels):
        real_post(self, s, x, y, labels)
        logits = self.disc.apply(self.student[0], x, jax.nn.one_hot(y, self.spec.num_classes))
        window[-1].append(float(jnp.mean(jax.nn.sigmoid(logits))))

    def on_step(s):
        if s % max(1, (cfg.warmup_steps + cfg.steps) // 6) == 0 and window:
            trace.append({"step": s, "real_vote_fraction": float(np.mean([w[0] for w in window])),
                          "real_label_fraction": float(np.mean([w[1] for w in window])),
                          "student_p_real": float(np.mean([w[-1] for w in window]))})
            window.clear()

    if args.mode == "vote":
        aggregation.run = spy
        gan.update_student_and_generator = post.__get__(gan)
        train(gan, cfg.steps, GNMax(max(sigma, 1e-9)), NoiseSource(None, stream=synth.NOISE_STREAM), on_step)
    else:
        step = _direct_step(gan)
        for s in range(cfg.steps):
            gan.update_teachers(s)
            gan.generator = step(gan.teachers[0], gan.generator, jnp.int32(s))
    train_s = time.time() - start
    images, labels = gan.sample(cfg.samples)
    pixels = np.round(np.clip(images, 0.0, 1.0) * 255.0).astype(np.uint8)
    model = Linear(splits.num_classes)
    params = synth_eval.fit_classifier(model, pixels.astype(np.float32) / 255.0, labels, epochs=cfg.eval_epochs,
                                       batch_size=cfg.eval_batch_size, learning_rate=cfg.eval_learning_rate, seed=0)
    accuracy = float(np.mean(predict(model, params, splits.eval_x, 1000) == splits.eval_y))
    if args.png:
        with open(args.png, "wb") as f:
            f.write(synth_eval.sample_grid(pixels, labels, splits.num_classes))
    print(json.dumps({"mode": args.mode, "proxy": args.proxy, "teachers": args.teachers,
                      "as_teachers": args.as_teachers, "eps": args.eps, "overrides": args.set, "teacher_lr": args.teacher_lr, "shard_size": part.shard_size,
                      "steps": cfg.steps, "batch_size": cfg.batch_size, "sigma": sigma, "trace": trace,
                      "mean_pixel": float(pixels.mean() / 255.0), "tstr_logistic_regression": accuracy,
                      "train_s": round(train_s, 1), "total_s": round(time.time() - start, 1)}, indent=1))


if __name__ == "__main__":
    main()
