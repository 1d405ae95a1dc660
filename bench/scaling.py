"""The distributed commands at 1, 2 and 4 local processes (`--distributed`, JAX's
multi-controller runtime; gloo on CPU), in one run: the teachers' training, the label votes,
a fine-grained release's histogram and DP-SGD (a small CNN, `--epochs` epochs at an expected
batch of 512), each as the whole command's wall time, its ratio to one process, each
process's peak resident memory, and the bytes of private training records
each process loaded (measured inside it: every call of `pate.data.split` records the size of
the train split it returned, and every call of `pate.data.load_train_rows` the rows it read by
index (the distributed paths: a process's own shards or block); a process that reads only the
public pool records 0).

The data are synthetic 28x28 images (`pate.data.synthetic`, `--train-size` of them: 60 000 are
188 MB of float32, as MNIST) written to an npz (`[data] name = "npz"`: a process that votes
reads only its x_test, as with real data), so the private split is large against JAX's runtime; the teachers are a tiny CNN
trained `--epochs` epochs. On a machine with fewer free cores than processes the times measure
the machine's load as much as the program: read them as what this machine did, not as a
speed-up.

    python bench/scaling.py [--processes 1 2 4] [--train-size 60000] [--teachers 8] [--epochs 1]
                            [--commands teachers votes fine_grained dpsgd]

One JSON object per (command, processes), then one summary object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: Runs the CLI in a process that records, in $SCALING_PRIVATE_BYTES/<pid>.json, the most bytes
#: of private training records it held at once: the train_x and train_y of `pate.data.split` (a
#: whole split), or of every call of `pate.data.load_train_rows` (the rows a process reads by
#: index: `pate.data.loading.on_rows_loaded`), whichever is larger.
WRAPPER = """
import json, os, sys
import pate.data as data
import pate.data.loading as loading
plain, most, rows = data.split, [0], [0]
def record():
    with open(os.path.join(os.environ["SCALING_PRIVATE_BYTES"], f"{os.getpid()}.json"), "w") as f:
        json.dump({"private_bytes": max(most[0], rows[0])}, f)
def split(*a, **k):
    out = plain(*a, **k)
    most[0] = max(most[0], int(out.train_x.nbytes + out.train_y.nbytes))
    record()
    return out
def loaded(x, y):
    rows[0] += int(x.nbytes + y.nbytes)
    record()
data.split, loading.on_rows_loaded = split, loaded
sys.argv = ["cli.py", *sys.argv[1:]]
sys.path.insert(0, os.getcwd())
import runpy
runpy.run_path("cli.py", run_name="__main__")
"""

MAKE_DATA = """
import sys
import numpy as np
from pate.data import synthetic
made = synthetic(int(sys.argv[2]), 1000, (28, 28, 1), 10, 0.3, 0)
np.savez(sys.argv[1], x_train=made.x_train, y_train=made.y_train, x_test=made.x_test, y_test=made.y_test)
"""

CONFIG = """
[data]
name = "npz"
path = "{data}"
public_size = 200

[teachers]
num_teachers = {teachers}
model = "cnn"
conv_features = [4, 8]
conv_kernels = [3, 3]
conv_strides = [2, 2]
hidden = []
epochs = {epochs}
batch_size = 32
learning_rate = 0.01
checkpoint_every = {epochs}
eval_batch_size = 500
seed = 0

[aggregation]
mechanism = "lnmax"
queries = 100
gamma = 0.5

[dpsgd]
model = "cnn"
eps = 3.0
conv_features = [8, 8]
cnn_batch_size = 512
cnn_epochs = {epochs}
microbatch = 128
"""


#: What the bench runs (the label votes need the teachers).
COMMANDS = ("teachers", "votes", "fine_grained", "dpsgd")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cluster(base: list[str], processes: int, env: dict, what: str) -> tuple[float, list, dict]:
    """Runs the command `base` as `processes` local processes of one cluster (the cluster options
    of each appended; one process: as it is) and waits for all: wall time (s), the Popen objects
    by process id, and each one's peak RSS (MiB, `os.wait4`) by pid. Exits with the first failing
    process's stderr tail, under the name `what`."""
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
    for p, proc in enumerate(procs):
        proc.returncode = codes[proc.pid]
        if proc.returncode != 0:
            raise SystemExit(f"{what}: process {p} of {processes} failed: "
                             f"{proc.stderr.read().decode()[-800:]}")
    return wall, procs, peaks


