"""The one command to run first on a GPU machine: is the ensemble fast, and what does the
large job reach there? Prints one JSON object (and writes it to ``--out``).

    # here, once: the data travels with the working tree (data/ is git-ignored)
    mkdir -p data && cp -r /usr/share/datasets/fashion-mnist data/fashion-mnist
    # on the GPU machine, with a CUDA JAX installed (pip install -e '.[cuda]'):
    python bench/gpu.py --out gpu.json
    python bench/gpu.py --smoke            # CPU, tiny synthetic job: what the fast suite runs

Parts (one key each):

- ``environment``: JAX version, backend, devices, the data folder used.
- ``teachers``: `bench/teachers.py` on the config's teachers — ``--teachers`` (500) trained
  for ``--epochs`` (2) in the one vmapped program `pate train-teachers` compiles, and the
  same teachers one after another with the same program compiled for one teacher, in this
  one process: ``speedup_over_sequential`` is the ratio of their examples/s.
- ``run``: `pate run` of ``--config`` (configs/fashion_mnist_gpu.toml: 500 teachers, the
  release planned for a headline eps <= 2, a Wide-ResNet FixMatch student) in a fresh run
  directory: each step's seconds, ensemble, label and student accuracy, the headline eps
  and the planned P[headline <= target] from release.json. Its releases are charged to a
  ledger inside the run directory (``--workdir``/ledger) unless $PATE_LEDGER_DIR is set.

``--data DIR``: the Fashion-MNIST folder (default: data/fashion-mnist when present, else
$PATE_DATA_DIR or /usr/share/datasets/fashion-mnist). ``--smoke`` replaces the job by
configs/tiny.toml (synthetic data) with a one-block WRN student and a few steps, and the
teachers part by 2 teachers for 1 epoch; it also loads the GPU config to check it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU_CONFIG = ROOT / "configs" / "fashion_mnist_gpu.toml"
TINY = ROOT / "configs" / "tiny.toml"
SMOKE = {"student.model": "wrn", "student.conv_features": [8], "student.conv_kernels": [3],
         "student.conv_strides": [1], "student.wrn_blocks": 1, "student.steps": 2, "student.mu": 1,
         "student.batch_size": 8}


def data_folder(given: str | None) -> str:
    """The Fashion-MNIST folder: ``given``, else data/fashion-mnist when present, else ""
    (the loader's default: $PATE_DATA_DIR or /usr/share/datasets/fashion-mnist)."""
    if given:
        return str(Path(given).resolve())
    carried = ROOT / "data" / "fashion-mnist"
    return str(carried) if (carried / "train-images-idx3-ubyte.gz").exists() else ""


def environment(data: str) -> dict:
    import flax
    import jax

    return {"jax": jax.__version__, "flax": flax.__version__, "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "device_kind": jax.devices()[0].device_kind,  # the card every figure is named by
            "data": data or "(loader default)"}


def _echo(start: float):
    """Status lines on stderr, each with the seconds since ``start``: progress a log can show."""

    def echo(line: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {line}", file=sys.stderr, flush=True)

    return echo


def teachers_part(config: Path, overrides: list[str], teachers: int, epochs: int) -> dict:
    """`bench/teachers.py`: the vmapped ensemble against the same teachers in sequence."""
    spec = importlib.util.spec_from_file_location("bench_teachers", ROOT / "bench" / "teachers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--config", str(config), "--teachers", str(teachers), "--epochs", str(epochs), "--chunks", "auto"]
    for item in overrides:
        argv += ["--set", item]
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its own JSON; ours has it inside
        out = module.main(argv)
    entry = out["ensemble"]["auto"]
    return {**out, "vmapped_s": entry["run_s"], "sequential_s": out["sequential"]["run_s"],
            "speedup_over_sequential": entry["speedup_over_sequential"]}


def run_part(config_path: Path, overrides: dict, workdir: Path, seed: int | None,
             show_progress: bool = False) -> dict:
    """`pate run` end to end, with the figures of its summary, student.json and release.json;
    its status lines go to stderr as they come."""
    from pate.config import load_config
    from pate.steps.pipeline import run

    config = load_config(config_path, overrides)
    lines: list[str] = []
    start = time.perf_counter()
    echo = _echo(start)
    summary = run(config, workdir, seed=seed, show_progress=show_progress,
                  echo=lambda line: (lines.append(line), echo(line)))
    wall = time.perf_counter() - start
    release = json.loads((workdir / "release.json").read_text())
    student = json.loads((workdir / "student.json").read_text())
    teachers = json.loads((workdir / "teachers.json").read_text())
    details = release.get("details", {})
    return {"config": str(config_path), "overrides": overrides, "workdir": str(workdir),
            "wall_s": wall,
            "steps": {s.name: round(s.seconds, 2) for s in summary.steps},
            "teachers_train_s": teachers.get("train_time_s"), "teachers_epochs": teachers.get("epochs"),
            "student_train_s": student.get("train_time_s"),
            "student_ms_per_step": 1000 * student["train_time_s"] / max(int(student["steps"]), 1),
            "student_accuracy_last_weights": student.get("accuracy_last_weights"),
            "teachers": config.teachers.num_teachers, "student_model": config.student.model,
            "student_steps": config.student.steps, "queries": summary.num_queries,
            "answered": summary.num_answered, "ensemble_accuracy": summary.teacher_ensemble_accuracy,
            "label_accuracy": summary.label_accuracy, "student_accuracy": summary.student_accuracy,
            "headline_eps": release.get("eps"), "delta": release.get("delta"),
            "target_eps": details.get("target_eps"),
            "p_headline_within_target": details.get("p_headline_within_target")}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(GPU_CONFIG), help="the job to run end to end")
    parser.add_argument("--data", default=None, help="Fashion-MNIST folder (default: data/fashion-mnist)")
    parser.add_argument("--teachers", type=int, default=500, help="teachers of the vmapped-vs-sequential part")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of the vmapped-vs-sequential part")
    parser.add_argument("--workdir", default=None, help="run directory of the end-to-end part (default: a new "
                                                        "temporary folder)")
    parser.add_argument("--seed", type=int, default=None, help="release noise seed (research; default OS entropy)")
    parser.add_argument("--skip-teachers", action="store_true", help="no vmapped-vs-sequential part")
    parser.add_argument("--skip-run", action="store_true", help="no end-to-end part")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a key of the job's config (both parts); repeatable")
    parser.add_argument("--progress", action="store_true", help="draw the run's progress bars (stderr)")
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic job on any backend, in seconds")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    from pate.config import load_config, parse_override

    data = data_folder(args.data)
    out: dict = {"smoke": args.smoke, "environment": environment(data)}
    if args.smoke:
        load_config(GPU_CONFIG)  # the GPU job's config must load wherever the smoke runs
        config, teacher_sets, run_sets = TINY, [], dict(SMOKE)
        teachers, epochs = 2, 1
    else:
        config, teachers, epochs = Path(args.config), args.teachers, args.epochs
        teacher_sets, run_sets = ([f'data.path="{data}"'], {"data.path": data}) if data else ([], {})
    teacher_sets = teacher_sets + list(args.settings)
    run_sets = {**run_sets, **dict(parse_override(item) for item in args.settings)}
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pate-gpu-")) / "run"
    os.environ.setdefault("PATE_LEDGER_DIR", str(workdir.parent / "ledger"))
    if not args.skip_teachers:
        out["teachers"] = teachers_part(config, teacher_sets, teachers, epochs)
    if not args.skip_run:
        out["run"] = run_part(config, run_sets, workdir, args.seed, show_progress=args.progress)
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return out


if __name__ == "__main__":
    main()
