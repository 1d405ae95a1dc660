"""Benchmark: the teacher-ensemble program against the same teachers trained one after
another with the same code, same data and epochs (how the 2017 reference trains them).

The ensemble program is timed for each `--chunks` setting: "auto" (what
`train-teachers` uses on this backend), "all" (every teacher in one vmap) or a number
of teachers per chunk. Prints one JSON object: examples/s of each way and their ratio
to the sequential one (all from this one run), compile times, peak host memory after
each phase (`resource.getrusage`, so monotone: phases run from smallest to largest),
device peak memory where the backend reports it, the devices, and how far the
ensemble's parameters are from the sequential ones (float noise, amplified by Adam).
Defaults are small enough for a couple of minutes on 2 CPU cores; `--full` uses the
config's teacher count and epochs.

    python bench/teachers.py                                  # 20 teachers, 2 epochs
    python bench/teachers.py --teachers 250 --epochs 2 --chunks auto,10,all
    python bench/teachers.py --full --skip-sequential         # the default job's epochs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _device_peak_mb(device) -> float | None:
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - not every backend reports memory
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


class _Program:
    """The training program of `pate.steps.teachers` for a fixed number of teachers, compiled once."""

    def __init__(self, num_teachers, model, tx, tc, shard_size, image_shape, devices):
        import jax.numpy as jnp

        from pate.programs import teacher_training as teachers
        from pate.programs.placement import Placement

        self.placement = Placement(num_teachers, devices)
        self.model, self.tx, self.tc, self.image_shape = model, tx, tc, image_shape
        self.epoch_fn = teachers.make_epoch_fn(model, tx, tc, shard_size, self.placement)
        # compiled once: a sequential run initialises one teacher at a time
        self.init_fn = teachers.make_init_fn(model, tx, image_shape, tc.seed, self.placement)
        ids = self.placement.put(np.arange(num_teachers, dtype=np.int32))
        params, opt_state = self._init(ids)
        x = self.placement.put(np.zeros((num_teachers, shard_size, *image_shape), np.float32))
        y = self.placement.put(np.zeros((num_teachers, shard_size), np.int32))
        start = time.perf_counter()
        self.compiled = self.epoch_fn.lower(params, opt_state, x, y, ids, jnp.int32(0)).compile()
        self.compile_s = time.perf_counter() - start

    def _init(self, ids):
        return self.init_fn(ids)

    def train(self, ids, x_all, y_all, epochs):
        """Trains teachers `ids` (their own keys and shards); returns (seconds, params)."""
        import jax
        import jax.numpy as jnp

        put = self.placement.put
        teacher_ids = put(np.asarray(ids, np.int32))
        params, opt_state = self._init(teacher_ids)
        x, y = put(x_all[ids]), put(y_all[ids])
        jax.block_until_ready((params, x))
        start = time.perf_counter()
        for epoch in range(epochs):
            params, opt_state, loss, _ = self.compiled(params, opt_state, x, y, teacher_ids,
                                                       jnp.int32(epoch))
        jax.block_until_ready((params, loss))
        return time.perf_counter() - start, params


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist_cnn.toml"))
    parser.add_argument("--teachers", type=int, default=20, help="teachers to train (default 20)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs to time (default 2)")
    parser.add_argument("--full", action="store_true",
                        help="the config's teacher count and epochs")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="override a config key; repeatable")
    parser.add_argument("--chunks", default="auto,all",
                        help="comma-separated ensemble settings: auto, all, or teachers per "
                             "chunk (default: auto,all)")
    parser.add_argument("--skip-sequential", action="store_true",
                        help="time only the ensemble program")
    args = parser.parse_args(argv)

    import jax

    from pate.programs import teacher_training as teachers
    from pate.config import load_config, parse_override
    from pate.data import load_dataset, partition, split
    from pate.programs.models import conv_impl, make_model
    from pate.programs.placement import teacher_chunk

    config = load_config(args.config, dict(parse_override(s) for s in args.settings))
    tc = config.teachers
    num_teachers = tc.num_teachers if args.full else args.teachers
    epochs = tc.epochs if args.full else args.epochs

    splits = split(load_dataset(config.data), config.data.public_size)
    # shards of the full-size partition: each teacher sees what it would in the real job
    part = partition(splits.train_x.shape[0], tc.num_teachers, tc.seed)
    if num_teachers > part.num_teachers:
        parser.error(f"--teachers {num_teachers} exceeds the config's {part.num_teachers}")
    x_all = splits.train_x[part.indices[:num_teachers]]
    y_all = splits.train_y[part.indices[:num_teachers]]
    devices = jax.devices()
    model = make_model(tc, splits.num_classes, backend=devices[0].platform)
    tx = teachers.make_optimizer(tc, part.shard_size // tc.batch_size)
    examples = num_teachers * (part.shard_size // tc.batch_size) * tc.batch_size * epochs

    out: dict = {
        "config": str(args.config), "teachers": num_teachers, "epochs": epochs,
        "shard_size": part.shard_size, "batch_size": tc.batch_size, "model": tc.model,
        "conv_features": list(tc.conv_features), "hidden": list(tc.hidden),
        "conv_impl": conv_impl(tc.conv_impl, devices[0].platform) if tc.model == "cnn" else None,
        "examples": examples, "backend": devices[0].platform,
        "devices": [str(d) for d in devices],
    }
    ids = np.arange(num_teachers)
    image_shape = x_all.shape[2:]
    seq_params = None
    if not args.skip_sequential:
        # the same program for one teacher on one device, run once per teacher
        one = _Program(1, model, tx, tc, part.shard_size, image_shape, devices[:1])
        run_s, seq_params = 0.0, []
        for t in ids:
            seconds, params = one.train(np.array([t]), x_all, y_all, epochs)
            run_s += seconds
            seq_params.append(params)
            if (t + 1) % 50 == 0:  # progress: the sequential part is the long one
                print(f"sequential: {t + 1}/{num_teachers} teachers, {run_s:.1f} s of training",
                      file=sys.stderr, flush=True)
        out["sequential"] = {"run_s": run_s, "compile_s": one.compile_s,
                             "examples_per_s": examples / run_s, "peak_rss_mb": _peak_rss_mb()}
    out["ensemble"] = {}
    for label in args.chunks.split(","):
        label = label.strip()
        chunk = {"auto": tc.teacher_chunk, "all": num_teachers}.get(label)
        chunk = int(label) if chunk is None else chunk
        cfg = dataclasses.replace(tc, teacher_chunk=chunk)
        ensemble = _Program(num_teachers, model, tx, cfg, part.shard_size, image_shape, devices)
        run_s, params = ensemble.train(ids, x_all, y_all, epochs)
        entry = {"teacher_chunk": teacher_chunk(cfg, devices[0].platform) or num_teachers,
                 "run_s": run_s, "compile_s": ensemble.compile_s,
                 "examples_per_s": examples / run_s, "peak_rss_mb": _peak_rss_mb()}
        if seq_params is not None:
            entry["speedup_over_sequential"] = (entry["examples_per_s"]
                                                / out["sequential"]["examples_per_s"])
            host = jax.tree.map(lambda a: np.asarray(a)[:num_teachers], params)
            entry["max_param_diff_vs_sequential"] = max(
                float(np.max(np.abs(np.asarray(a)[0] - np.asarray(b)[t])))
                for t, sp in enumerate(seq_params)
                for a, b in zip(jax.tree.leaves(sp), jax.tree.leaves(host)))
        out["ensemble"][label] = entry
    device_peak = _device_peak_mb(devices[0])
    if device_peak is not None:
        out["device_peak_mb"] = device_peak
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
