"""Where a FixMatch step of the student spends its time: milliseconds per call, all in this
one process (compare the ratios).

Rows (one JSON object each on stdout):
- ``strong (product)``: `pate.programs.augment.strong` on a pool batch (mu * batch_size images):
  whole-batch operations on one uniform and one normal draw.
- ``strong (per-image keys)``: the same operations vmapped over one key per image (how
  `augment.strong` drew them before; the reference the product is timed against: measured
  on 2 cores, the two cost the same, ~4.2 ms for 192 images).
- ``weak``: `pate.programs.augment.weak` on the same batch.
- ``train step``: one step of the product's training loop (`pate.programs.student_training`), the
  config's `[student]` model and batch, on random images (timed over `--steps` steps).
  Measured on 2 cores: 26 ms (the strong augmentation a sixth of it); 30 ms before the
  weakly augmented view's forward pass ran on stopped parameters (`make_train_fn`).

    python bench/student_step.py [--config configs/fashion_mnist.toml] [--reps 200] [--steps 300]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def strong_per_image_keys(key, images, max_shift: int, flip: bool, cutout: int):
    """The reference: `augment.strong`'s operations (no affine map) per image, each image
    with its own key and its own scalar draws."""
    import jax
    import jax.numpy as jnp

    from pate.programs import augment

    def one(image, key):
        keys = jax.random.split(key, 8)
        out = augment.weak(keys[0], image[None], max_shift=max_shift, flip=flip)[0]
        out = out * jax.random.uniform(keys[1], (), minval=0.6, maxval=1.4)
        mean = jnp.mean(out)
        out = mean + (out - mean) * jax.random.uniform(keys[2], (), minval=0.5, maxval=1.5)
        blurred = augment._blur(out[None])[0]
        out = blurred + jax.random.uniform(keys[3], (), minval=0.0, maxval=2.0) * (out - blurred)
        out = out + jax.random.uniform(keys[4], (), maxval=0.1) * jax.random.normal(keys[5], out.shape)
        out = jnp.clip(out, 0.0, 1.0)
        h, w, _ = out.shape
        cy, cx = jax.random.randint(keys[6], (), 0, h), jax.random.randint(keys[7], (), 0, w)
        half = cutout // 2
        hole = (jnp.abs(jnp.arange(h)[:, None] - cy) <= half) & (jnp.abs(jnp.arange(w)[None] - cx) <= half)
        return jnp.where(hole[..., None], 0.5, out)

    return jax.vmap(one)(images, jax.random.split(key, images.shape[0]))


def _ms_per_call(fn, reps: int) -> float:
    import jax

    jax.block_until_ready(fn(0))
    start = time.perf_counter()
    for i in range(reps):
        out = fn(i + 1)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / reps * 1e3


def main(argv=None) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from pate.programs import augment, keys, models
    from pate.config import load_config
    from pate.programs.student_training import compiled_loop, init_state, label_weights

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"))
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--shape", type=int, nargs=3, default=[28, 28, 1], help="image height, width, channels")
    args = ap.parse_args(argv)
    cfg = load_config(args.config).student
    shape, classes = tuple(args.shape), 10
    rng = np.random.default_rng(0)
    pool = jnp.asarray(rng.random((cfg.mu * cfg.batch_size, *shape), np.float32))
    key = jax.random.key(0)
    kw = dict(max_shift=cfg.augment_shift, flip=cfg.augment_flip, cutout=cfg.cutout)
    reference = jax.jit(functools.partial(strong_per_image_keys, **kw))
    rows = [
        {"what": "strong (product)",
         "ms": _ms_per_call(lambda i: augment.strong(jax.random.fold_in(key, i), pool, **kw), args.reps)},
        {"what": "strong (per-image keys)",
         "ms": _ms_per_call(lambda i: reference(jax.random.fold_in(key, i), pool), args.reps)},
        {"what": "weak", "ms": _ms_per_call(
            lambda i: augment.weak(jax.random.fold_in(key, i), pool, max_shift=cfg.augment_shift,
                                   flip=cfg.augment_flip), args.reps)},
    ]
    model = models.make_model(cfg, classes, jax.default_backend())
    tx, train = compiled_loop(model, cfg)
    xl = jnp.asarray(rng.random((1000, *shape), np.float32))
    yl = jnp.asarray(rng.integers(0, classes, 1000).astype(np.int32))
    wl = jnp.asarray(label_weights(np.asarray(yl), classes, cfg.balance_labels))
    xu = jnp.asarray(rng.random((4 * cfg.mu * cfg.batch_size, *shape), np.float32))
    state = init_state(model, tx, shape, 0, classes)
    data_key = keys.stream(keys.training_key(0), keys.DATA_STREAM)
    state, sums = train(state, data_key, xl, yl, wl, xu, jnp.int32(2))  # compile
    jax.block_until_ready(sums)
    start = time.perf_counter()
    state, sums = train(state, data_key, xl, yl, wl, xu, jnp.int32(args.steps))
    jax.block_until_ready(sums)
    rows.append({"what": "train step", "ms": (time.perf_counter() - start) / args.steps * 1e3})
    base = rows[1]["ms"]
    for row in rows:
        row.update(batch=int(pool.shape[0]), ratio_to_per_image_strong=row["ms"] / base,
                   backend=jax.default_backend())
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
