"""`pate run`: train-teachers → label → train-student → analyze over one run directory,
skipping every step whose artifacts are complete and were made from the same config.

Which config sections each step depends on (a change re-runs that step and every step
after it that reads its output):

=========  ==========================================  ===========================
step       sections                                     artifacts
=========  ==========================================  ===========================
teachers   data, teachers                               teachers/, teachers.json
label      data, teachers, aggregation                  votes.npz, labels.npz
student    data, teachers, aggregation, student         student/, student.json
analyze    data, teachers, aggregation, privacy         privacy.json, privacy.png
=========  ==========================================  ===========================

How a step is known to be valid: ``pipeline.json`` (written after each step) records,
per step, the hash of its sections (`section_hash`), the sha256 of its main artifact
and of the artifacts it read. (Those digests cover private files such as
``teachers.json``: ``pipeline.json`` is bookkeeping, not for publication.) A step is skipped when its artifacts are all present, its
main artifact is the one recorded, its sections hash equals the current config's, and
its inputs are the ones it was made from. Artifacts made by the single commands (no
record yet) are recognised by the config hash in their ``meta``: it must be the hash of
the current config or of the run's ``config.toml``.

A run directory whose ``config.toml`` has another ``[data]`` section (another data set,
another pool) is refused: nothing is deleted unless ``overwrite``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from analysis.errors import PateError
from pate import rundir
from pate.config import Config, config_hash, config_to_dict

#: The manifest of finished steps.
PIPELINE_JSON = "pipeline.json"

STEPS = ("teachers", "label", "student", "analyze")

#: The config sections each step's output depends on.
SECTIONS: dict[str, tuple[str, ...]] = {
    "teachers": ("data", "teachers"),
    "label": ("data", "teachers", "aggregation"),
    "student": ("data", "teachers", "aggregation", "student"),
    "analyze": ("data", "teachers", "aggregation", "privacy"),
}

#: What each step writes; all must be present for the step to count as done.
ARTIFACTS: dict[str, tuple[str, ...]] = {
    "teachers": rundir.TEACHER_ARTIFACTS,
    "label": rundir.LABEL_ARTIFACTS,
    "student": rundir.STUDENT_ARTIFACTS,
    "analyze": rundir.ANALYSIS_ARTIFACTS,
}

#: The file that identifies a step's output (written last, or the DP release).
MAIN_ARTIFACT = {"teachers": rundir.TEACHERS_JSON, "label": rundir.LABELS_NPZ,
                 "student": rundir.STUDENT_JSON, "analyze": rundir.PRIVACY_JSON}

#: The earlier steps whose output each step reads.
UPSTREAM: dict[str, tuple[str, ...]] = {
    "teachers": (),
    "label": ("teachers",),
    "student": ("teachers", "label"),
    "analyze": ("teachers", "label"),
}

#: The files each step reads from earlier steps.
INPUTS: dict[str, tuple[str, ...]] = {
    "teachers": (),
    "label": (rundir.TEACHERS_JSON,),
    "student": (rundir.LABELS_NPZ,),
    "analyze": (rundir.LABELS_NPZ,),  # written with votes.npz: identifies that label run too
}


def section_hash(config: Config, sections: Iterable[str]) -> str:
    """A stable 16-hex-digit hash of the named sections of a config (defaults included)."""
    full = config_to_dict(config)
    part = {name: full[name] for name in sorted(sections)}
    canonical = json.dumps(part, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _meta_hash(path: Path) -> str | None:
    """The config hash in an artifact's ``meta`` (JSON or npz), or None."""
    try:
        if path.suffix == ".json":
            meta = json.loads(path.read_text(encoding="utf-8")).get("meta", {})
        else:
            meta = rundir.read_npz(path).get("meta", {})
        return meta.get("config_hash") if isinstance(meta, dict) else None
    except (OSError, ValueError, PateError):
        return None


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step as `pate run` left it."""

    name: str
    ran: bool  # True: ran now; False: skipped (up to date)
    seconds: float
    reason: str


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """The outcome of `run`: what each step did and the headline figures."""

    steps: tuple[StepRecord, ...]
    dataset: str
    mechanism: str
    num_queries: int
    num_answered: int
    teacher_ensemble_accuracy: float
    label_accuracy: float
    student_method: str
    student_accuracy: float
    eps_data_independent: float
    eps_data_dependent: float
    eps_sanitized: float | None
    eps: float | None  # the headline: everything released (release.json)
    delta_total: float | None  # δ of the headline
    delta: float
    wall_time_s: float

    def summary(self) -> str:
        def f(x, spec=".4f"):
            return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, spec)

        done = ", ".join(f"{s.name} {'ran' if s.ran else 'skipped'}" + (f" ({s.seconds:.0f} s)" if s.ran else "")
                         for s in self.steps)
        return "\n".join([
            f"pate run: {done}; total {self.wall_time_s:.0f} s",
            f"data set: {self.dataset}; labels: {self.mechanism}, {self.num_answered} of "
            f"{self.num_queries} queries answered",
            f"teacher ensemble accuracy (evaluation split):  {f(self.teacher_ensemble_accuracy)}",
            f"label accuracy (answered queries, true labels): {f(self.label_accuracy)}"
            "  [benchmark only: uses the pool's true labels]",
            f"student accuracy ({self.student_method}, evaluation split): {f(self.student_accuracy)}",
            f"data-independent eps:  {f(self.eps_data_independent, '.3f')}  (delta {self.delta:g})",
            f"data-dependent eps:    {f(self.eps_data_dependent, '.3f')}  PRIVATE: depends on the votes, "
            "do not publish",
            f"sanitised eps:         {f(self.eps_sanitized, '.3f')}  (smooth-sensitivity release: publishable)",
            f"HEADLINE eps:          {f(self.eps, '.3f')}  at delta "
            f"{'n/a' if self.delta_total is None else format(self.delta_total, 'g')}: everything released "
            "(labels and the sanitised eps, its cost included) — publish this (release.json)",
        ])


class _Manifest:
    """``pipeline.json``: per step, its sections hash, main artifact and input digests."""

    def __init__(self, run: rundir.RunDir):
        self.run = run
        self.steps: dict[str, dict] = {}
        path = run / PIPELINE_JSON
        if path.exists():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
                self.steps = {k: v for k, v in doc.get("steps", {}).items() if isinstance(v, dict)}
            except (OSError, ValueError):
                self.steps = {}  # unreadable: every step is checked from its artifacts

    def digest_inputs(self, step: str) -> dict[str, str | None]:
        return {name: _sha256(self.run / name) for name in INPUTS[step]}

    def record(self, step: str, config: Config) -> None:
        self.steps[step] = {
            "sections": {name: section_hash(config, [name]) for name in SECTIONS[step]},
            "sections_hash": section_hash(config, SECTIONS[step]),
            "artifact_sha256": _sha256(self.run / MAIN_ARTIFACT[step]),
            "inputs_sha256": self.digest_inputs(step),
        }
        self.run.write_json(PIPELINE_JSON, {"steps": self.steps}, config)

    def forget(self, step: str) -> None:
        self.steps.pop(step, None)


def _stored_config(run: rundir.RunDir) -> Config | None:
    if not run.exists(rundir.CONFIG_TOML):
        return None
    try:
        return run.read_config()
    except PateError:
        return None


def _changed(names) -> str:
    return "config changed in " + ", ".join(f"[{n}]" for n in names)


def _check_state(run: rundir.RunDir, manifest: _Manifest, step: str, config: Config,
                 stored: Config | None, upstream_ran: bool) -> str | None:
    """None when `step` is up to date, else why it must run."""
    missing = [a for a in ARTIFACTS[step] if not run.exists(a)]
    if missing:
        return f"{', '.join(missing)} missing"
    if upstream_ran:
        return "an earlier step ran again"
    want = section_hash(config, SECTIONS[step])
    main = run / MAIN_ARTIFACT[step]
    entry = manifest.steps.get(step)
    if entry and entry.get("artifact_sha256") == _sha256(main):
        if entry.get("sections_hash") != want:
            recorded = entry.get("sections") if isinstance(entry.get("sections"), dict) else {}
            changed = [n for n in SECTIONS[step] if recorded.get(n) != section_hash(config, [n])]
            return _changed(changed or SECTIONS[step])
        if entry.get("inputs_sha256") != manifest.digest_inputs(step):
            return "its inputs changed"
        return None
    # Made by a single command: find its config by the hash in its meta.
    made_with = _meta_hash(main)
    source = next((c for c in (config, stored) if c is not None and config_hash(c) == made_with), None)
    if source is None and step == "teachers" and stored is not None:
        # Every command carries config.toml's [data] and [teachers] forward unchanged.
        source = stored
    if source is None:
        return "made by an unknown config"
    if section_hash(source, SECTIONS[step]) != want:
        return _changed([n for n in SECTIONS[step] if section_hash(source, [n]) != section_hash(config, [n])])
    if step == "student":
        info = run.read_json(rundir.STUDENT_JSON)
        if info.get("labels_sha256") != _sha256(run / rundir.LABELS_NPZ):
            return "labels.npz changed since the student was trained"
    return None


def _check_dataset(run: rundir.RunDir, stored: Config | None, config: Config) -> None:
    if stored is None:
        return
    a, b = config_to_dict(stored)["data"], config_to_dict(config)["data"]
    diff = [f"data.{k}" for k in b if a[k] != b[k]]
    if diff:
        raise PateError(f"{run.path} holds a run on data set {a['name']!r} with another [data] section "
                        f"({', '.join(diff)} differ); use another --workdir, or --overwrite to replace "
                        "the whole run")


def _label_accuracy(config: Config, run: rundir.RunDir) -> tuple[float, int, int, str]:
    """Released labels vs the pool's true labels (a benchmark figure; not for the student)."""
    from pate.data import load_dataset, split

    release = rundir.read_npz(run / rundir.LABELS_NPZ, required=("indices", "labels"))
    labels, indices = release["labels"], release["indices"]
    pool_y = split(load_dataset(config.data), config.data.public_size).pool_y
    answered = labels >= 0
    acc = float(np.mean(labels[answered] == pool_y[indices[answered]])) if answered.any() else float("nan")
    return acc, int(labels.size), int(answered.sum()), str(release.get("mechanism", "?"))