def launch(args: list[str], processes: int, ledger: Path, tmp: Path) -> dict:
    """``pate ARGS`` as `processes` local processes: wall time, peak RSS (MiB) and the private
    bytes each process loaded, by process id."""
    probe = Path(tempfile.mkdtemp(dir=tmp, prefix="probe-"))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PATE_LEDGER_DIR": str(ledger), "SCALING_PRIVATE_BYTES": str(probe)}
    env.pop("XLA_FLAGS", None)
    wall, procs, peaks = run_cluster([sys.executable, "-c", WRAPPER, *args], processes, env, args[0])
    private = []
    for proc in procs:
        f = probe / f"{proc.pid}.json"
        private.append(json.loads(f.read_text())["private_bytes"] if f.exists() else 0)
    return {"wall_s": round(wall, 2), "peak_rss_mib": [round(peaks[p.pid], 1) for p in procs],
            "private_mib": [round(b / 2**20, 1) for b in private]}


def digest(path: Path) -> str:
    with np.load(path, allow_pickle=False) as f:
        return hashlib.sha256(b"".join(f[k].tobytes() for k in sorted(f.files) if k != "meta")).hexdigest()[:16]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--train-size", type=int, default=60000)
    parser.add_argument("--teachers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="Research noise seed (the labels are compared).")
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    args = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="pate-scaling-") as name:
        tmp = Path(name)
        # Drawn in a child: this process stays small, since a child's peak RSS (ru_maxrss)
        # starts from its parent's at the fork and exec.
        subprocess.run([sys.executable, "-c", MAKE_DATA, str(tmp / "data.npz"), str(args.train_size)], cwd=ROOT,
                       check=True)
        text = CONFIG.format(data=tmp / "data.npz", teachers=args.teachers, epochs=args.epochs)
        config = tmp / "config.toml"
        config.write_text(text)
        fine = tmp / "fine.toml"
        fine.write_text(text.replace(
            'mechanism = "lnmax"', 'mechanism = "fine-grained"') + "\n[fine_grained]\npca = 16\nvotes_per_record = 3\n")
        for p in args.processes:
            run, ledger = tmp / f"run-{p}", tmp / f"ledger-{p}"
            steps = {
                "teachers": (["train-teachers", "--config", str(config), "--workdir", str(run), "--no-progress"],
                             run / "teachers.json"),
                "votes": (["label", "--workdir", str(run), "--seed", str(args.seed)], run / "votes.npz"),
                "fine_grained": (["label", "--config", str(fine), "--workdir", str(tmp / f"fine-{p}"), "--seed",
                                  str(args.seed)], tmp / f"fine-{p}" / "labels.npz"),
                "dpsgd": (["dpsgd", "--config", str(config), "--workdir", str(tmp / f"dpsgd-{p}"), "--seed",
                           str(args.seed), "--no-progress"], tmp / f"dpsgd-{p}" / "dpsgd.json"),
            }
            for command in args.commands:
                cli, made = steps[command]
                row = {"command": command, "processes": p, **launch(cli, p, ledger, tmp)}
                row["digest"] = digest(made) if made.suffix == ".npz" else None
                if command == "dpsgd":  # the model equals one process's up to rounding: its accuracy
                    row["accuracy"] = json.loads(made.read_text())["accuracy"]
                rows[(command, p)] = row
                print(json.dumps(row), flush=True)
    first = args.processes[0]
    summary = {}
    for command in args.commands:
        one = rows[(command, first)]
        summary[command] = {
            "wall_s": {p: rows[(command, p)]["wall_s"] for p in args.processes},
            "ratio_to_first": {p: round(rows[(command, p)]["wall_s"] / one["wall_s"], 2) for p in args.processes},
            "max_peak_rss_mib": {p: max(rows[(command, p)]["peak_rss_mib"]) for p in args.processes},
            "max_private_mib": {p: max(rows[(command, p)]["private_mib"]) for p in args.processes},
            **({"accuracy": {p: rows[(command, p)]["accuracy"] for p in args.processes}} if command == "dpsgd" else {}),
            "same_release_as_first": (None if one["digest"] is None else
                                      all(rows[(command, p)]["digest"] == one["digest"] for p in args.processes)),
        }
    print(json.dumps({"summary": summary, "train_size": args.train_size, "teachers": args.teachers,
                      "epochs": args.epochs, "load_average": os.getloadavg(), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
