"""Teacher settings chosen on a public proxy: the product's teacher program trained on
shards of the *public* pool (its labels are public data, not the private training split),
scored on the evaluation split.

Why a proxy: the teachers' epochs, batch size and learning rate shape the votes, and so
the release; a setting picked by the accuracy of teachers trained on the private split is
a (small) function of the private data that no accountant counts. Shards of the public pool
of the default shard size (60 000 / 500 = 120 images) are the same learning problem as
the real teachers' shards, so the proxy ranks settings without touching the private data.

For each variant (``key=value`` pairs over `[teachers]` keys, applied on top of the
config), trains `--teachers K` teachers (K <= pool / shard size; the pool's first
K * shard images, cut in order) through `pate.programs.teacher_training.make_epoch_fn` (the program
`pate train-teachers` runs), and prints one JSON object: mean and min/max teacher accuracy
and the plurality accuracy of the K on the evaluation split, training seconds (compiling
left out), then a Markdown table. Variants run one after another in this one process
(compare their ratios, not absolute times, across machines). Measured: docs/journal/, "Cheaper
teachers, measured on a public proxy".

    python bench/teacher_proxy.py [--config configs/fashion_mnist_cnn.toml] [--teachers 75]
        [--variants "" "epochs=30" "epochs=30,batch_size=24,learning_rate=0.006" ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.variants import apply_variant, print_table, run_variants  # noqa: E402


def variant_config(teachers_cfg, variant: str, num_teachers: int):
    """`teachers_cfg` with the variant's ``key=value`` overrides (TOML values) and K teachers."""
    return apply_variant(teachers_cfg, "teachers", variant, num_teachers=num_teachers)


def run_variant(config, splits, variant: str, num: int, shard: int) -> dict:
    import jax
    import jax.numpy as jnp

    from pate.programs import models
    from pate.programs.placement import Placement, to_host, unpad
    from pate.programs.teacher_training import init_teachers, make_epoch_fn, make_optimizer
    from pate.programs.voting import plurality_accuracy, teacher_predictions, votes_from_predictions

    tc = variant_config(config.teachers, variant, num)
    placement = Placement(num)
    model = models.make_model(tc, splits.num_classes, placement.platform)
    tx = make_optimizer(tc, shard // tc.batch_size)
    params, opt_state = init_teachers(model, tx, splits.pool_x.shape[1:], tc.seed, placement)
    order = np.arange(num * shard).reshape(num, shard)
    order = np.concatenate([order, np.repeat(order[:1], placement.padded - num, axis=0)])
    x = placement.put(splits.pool_x[order])
    y = placement.put(splits.pool_y[order].astype(np.int32))
    ids = placement.teacher_ids()
    start = time.time()
    epoch_fn = make_epoch_fn(model, tx, tc, shard, placement)
    epoch_fn = epoch_fn.lower(params, opt_state, x, y, ids, jnp.int32(0)).compile()
    compile_seconds, start = time.time() - start, time.time()
    for epoch in range(tc.epochs):
        params, opt_state, loss, _ = epoch_fn(params, opt_state, x, y, ids, jnp.int32(epoch))
    jax.block_until_ready(params)
    seconds = time.time() - start
    preds = teacher_predictions(unpad(params, num), model, splits.eval_x, tc.eval_batch_size)
    accs = (preds == splits.eval_y[None]).mean(axis=1)
    votes = votes_from_predictions(preds, splits.num_classes)
    return {"variant": variant or "(config)", "teachers": num, "shard_size": shard, "epochs": tc.epochs,
            "batch_size": tc.batch_size, "learning_rate": tc.learning_rate,
            "mean_accuracy": float(accs.mean()), "min_accuracy": float(accs.min()),
            "max_accuracy": float(accs.max()), "ensemble_accuracy": plurality_accuracy(votes, splits.eval_y),
            "final_loss": float(to_host(loss)[:num].mean()), "train_seconds": seconds,
            "compile_seconds": compile_seconds}


def main(argv=None) -> int:
    from pate.config import load_config
    from pate.data import load_dataset, split

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist_cnn.toml"))
    ap.add_argument("--teachers", type=int, default=0, help="K (default: as many shards as the pool holds)")
    ap.add_argument("--variants", nargs="+", default=["", "epochs=30"])
    args = ap.parse_args(argv)
    config = load_config(args.config)
    splits = split(load_dataset(config.data), config.data.public_size)
    shard = splits.train_x.shape[0] // config.teachers.num_teachers
    num = args.teachers or splits.pool_x.shape[0] // shard
    if num * shard > splits.pool_x.shape[0]:
        raise SystemExit(f"--teachers {num} needs {num * shard} pool images; the pool has {splits.pool_x.shape[0]}")
    rows = run_variants(args.variants, lambda variant: run_variant(config, splits, variant, num, shard))
    base = rows[0]["train_seconds"]
    print_table(["variant", "epochs × batch", "mean teacher", "ensemble of K", "train s (ratio to first)"],
                [[r["variant"], f"{r['epochs']} × {r['batch_size']}", f"{r['mean_accuracy']:.3f}",
                  f"{r['ensemble_accuracy']:.3f}", f"{r['train_seconds']:.0f} ({r['train_seconds'] / base:.2f})"]
                 for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