def preflight(config: Config, seed: int | None) -> None:
    """Every check that can be made before a step runs, made before the first one: a
    failure after `label` would have spent the privacy of a release for nothing.

    Checks the seed (0 <= seed < 2**128, used by the aggregator and the sanitised release)
    and the release settings (`pate.label.check_accountable`).
    """
    from pate.aggregation import noise_source
    from pate.label import check_accountable

    noise_source(seed)  # the same 128-bit check serves the aggregator and the release
    check_accountable(config.aggregation, config.privacy)


def run(config: Config, workdir: str | Path, *, overwrite: bool = False, seed: int | None = None,
        show_progress: bool = True, echo: Callable[[str], None] = print) -> RunSummary:
    """Runs the whole job over one run directory, skipping what is up to date.

    Args:
      config: the resolved config.
      workdir: the run directory (created if missing).
      overwrite: run every step again from scratch.
      seed: noise seed of the aggregator and of the sanitised release (research only;
        never written). Default: fresh OS entropy.
      show_progress: draw progress bars for the teachers and the student.
      echo: where status lines go.

    Returns:
      A `RunSummary` (its `summary()` is what `pate run` prints).

    Raises:
      PateError: the run directory belongs to another data set (nothing is touched), or
        any step's own error (the artifacts of earlier steps are kept).
    """
    start = time.time()
    preflight(config, seed)
    run_dir = rundir.RunDir(workdir)
    stored = _stored_config(run_dir)
    if run_dir.exists(rundir.CONFIG_TOML) and stored is None and not overwrite:
        raise PateError(f"{run_dir / rundir.CONFIG_TOML} is not a readable config; use another "
                        "--workdir, or --overwrite to replace the run")
    if not overwrite:
        _check_dataset(run_dir, stored, config)
    manifest = _Manifest(run_dir)
    records: list[StepRecord] = []
    ran: set[str] = set()

    for step in STEPS:
        reason = "--overwrite" if overwrite else _check_state(run_dir, manifest, step, config, stored,
                                                              bool(ran & set(UPSTREAM[step])))
        if reason is None:
            echo(f"[{step}] up to date: skipped")
            records.append(StepRecord(step, False, 0.0, "up to date"))
            continue
        echo(f"[{step}] running ({reason})")
        manifest.forget(step)
        t0 = time.time()
        _run_step(step, config, run_dir, stored, overwrite=overwrite, seed=seed,
                  show_progress=show_progress, echo=echo)
        manifest.record(step, config)
        stored = _stored_config(run_dir)
        records.append(StepRecord(step, True, time.time() - t0, reason))
        ran.add(step)

    run_dir.write_config(config)
    teachers = run_dir.read_json(rundir.TEACHERS_JSON)
    student = run_dir.read_json(rundir.STUDENT_JSON)
    privacy = run_dir.read_json(rundir.PRIVACY_JSON)
    release = run_dir.read_json(rundir.RELEASE_JSON)
    label_acc, num_queries, num_answered, mechanism = _label_accuracy(config, run_dir)
    public, private = privacy.get("public", {}), privacy.get("private", {})

    def number(x):
        try:
            return float(x)
        except (TypeError, ValueError):
            return float("nan")

    summary = RunSummary(
        steps=tuple(records), dataset=config.data.name, mechanism=mechanism, num_queries=num_queries,
        num_answered=num_answered, teacher_ensemble_accuracy=number(teachers.get("ensemble_accuracy")),
        label_accuracy=label_acc, student_method=str(student.get("method")),
        student_accuracy=number(student.get("accuracy")),
        eps_data_independent=number(public.get("eps_data_independent")),
        eps_data_dependent=number(private.get("eps_data_dependent")),
        eps_sanitized=number(public["eps_sanitized"]) if "eps_sanitized" in public else None,
        eps=number(release["eps"]) if "eps" in release else None,
        delta_total=number(release["delta"]) if "delta" in release else None,
        delta=config.privacy.delta, wall_time_s=time.time() - start)
    return summary


