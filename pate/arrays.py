"""Arrays in, results out: `fit` runs `pate run` on arrays held in memory and returns the
released labels, a student that predicts, and the report.

    import pate
    result = pate.fit(x_private, y_private, x_public, x_eval=x_test, y_eval=y_test, workdir="runs/mine")
    result.labels, result.indices        # the release: a label per queried pool point (-1: unanswered)
    result.predict(x_new)                # the student's class ids
    result.eps, result.delta             # the headline: what the data set has spent in all

The arrays are written as the `.npz` data set pate reads (``x_train, y_train`` the private records,
``x_test, y_test`` the public pool then the evaluation split), owner-only in an owner-only folder of
the run directory (``WORKDIR/private-data/records.npz``), and `pate.run` runs on it: the release is
charged to the data set's ledger as `pate run` charges it, and the ledger knows a data set by its
records, so the same arrays passed again are the same data set (their releases compose).

Inputs are images (N, H, W, C) — uint8 (scaled by 1/255) or floats in [0, 1] — or rows of
features (N, F), finite and of magnitude at most 1e6 (`pate.data.MAX_FEATURE`); labels are
integers 0..K-1. Bad arrays are refused in one line (`PateError`) before anything is written.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from analysis.core.errors import PateError
from pate.config import Config, apply_overrides, config_from_dict, config_to_dict, load_config
from pate.data import check_feature_values

#: Where, in a run directory, `fit` keeps the arrays it was given (owner-only folder and file).
PRIVATE_FOLDER = "private-data"
RECORDS = "records.npz"
#: The fewest public pool points `fit` takes (the student learns from the pool).
MIN_POOL = 10
#: The config keys that name a user's flax module.
MODULE_KEYS = {"teachers": "teachers.module", "student": "student.module"}


@dataclasses.dataclass(frozen=True)
class Result:
    """What `fit` returns: the release, the student and the report.

    `indices`, `labels`: the released labels (labels.npz: the pool rows queried, each one's
    label, -1 where unanswered). `eps`, `delta`: the headline, what the data set has spent in all
    (release.json's first figure); `release_eps`: this release's own ε. `report`: release.json
    whole. `label_accuracy`, `student_accuracy`: scores against `y_public` and `y_eval`, None
    when they were not given. `summary`: `pate run`'s (`RunSummary`). `workdir`: the run
    directory, None when `fit` made a temporary one (removed). `ledger`: the data set's ledger file.
    """

    indices: np.ndarray
    labels: np.ndarray
    eps: float | None
    delta: float | None
    release_eps: float | None
    report: dict
    label_accuracy: float | None
    student_accuracy: float | None
    summary: Any
    student: Any
    workdir: Path | None
    ledger: Path

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The student's class id for each input of ``x`` (inputs shaped as the training ones)."""
        x = _inputs(x, "x", self.student.image_shape)
        return np.asarray(self.student.predict(_as_model_input(x)), np.int64)

    def __repr__(self) -> str:
        answered = int(np.sum(self.labels >= 0))
        eps = "n/a" if self.eps is None else f"{self.eps:.3f}"
        return (f"pate.Result({answered} of {self.labels.size} labels released, headline eps {eps} at delta "
                f"{self.delta}, workdir={None if self.workdir is None else str(self.workdir)!r})")


def fit(x_private, y_private, x_public, *, y_public=None, x_eval=None, y_eval=None,
        config: Config | str | Path | None = None, overrides: Mapping[str, Any] | None = None,
        teachers_module=None, student_module=None, workdir: str | Path | None = None,
        overwrite: bool = False, seed: int | None = None, show_progress: bool = False,
        echo: Callable[[str], None] = print) -> Result:
    """Runs `pate run` on arrays: teachers (or fine-grained PATE) on ``x_private, y_private``, labels
    released on ``x_public``, a student trained on them, the report; charged to the data set's ledger.

    Args:
      x_private, y_private: the private records: images (N, H, W, C) or rows (N, F), and labels 0..K-1.
      x_public: the public pool (unlabelled), inputs shaped as the private ones.
      y_public: the pool's true labels, only to score the released labels (a benchmark).
      x_eval, y_eval: a labelled public evaluation split, only to score the teachers and the
        student; without it the scores printed are against placeholders and the result's are None.
      config: None (every key follows the data: `pate.config.data_defaults`), a bundled config's
        name or a TOML file (its `[data]` is replaced by the arrays), or a `Config`.
      overrides: ``{"section.key": value}`` on top of it, as `pate.load_config` takes them.
      teachers_module, student_module: a flax module class (or ``"package.module:Class"``) as the
        teachers' or the student's network (`model = "module"`); a class must be importable by
        its module and name.
      workdir: the run directory (kept; a second call on it skips what is up to date). None: a
        private temporary one, removed once the results are read (the ledger, outside it, stays).
      overwrite: run every step again (and replace another set of arrays in ``workdir``).
      seed: the noise seed (research only; never written). Default: OS entropy.
      show_progress: progress bars. echo: where status lines go.

    Raises:
      PateError: one line: bad arrays (shapes, NaN, labels not 0..K-1, a pool too small), a module
        class that cannot be named by import path, or any error `pate.run` reports.
    """
    from pate.steps.pipeline import run

    records = _checked(x_private, y_private, x_public, y_public, x_eval, y_eval)
    cfg = _config(config, overrides, teachers_module, student_module)
    temporary = workdir is None
    run_dir = Path(tempfile.mkdtemp(prefix="pate-fit-")) / "run" if temporary else Path(workdir)
    try:
        path = _write_records(run_dir, records, overwrite)
        data = dataclasses.replace(cfg.data, name="npz", path=str(path.resolve()),
                                   public_size=int(records["pool"]))
        raw = config_to_dict(dataclasses.replace(cfg, data=data))
        cfg = dataclasses.replace(config_from_dict(raw, "pate.fit"),  # checked again, with its data
                                  defaulted=cfg.defaulted - {"data.name", "data.path", "data.public_size"})
        summary = run(cfg, run_dir, overwrite=overwrite, seed=seed, show_progress=show_progress, echo=echo)
        return _result(run_dir, summary, records, None if temporary else run_dir, cfg)
    finally:
        if temporary:
            shutil.rmtree(run_dir.parent, ignore_errors=True)


# --------------------------------------------------------------------------- the arrays


def _checked(x_private, y_private, x_public, y_public, x_eval, y_eval) -> dict:
    """The arrays as the .npz will hold them, each refused in one line when it cannot be."""
    x_private = _inputs(x_private, "x_private")
    shape = x_private.shape[1:]
    y_private = _labels(y_private, "y_private", x_private.shape[0])
    classes = int(y_private.max()) + 1 if y_private.size else 0
    missing = np.setdiff1d(np.arange(classes), y_private)
    if classes < 2 or missing.size:
        raise PateError(f"y_private must hold the classes 0..K-1 (K >= 2), each at least once; "
                        + (f"it has only {classes} class" if classes < 2 else
                           f"class(es) {', '.join(map(str, missing[:5]))} occur in no record")
                        + ": relabel with np.unique(y, return_inverse=True)")
    x_public = _inputs(x_public, "x_public", shape)
    pool = int(x_public.shape[0])
    if pool < max(MIN_POOL, classes):
        raise PateError(f"x_public has {pool} points, too few: the pool needs at least "
                        f"{max(MIN_POOL, classes)} (the student learns from it); give more public points")
    if y_public is not None:
        y_public = _labels(y_public, "y_public", pool, classes)
    if (x_eval is None) != (y_eval is None):
        raise PateError("give x_eval and y_eval together (a labelled evaluation split), or neither")
    if x_eval is not None:
        x_eval = _inputs(x_eval, "x_eval", shape)
        y_eval = _labels(y_eval, "y_eval", x_eval.shape[0], classes)
    # Placeholders where no labels were given: the pool's labels only score the release, the
    # evaluation split only scores the models (pate needs one point of it).
    pool_y = y_public if y_public is not None else np.arange(pool, dtype=np.int64) % classes
    ex, ey = (x_eval, y_eval) if x_eval is not None else (x_public[:1], np.zeros(1, np.int64))
    return dict(x_train=x_private, y_train=y_private, x_test=np.concatenate([x_public, ex]),
                y_test=np.concatenate([pool_y, ey]).astype(np.int64), pool=pool, classes=classes,
                scored_pool=y_public is not None, scored_eval=x_eval is not None)


def _inputs(x, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``x`` as images (N, H, W, C) — uint8, or floats in [0, 1] — or rows (N, F) of finite numbers
    of magnitude at most `pate.data.MAX_FEATURE`."""
    try:
        x = np.asarray(x)
    except Exception as err:  # a ragged list
        raise PateError(f"{name} is not an array ({err})") from None
    if x.dtype == bool or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise PateError(f"{name} must hold numbers, found dtype {x.dtype}")
    if x.ndim not in (2, 4):
        hint = " (add the channel axis: x[..., None])" if x.ndim == 3 else ""
        raise PateError(f"{name} must be images (N, H, W, C) or rows of features (N, F), got shape {x.shape}{hint}")
    if x.shape[0] == 0 or 0 in x.shape[1:]:
        raise PateError(f"{name} is empty (shape {x.shape})")
    if shape is not None and tuple(x.shape[1:]) != tuple(shape):
        raise PateError(f"{name}'s inputs are shaped {x.shape[1:]}, the private records' {tuple(shape)}: "
                        "give inputs of one shape")
    if not np.isfinite(x).all():
        raise PateError(f"{name} holds NaN or infinite values; every input must be finite")
    if x.ndim == 4 and x.dtype != np.uint8 and (x.min() < 0 or x.max() > 1):
        raise PateError(f"{name}: images must be uint8 or floats in [0, 1], found values in "
                        f"[{float(x.min()):.4g}, {float(x.max()):.4g}]; scale them (x / 255)")
    if x.ndim == 2:  # the bound the .npz reader holds rows to, before they are written
        check_feature_values(x, name)
    return x if x.dtype == np.uint8 else x.astype(np.float32)


def _as_model_input(x: np.ndarray) -> np.ndarray:
    """What the models read (as `pate.data` loads an .npz): uint8 images scaled by 1/255, float32."""
    return x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)


def _labels(y, name: str, n: int, classes: int | None = None) -> np.ndarray:
    """``y`` as n integer labels (0..classes-1 when ``classes`` is known)."""
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n:
        raise PateError(f"{name} must be one label per input: shape ({n},), got {y.shape}")
    if np.issubdtype(y.dtype, np.floating) and np.isfinite(y).all() and np.all(y == np.round(y)):
        y = y.astype(np.int64)  # 3.0 is the label 3
    if y.dtype == bool or not np.issubdtype(y.dtype, np.integer):
        raise PateError(f"{name} must hold integer labels 0..K-1, found dtype {y.dtype}"
                        + (" with NaN or fractions" if np.issubdtype(y.dtype, np.floating) else ""))
    if y.size and y.min() < 0:
        raise PateError(f"{name} holds the label {int(y.min())}; labels are 0..K-1")
    if classes is not None and y.size and y.max() >= classes:
        raise PateError(f"{name} holds the label {int(y.max())}, a class no private record has "
                        f"(y_private's are 0..{classes - 1})")
    return y.astype(np.int64)


def _write_records(run_dir: Path, records: dict, overwrite: bool) -> Path:
    """The arrays as ``RUN/private-data/records.npz`` (0600 in a 0700 folder); refuses a run
    directory that holds other arrays unless ``overwrite``."""
    from analysis.core.files import write_atomic
    from pate.store.rundir import make_private_dir

    folder = run_dir / PRIVATE_FOLDER
    path = folder / RECORDS
    arrays = {k: records[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    if path.exists() and not overwrite:
        try:
            with np.load(path, allow_pickle=False) as old:
                same = all(k in old and old[k].dtype == v.dtype and np.array_equal(old[k], v)
                           for k, v in arrays.items())
        except Exception:
            same = False
        if same:
            return path
        raise PateError(f"{run_dir} holds a run of other arrays; use another workdir, or overwrite=True to "
                        "replace that run")
    run_dir.mkdir(parents=True, exist_ok=True)
    make_private_dir(folder)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_atomic(path, buf.getvalue(), private=True)
    return path


# --------------------------------------------------------------------------- the config


def _config(config, overrides, teachers_module, student_module) -> Config:
    """The config the arrays run under: ``config`` (None, a name or file, a `Config`), ``overrides``
    on top, and the modules given as classes named by import path."""
    overrides = dict(overrides or {})
    for section, module in (("teachers", teachers_module), ("student", student_module)):
        if module is not None:
            overrides[f"{section}.model"] = "module"
            overrides[MODULE_KEYS[section]] = module
    for key in MODULE_KEYS.values():
        if key in overrides and not isinstance(overrides[key], str):
            overrides[key] = import_path(overrides[key], key)
    if config is None:
        return config_from_dict(apply_overrides({}, overrides), "pate.fit")
    if isinstance(config, (str, Path)):
        return load_config(config, overrides or None)
    if not isinstance(config, Config):
        raise PateError(f"config must be None, a bundled config's name, a TOML file or a pate Config, "
                        f"got {type(config).__name__}")
    if not overrides:
        return config
    out = config_from_dict(apply_overrides(config_to_dict(config), overrides), "pate.fit")
    return dataclasses.replace(out, defaulted=config.defaulted - set(overrides))


def import_path(cls, where: str = "module") -> str:
    """``"package.module:Class"`` for a flax module class importable by that path (a class of
    ``__main__`` too, in the process that defined it); refused in one line when it is not."""
    import flax.linen as nn

    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise PateError(f"{where} must be a flax.linen.Module class or \"package.module:Class\", "
                        f"got {type(cls).__name__ if not isinstance(cls, type) else 'the class ' + cls.__name__}")
    module, name = getattr(cls, "__module__", ""), getattr(cls, "__qualname__", "")
    path = f"{module}:{name}"
    from pate.programs.user_model import resolve

    try:
        found = resolve(path, where) if "." not in name and "<" not in name else None
    except PateError:
        found = None
    if found is not cls:
        raise PateError(f"{where}: the class {name} cannot be named by import path ({path!r} does not give it); "
                        "define it at the top level of a module pate can import")
    return path


# --------------------------------------------------------------------------- the results


def _result(run_dir: Path, summary, records: dict, workdir: Path | None, config: Config) -> Result:
    """The run's release, student and report, read into memory."""
    from pate.programs.student_training import load_student
    from pate.release.labels import read_run_labels
    from pate.store import rundir
    from pate.store.ledger import Ledger

    labels = read_run_labels(run_dir)
    report = rundir.read_json(run_dir / rundir.RELEASE_JSON)
    student = load_student(run_dir)
    ledger = Ledger.for_config(config).path
    return Result(
        indices=np.asarray(labels["indices"]), labels=np.asarray(labels["labels"]),
        eps=report.get("eps"), delta=report.get("delta"), release_eps=report.get("release_eps"),
        report=report,
        label_accuracy=summary.label_accuracy if records["scored_pool"] else None,
        student_accuracy=summary.student_accuracy if records["scored_eval"] else None,
        summary=summary, student=student, workdir=workdir, ledger=ledger)
