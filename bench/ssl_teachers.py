"""Semi-supervised teachers (the PATE-FM lever of issue 14): does a teacher that also learns
from the public unlabelled pool beat one trained on its private shard alone?

For the first K teachers of the run's partition, trains the teacher's model (the
`[teachers]` model keys) twice through the student's training loop, which is the same
step either way except for the pool term: ``supervised`` (the shard alone) and
``fixmatch`` (the shard plus FixMatch consistency on the pool, `[student]`'s threshold,
mu and lambda_u). The shards stay disjoint and the pool is public, so a semi-supervised
teacher costs no privacy beyond its vote. Prints one JSON object per variant (mean and
per-teacher accuracy on the evaluation split, the plurality vote of the K teachers, seconds
per teacher), then a Markdown table.

Research harness, not the product: it reads the private training shards and the
evaluation labels, and releases nothing.

    python bench/ssl_teachers.py [--config configs/fashion_mnist_cnn.toml] [--teachers 6]
        [--variants "method=supervised,steps=600" "method=fixmatch,steps=2000" ...]

A variant is ``key=value`` pairs over `[student]` keys (``method``, ``steps``, ``mu``,
``threshold``, ``lambda_u``, ...) applied on top of the teacher's model and optimiser.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.variants import apply_variant, print_table, run_variants  # noqa: E402

#: The teacher's model and optimiser keys copied into the training loop's config.
TEACHER_KEYS = ("model", "gabor_orientations", "conv_features", "conv_kernels", "conv_strides", "conv_pool",
                "conv_impl", "hidden", "dropout", "eval_flip", "augment_shift", "augment_flip", "batch_size",
                "learning_rate", "optimizer", "weight_decay")

DEFAULT_VARIANTS = ("method=supervised", "method=fixmatch", "method=fixmatch,steps=2000")


def teacher_loop_config(config, variant: str, shard_size: int):
    """The `StudentConfig` that trains one teacher: the teacher's model and optimiser, as
    many steps as its `epochs` over the shard, the `[student]` FixMatch keys, then the
    variant's overrides (TOML values, e.g. ``steps=2000,threshold=0.9``)."""
    teach = {k: getattr(config.teachers, k) for k in TEACHER_KEYS}
    steps = max(1, round(config.teachers.epochs * shard_size / config.teachers.batch_size))
    cfg = dataclasses.replace(config.student, **teach, steps=steps, ema=0.999,
                              cutout=min(config.student.cutout, shard_size))
    return apply_variant(cfg, "student", variant)


def run_variant(config, splits, part, variant: str, num: int) -> dict:
    import jax
    import jax.numpy as jnp

    from pate.programs import keys, models
    from pate.programs.student_training import predict
    from pate.programs.student_training import compiled_loop, init_state, label_weights
    from pate.programs.voting import plurality_accuracy, votes_from_predictions

    cfg = teacher_loop_config(config, variant, part.shard_size)
    model = models.make_model(cfg, splits.num_classes, jax.default_backend())
    tx, train = compiled_loop(model, cfg)
    xu = jnp.asarray(splits.pool_x)
    accs, preds, start = [], [], time.time()
    for t in range(num):
        idx = part.indices[t]
        yl = splits.train_y[idx]
        state = init_state(model, tx, splits.pool_x.shape[1:], t, splits.num_classes)
        key = keys.stream(keys.training_key(t), keys.DATA_STREAM)
        wl = jnp.asarray(label_weights(yl, splits.num_classes, False))
        state, _ = train(state, key, jnp.asarray(splits.train_x[idx]), jnp.asarray(yl), wl, xu,
                         jnp.int32(cfg.steps))
        ema = jax.tree.map(np.asarray, state.ema)
        preds.append(predict(model, ema, splits.eval_x, cfg.eval_batch_size))
        accs.append(float(np.mean(preds[-1] == splits.eval_y)))
    seconds = (time.time() - start) / num
    votes = votes_from_predictions(np.stack(preds), splits.num_classes)
    return {"variant": variant, "method": cfg.method, "steps": cfg.steps, "teachers": num,
            "shard_size": part.shard_size, "mean_accuracy": float(np.mean(accs)),
            "ensemble_accuracy": plurality_accuracy(votes, splits.eval_y),
            "accuracy": accs, "seconds_per_teacher": seconds}


def main(argv=None) -> int:
    from pate.config import load_config
    from pate.data import load_dataset, partition, split

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist_cnn.toml"))
    parser.add_argument("--teachers", type=int, default=6, help="train the first K teachers' shards")
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    args = parser.parse_args(argv)
    config = load_config(args.config)
    splits = split(load_dataset(config.data), config.data.public_size)
    part = partition(splits.train_x.shape[0], config.teachers.num_teachers, config.teachers.seed)
    num = min(args.teachers, part.num_teachers)
    rows = run_variants(args.variants, lambda variant: run_variant(config, splits, part, variant, num))
    print_table(["variant", "steps", "mean teacher accuracy", f"plurality of {num}", "s / teacher"],
                [[r["variant"], str(r["steps"]), f"{r['mean_accuracy']:.3f}", f"{r['ensemble_accuracy']:.3f}",
                  f"{r['seconds_per_teacher']:.1f}"] for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