def _run_step(step: str, config: Config, run_dir: rundir.RunDir, stored: Config | None, *,
              overwrite: bool, seed: int | None, show_progress: bool, echo) -> None:
    workdir = run_dir.path
    if step == "teachers":
        from pate.teachers import train_teachers

        resume = (not overwrite and run_dir.exists(rundir.TEACHERS_DIR)
                  and not run_dir.exists(rundir.TEACHERS_JSON) and stored is not None
                  and section_hash(stored, SECTIONS["teachers"]) == section_hash(config, SECTIONS["teachers"]))
        if resume:
            echo(f"[teachers] resuming from the checkpoint in {run_dir / rundir.TEACHERS_DIR}")
            # Resume with the stored config (train_teachers checks it is unchanged); its
            # [data] and [teachers] equal the current ones.
            result = train_teachers(stored, workdir, resume=True, show_progress=show_progress)
        else:
            result = train_teachers(config, workdir, overwrite=True, show_progress=show_progress)
        echo(result.summary())
    elif step == "label":
        from pate.label import label

        label(config, workdir, seed=seed, overwrite=True, echo=echo)
    elif step == "student":
        from pate.student import train_student

        result = train_student(config, workdir, overwrite=True, show_progress=show_progress,
                               echo=echo)
        echo(result.summary())
    elif step == "analyze":
        from pate.analyze import analyze

        analyze(config, workdir, seed=seed, echo=echo)
    else:  # pragma: no cover
        raise AssertionError(step)
