"""`pate label` on 1 process and on N local processes (`--distributed`, JAX's multi-controller
runtime; gloo on CPU): the wall time of the whole command, each process's peak resident
memory, and whether the votes and the seeded labels are those of one process.

Each configuration labels a fresh copy of a trained run (`--workdir`, not touched) with a
research `--seed` (never for a real release) and its own ledger folder, one after another.
On a shared machine with fewer cores than processes the times measure the machine's load as
much as the program: read them as what this machine did, not as a speed-up.

    python bench/label_processes.py --workdir RUN [--processes 1 2] [--repeats 1]

One JSON object per (processes, repeat), then the ratio of the median wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def label_once(run: Path, processes: int, ledger: Path, seed: int) -> dict:
    """Labels `run` with `processes` processes; wall time and peak RSS (MiB) per process."""
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "PATE_LEDGER_DIR": str(ledger)}
    base = [sys.executable, str(ROOT / "cli.py"), "label", "--workdir", str(run), "--seed", str(seed)]
    port = _port()
    commands = [base] if processes == 1 else [
        base + ["--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", str(processes),
                "--process-id", str(p)] for p in range(processes)]
    start = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for c in commands]
    peaks, codes = {}, {}
    while len(codes) < len(procs):
        pid, status, usage = os.wait4(-1, 0)
        codes[pid], peaks[pid] = os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024
    wall = time.perf_counter() - start
    for proc in procs:
        proc.returncode = codes[proc.pid]
        if proc.returncode != 0:
            raise SystemExit(f"process {procs.index(proc)} of {processes} failed: {proc.stderr.read().decode()[-500:]}")
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
    args = parser.parse_args(argv)
    walls, first = {}, None
    with tempfile.TemporaryDirectory(prefix="pate-bench-") as tmp:
        for processes in args.processes:
            for repeat in range(args.repeats):
                run = Path(tmp) / f"run-{processes}-{repeat}"
                shutil.copytree(args.workdir, run)
                for name in ("votes.npz", "labels.npz"):
                    (run / name).unlink(missing_ok=True)
                row = {"processes": processes, "repeat": repeat,
                       **label_once(run, processes, Path(tmp) / f"ledger-{processes}-{repeat}", args.seed)}
                made = {n: arrays(run / n) for n in ("votes.npz", "labels.npz")}
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
