"""Benchmark of `pate label`'s voting step: votes per second of a 250-teacher ensemble on
a 9000-point pool (the default job's shapes), with the default config's teacher model.
Prints JSON.

Teachers are freshly initialised (the cost of a forward pass does not depend on the
weights). Timed: `predict_votes` (batched, vmapped over teachers, reduced to counts on the
device) after one warm-up call, at a few batch sizes, and the aggregators on the votes.

    python bench/label.py [--config configs/fashion_mnist_cnn.toml] [--pool 9000] [--teachers 250]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist_cnn.toml"))
    parser.add_argument("--pool", type=int, default=9000)
    parser.add_argument("--teachers", type=int, default=250)
    parser.add_argument("--batch-sizes", default="50,100,200")
    args = parser.parse_args()

    import jax

    from pate.release import aggregation
    from pate.programs import voting
    from pate.programs.placement import Placement
    from pate.config import load_config
    from pate.programs.models import make_model
    from pate.programs import teacher_training as teachers

    config = load_config(args.config, {"teachers.num_teachers": args.teachers})
    image_shape, num_classes = (28, 28, 1), 10
    model = make_model(config.teachers, num_classes)
    tx = teachers.make_optimizer(config.teachers, 1)
    placement = Placement(args.teachers)
    params, _ = teachers.init_teachers(model, tx, image_shape, 0, placement)
    images = np.random.default_rng(0).uniform(0, 1, size=(args.pool, *image_shape)).astype(np.float32)

    rows = []
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        voting.predict_votes(params, model, images[:bs], num_classes, batch_size=bs, placement=placement)
        start = time.perf_counter()
        votes = voting.predict_votes(params, model, images, num_classes, batch_size=bs, placement=placement)
        seconds = time.perf_counter() - start
        assert votes.shape == (args.pool, num_classes) and np.all(votes.sum(axis=1) == args.teachers)
        rows.append({"batch_size": bs, "seconds": round(seconds, 3),
                     "votes_per_s": round(args.pool / seconds, 1),
                     "teacher_predictions_per_s": round(args.pool * args.teachers / seconds, 1)})

    timings = {}
    for name, fn in [("lnmax", lambda k: aggregation.lnmax(votes, 0.05, k)),
                     ("gnmax", lambda k: aggregation.gnmax(votes, 40.0, k)),
                     ("confident-gnmax", lambda k: aggregation.confident_gnmax(votes, 200, 150.0, 40.0, k))]:
        fn(aggregation.noise_source(0))
        start = time.perf_counter()
        fn(aggregation.noise_source(1))
        timings[name] = round(time.perf_counter() - start, 4)

    print(json.dumps({
        "bench": "pate label: ensemble votes on the public pool",
        "pool": args.pool, "teachers": args.teachers, "model": config.teachers.model,
        "conv_impl": config.teachers.conv_impl, "eval_flip": config.teachers.eval_flip,
        "devices": [str(d) for d in jax.devices()], "backend": jax.default_backend(),
        "voting": rows,
        "aggregator_seconds": timings,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "python": platform.python_version(),
    }, indent=2))


if __name__ == "__main__":
    main()
