"""The summary of `pate run`: what each step did and the headline figures, read from the
run's artifacts and `pipeline.json` (`pate.steps.pipeline`)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from analysis.mechanisms import registry
from pate.store import rundir
from pate.config import Config
from pate.release.labels import read_labels


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
    eps: float | None  # the headline: what the data set has spent in all (release.json's first figure)
    delta_total: float | None  # δ of the headline
    delta: float
    wall_time_s: float
    round2: str | None = None  # round 2's line: queries, answered, label accuracy
    release_eps: float | None = None  # this release's own eps (release.json's release_eps): never the headline
    release_delta: float | None = None

    def summary(self) -> str:
        def f(x, spec=".4f"):
            return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, spec)

        own = (f"this release's eps:    {f(self.release_eps, '.3f')}  at delta "
               f"{'n/a' if self.release_delta is None else format(self.release_delta, 'g')}: "
               + ("the one noisy histogram" if not registry.record_type(self.mechanism).needs_teachers else
                  "labels + sanitised eps" if registry.record_type(self.mechanism).sanitised else "labels")
               + " of this run alone (release.json's release_eps)")
        done = ", ".join(f"{s.name} {'ran' if s.ran else 'skipped'}" + (f" ({s.seconds:.0f} s)" if s.ran else "")
                         for s in self.steps)
        if not registry.record_type(self.mechanism).needs_teachers:  # no data-dependent or sanitised eps
            return "\n".join([
                f"pate run: {done}; total {self.wall_time_s:.0f} s",
                f"data set: {self.dataset}; labels: fine-grained, every one of the {self.num_queries} pool points "
                "from one release",
                f"label accuracy (true labels): {f(self.label_accuracy)}  [benchmark only: uses the pool's true labels]",
                f"student accuracy ({self.student_method}, evaluation split): {f(self.student_accuracy)}",
                f"HEADLINE eps:          {f(self.eps, '.3f')}  at delta "
                f"{'n/a' if self.delta_total is None else format(self.delta_total, 'g')}: data-independent, what "
                "the data set has spent in all — publish this (release.json's first figure)",
                *([own] if self.release_eps is not None else []),
            ])
        sanitised = registry.record_type(self.mechanism).sanitised
        release_line = (f"sanitised eps:         {f(self.eps_sanitized, '.3f')}  (smooth-sensitivity release: "
                        "publishable)" if sanitised else
                        f"sanitised eps:         none  ({self.mechanism} publishes its data-independent eps)")
        return "\n".join([
            f"pate run: {done}; total {self.wall_time_s:.0f} s",
            f"data set: {self.dataset}; labels: {self.mechanism}, {self.num_answered} of "
            f"{self.num_queries} queries answered",
            *([self.round2] if self.round2 else []),
            f"teacher ensemble accuracy (evaluation split):  {f(self.teacher_ensemble_accuracy)}",
            f"label accuracy (answered queries, true labels): {f(self.label_accuracy)}"
            "  [benchmark only: uses the pool's true labels]",
            f"student accuracy ({self.student_method}, evaluation split): {f(self.student_accuracy)}",
            f"data-independent eps:  {f(self.eps_data_independent, '.3f')}  (delta {self.delta:g})",
            f"data-dependent eps:    {f(self.eps_data_dependent, '.3f')}  PRIVATE: depends on the votes, "
            "do not publish",
            release_line,
            f"HEADLINE eps:          {f(self.eps, '.3f')}  at delta "
            f"{'n/a' if self.delta_total is None else format(self.delta_total, 'g')}: what the data set has spent "
            f"in all, this run's labels{' and sanitised eps' if sanitised else ''} included — publish this "
            "(release.json's first figure)",
            *([own] if self.release_eps is not None else []),
        ])


def _released(run: rundir.RunDir) -> tuple[int, int, str]:
    """Queries, answered queries and mechanism of the run's labels.npz."""
    release = read_labels(run / rundir.LABELS_NPZ, require_mechanism=False)
    labels = release["labels"]
    return int(labels.size), int(np.sum(labels >= 0)), release["mechanism"]


def summarise(config: Config, run_dir: rundir.RunDir, manifest, records: list[StepRecord],
               start: float) -> RunSummary:
    """The `RunSummary` of a finished run, read from its artifacts and the manifest."""
    teachers = run_dir.read_json(rundir.TEACHERS_JSON) if run_dir.exists(rundir.TEACHERS_JSON) else {}
    student = run_dir.read_json(rundir.STUDENT_JSON)
    privacy = run_dir.read_json(rundir.PRIVACY_JSON)
    release = run_dir.read_json(rundir.RELEASE_JSON)
    num_queries, num_answered, mechanism = _released(run_dir)
    public, private = privacy.get("public", {}), privacy.get("private", {})

    def number(x):
        try:
            return float(x)
        except (TypeError, ValueError):
            return float("nan")

    round2 = None
    if config.rounds.rounds == 2 and run_dir.exists(rundir.LABELS_ROUND2_NPZ):
        labels2 = read_labels(run_dir / rundir.LABELS_ROUND2_NPZ)["labels"]
        accuracy = manifest.figure("round2", "label_accuracy")
        round2 = (f"round 2: {int(np.sum(labels2 >= 0))} of {labels2.size} queries answered, label accuracy "
                  f"{accuracy:.4f}; the student and this release's eps below are of both rounds")
    return RunSummary(
        steps=tuple(records), dataset=config.data.name, mechanism=mechanism, num_queries=num_queries,
        num_answered=num_answered, teacher_ensemble_accuracy=number(teachers.get("ensemble_accuracy")),
        label_accuracy=manifest.figure("label", "label_accuracy"), student_method=str(student.get("method")),
        student_accuracy=number(student.get("accuracy")),
        eps_data_independent=number(public.get("eps_data_independent")),
        eps_data_dependent=number(private.get("eps_data_dependent")),
        eps_sanitized=number(public["eps_sanitized"]) if "eps_sanitized" in public else None,
        eps=number(release["eps"]) if "eps" in release else None,
        delta_total=number(release["delta"]) if "delta" in release else None,
        delta=config.privacy.delta, wall_time_s=time.time() - start, round2=round2,
        release_eps=number(release["release_eps"]) if "release_eps" in release else None,
        release_delta=number(release["release_delta"]) if "release_delta" in release else None)
