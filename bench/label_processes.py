"""`pate label` on 1 process and on N local processes (`--distributed`, JAX's multi-controller
runtime; gloo on CPU): the wall time of the whole command, each process's peak resident
memory, and whether the votes and the seeded labels are those of one process. With
`--round 2`, `pate label --round 2` on a finished round 1 (`pate run`'s run and the ledger
folder its releases were charged to, `--ledgers`: round 2 composes with them there).

Each configuration labels a fresh copy of a trained run (`--workdir`, not touched) with a
research `--seed` (never for a real release) and its own ledger folder, one after another.
On a shared machine with fewer cores than processes the times measure the machine's load as
much as the program: read them as what this machine did, not as a speed-up.

    python bench/label_processes.py --workdir RUN [--processes 1 2] [--repeats 1]
    python bench/label_processes.py --workdir RUN --round 2 --ledgers LEDGERS [--queries 40]

One JSON object per (processes, repeat), then the ratio of the median wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _scaling():
    """bench/scaling.py, whose `run_cluster` launches and measures a local cluster."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scaling", ROOT / "bench" / "scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def label_once(run: Path, processes: int, ledger: Path, seed: int, extra: list[str] = ()) -> dict:
    """Labels `run` with `processes` processes (`extra`: more options of `pate label`); wall time
    and peak RSS (MiB) per process."""
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "PATE_LEDGER_DIR": str(ledger)}
    base = [sys.executable, str(ROOT / "cli.py"), "label", "--workdir", str(run), "--seed", str(seed), *extra]
    wall, procs, peaks = _scaling().run_cluster(base, processes, env, "label")
    return {"wall_s": round(wall, 2), "peak_rss_mib": [round(peaks[p.pid], 1) for p in procs]}


def arrays(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k].tobytes() for k in f.files if k != "meta"}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, type=Path, help="A trained run (copied, never written).")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="Research noise seed (the labels are compared).")
    parser.add_argument("--round", type=int, choices=[1, 2], default=1,
                        help="2: `pate label --round 2` on a finished round 1 (needs --ledgers).")
    parser.add_argument("--queries", type=int, help="Round 2's --queries (default: the config's).")
    parser.add_argument("--ledgers", type=Path, help="The ledger folder the run's round 1 was charged to "
                        "(copied for each configuration, never written).")
    args = parser.parse_args(argv)
    if args.round == 2 and args.ledgers is None:
        parser.error("--round 2 needs --ledgers (round 2 composes with round 1's charges there)")
    files = ("votes.npz", "labels.npz") if args.round == 1 else ("votes-round2.npz", "labels-round2.npz")
    extra = [] if args.round == 1 else ["--round", "2", *([] if args.queries is None else ["--queries", str(args.queries)])]
    walls, first = {}, None
    with tempfile.TemporaryDirectory(prefix="pate-bench-") as tmp:
        for processes in args.processes:
            for repeat in range(args.repeats):
                run = Path(tmp) / f"run-{processes}-{repeat}"
                shutil.copytree(args.workdir, run)
                for name in files:
                    (run / name).unlink(missing_ok=True)
                ledger = Path(tmp) / f"ledger-{processes}-{repeat}"
                if args.ledgers is not None:
                    shutil.copytree(args.ledgers, ledger)
                row = {"processes": processes, "repeat": repeat, "round": args.round,
                       **label_once(run, processes, ledger, args.seed, extra)}
                made = {n: arrays(run / n) for n in files}
                first = first or made
                row["same_votes_and_labels_as_first"] = made == first
                walls.setdefault(processes, []).append(row["wall_s"])
                print(json.dumps(row), flush=True)
    one = statistics.median(walls[args.processes[0]])
    print(json.dumps({"median_wall_s": {p: statistics.median(w) for p, w in walls.items()},
                      "ratio_to_first": {p: round(statistics.median(w) / one, 2) for p, w in walls.items()},
                      "load_average": os.getloadavg(), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
