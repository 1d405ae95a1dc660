"""pate: Private Aggregation of Teacher Ensembles in JAX.

Arrays in, results out (docs/own-model.md)::

    result = pate.fit(x_private, y_private, x_public, x_eval=x_test, y_eval=y_test, workdir="runs/mine")
    result.indices, result.labels, result.predict(x), result.eps, result.report

The pipeline, one function per CLI command (each reads and writes one run directory)::

    from pate import load_config, run
    cfg = load_config("configs/quickstart.toml")
    run(cfg, "runs/quick")            # = train_teachers, label, train_student, analyze

- `train_teachers(config, workdir)` — the teacher ensemble (one vmapped JAX program).
- `label(config, workdir, budget=None)` — the teachers vote; noisy labels are released.
- `label_votes(votes, workdir, num_classes=..., mechanism=..., sigma=...)` — the same
  release from votes of teachers trained anywhere (`pate label --votes`).
- `train_student(config, workdir)` — the student on the released labels.
- `analyze(config, workdir)` / `analyze_workdir(workdir, delta=...)` — the ε report.
- `run(config, workdir)` — all of the above, skipping finished steps.
- `fit(x_private, y_private, x_public, ...)` — `run` on arrays: writes them as an owner-only
  .npz in the run directory and returns a `Result` (labels, a student that predicts, the report).

Each is defined in its step's module in `pate.steps` (`pate.steps.label`, ...), beside
the machinery the steps share (`pate.data`, `pate.programs.models`, `pate.programs.voting`, `pate.store.rundir`, ...).
The privacy analysis (no JAX) is the separate `analysis` package: ``help(analysis)``.
Heavy modules load on first use, so ``import pate`` does not import JAX.
"""

from __future__ import annotations

import importlib
from importlib import metadata as _metadata

from analysis.core.errors import PateError

try:
    __version__ = _metadata.version("pate-jax")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

# name -> (module, attribute), loaded on first access.
_API = {
    "load_config": ("pate.config", "load_config"),
    "train_teachers": ("pate.steps.teachers", "train_teachers"),
    "label": ("pate.steps.label", "label"),
    "label_votes": ("pate.steps.label_votes", "label_votes"),
    "train_student": ("pate.steps.student", "train_student"),
    "analyze": ("pate.steps.analyze", "analyze"),
    "analyze_workdir": ("pate.steps.analyze", "analyze_workdir"),
    "run": ("pate.steps.pipeline", "run"),
    "fit": ("pate.arrays", "fit"),
    "Result": ("pate.arrays", "Result"),
}

__all__ = ["PateError", "__version__", *_API]


def __getattr__(name):
    # PEP 562: the entry points load (and import JAX) on first access.
    if name in _API:
        module, attr = _API[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'pate' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
