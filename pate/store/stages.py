"""The table of a run directory's steps, written once: what each writes, what marks it as
made, and which later steps' artifacts a new one moves aside.

Two readers: `pate.store.door` takes each writer from here (what it stages, refuses and moves
aside), and `pate.steps.pipeline` builds `pate run`'s steps on these records (what must be
present for a step to count as done, the file that identifies it), adding only what is not
the store's: the config sections each step depends on, the files it reads, and its code.
"""

from __future__ import annotations

import dataclasses

from pate.store import rundir


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step as the run directory knows it.

    Attributes:
      name: the step: the door's writer, the staging folder's suffix, `pate run`'s step.
      command: the `pate` command (lock owner, messages).
      artifacts: what it writes.
      main: the file that identifies its output (written last, or the DP release).
      marks: the artifacts that say it was made (default: all of them): `pate run` counts it
        done when all are present; the door refuses a write over any of them without
        ``--overwrite``.
      aside: the stages made from its output, in order: a new one moves their artifacts
        aside (those it writes itself excepted), `later`.
      noun: "the new {noun} replace the ones ... were made from".
      again: "pass --overwrite to {again}" when its artifacts exist.
      create: whether the lock may create the run directory.
      commits_itself: it writes and commits its files itself (`pate analyze`: its report,
        perhaps outside the run); the door only holds the lock (`writes` is empty).
      keeps: the earlier stages whose output it reads and keeps a copy of, among its own
        artifacts, before a new one replaces it: ``(stage, the copies, the copy that identifies
        it)`` each. Round 2 keeps round 1's student and report; after it, ``student/`` and
        ``release.json`` are the student and report of both rounds, made from round 2.
    """

    name: str
    command: str
    artifacts: tuple[str, ...] = ()
    main: str = ""
    marks: tuple[str, ...] | None = None
    aside: tuple[str, ...] = ()
    noun: str = ""
    again: str = ""
    create: bool = True
    commits_itself: bool = False
    keeps: tuple[tuple[str, tuple[str, ...], str], ...] = ()

    @property
    def writes(self) -> tuple[str, ...]:
        """What the door stages and swaps in together for it."""
        return () if self.commits_itself else self.artifacts

    @property
    def made(self) -> tuple[str, ...]:
        """The artifacts that say it was made (`marks`, default all)."""
        return self.artifacts if self.marks is None else self.marks


_LABEL_AGAIN = "label again (the old release is replaced)"

#: Every step that writes a run directory, by name, in the order a run makes them.
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("teachers", "train-teachers", rundir.TEACHER_ARTIFACTS, rundir.TEACHERS_JSON,
          aside=("label", "round2", "student", "analyze"), noun="teachers",
          again="replace them or --resume to continue"),
    Stage("label", "label", rundir.LABEL_ARTIFACTS, rundir.LABELS_NPZ, aside=("round2", "student", "analyze"),
          noun="labels", again=_LABEL_AGAIN),
    # A fine-grained release (no teachers, no votes file): an older release's votes.npz goes aside.
    Stage("label-fine-grained", "label", (rundir.LABELS_NPZ,), rundir.LABELS_NPZ,
          aside=("label", "round2", "student", "analyze"), noun="labels", again=_LABEL_AGAIN),
    # A fine-grained release across silos (`pate silos run`): labels.npz alone, as above.
    Stage("label-silos", "silos run", (rundir.LABELS_NPZ,), rundir.LABELS_NPZ,
          aside=("label", "round2", "student", "analyze"), noun="labels", again=_LABEL_AGAIN),
    # Round 2 keeps round 1's release; it copies round 1's student and report (student-round1/,
    # release-round1.json) and moves the ones made before it aside. Its own release marks it.
    Stage("round2", "label --round 2", rundir.ROUND2_ARTIFACTS, rundir.LABELS_ROUND2_NPZ,
          marks=(rundir.VOTES_ROUND2_NPZ, rundir.LABELS_ROUND2_NPZ), aside=("student", "analyze"),
          noun="round-2 labels", again="label round 2 again (the old round-2 release is replaced)",
          keeps=(("student", (rundir.STUDENT_ROUND1_DIR, rundir.STUDENT_ROUND1_JSON), rundir.STUDENT_ROUND1_JSON),
                 ("analyze", (rundir.RELEASE_ROUND1_JSON,), rundir.RELEASE_ROUND1_JSON))),
    Stage("student", "train-student", rundir.STUDENT_ARTIFACTS, rundir.STUDENT_JSON, noun="student",
          again="train the student again"),
    Stage("analyze", "analyze", rundir.ANALYSIS_ARTIFACTS, rundir.PRIVACY_JSON, create=False,
          commits_itself=True),
    # A fine-grained release's report: no plot (its ε has no per-query curve).
    Stage("analyze-fine-grained", "analyze", (rundir.PRIVACY_JSON, rundir.RELEASE_JSON), rundir.PRIVACY_JSON,
          create=False, commits_itself=True),
    Stage("dpsgd", "dpsgd", rundir.DPSGD_ARTIFACTS, rundir.DPSGD_JSON, marks=(rundir.DPSGD_JSON,),
          noun="DP-SGD model", again="train the DP-SGD model again"),
    Stage("fedavg", "fedavg", rundir.FEDAVG_ARTIFACTS, rundir.FEDAVG_JSON, marks=(rundir.FEDAVG_JSON,),
          noun="federated model", again="train the federated model again"),
    # DP-FedSGD across silos (`pate silos fedavg`): the same files as `pate fedavg`.
    Stage("fedavg-silos", "silos fedavg", rundir.FEDAVG_ARTIFACTS, rundir.FEDAVG_JSON, marks=(rundir.FEDAVG_JSON,),
          noun="federated model", again="train the federated model again"),
    Stage("synth", "synth", rundir.SYNTH_ARTIFACTS, rundir.SYNTH_JSON, marks=(rundir.SYNTH_JSON,),
          noun="synthetic data", again="train the PATE-GAN again"),
    Stage("run", "run"),
)}


def later(stage: Stage) -> tuple[str, ...]:
    """The later steps' artifacts, made from `stage`'s, that a new `stage` moves aside: those
    of its `Stage.aside` stages, in order, less the ones it writes itself."""
    return tuple(a for name in stage.aside for a in STAGES[name].artifacts if a not in stage.artifacts)
