"""`pate run`: train-teachers → label → train-student → analyze over one run directory,
skipping every step whose artifacts are complete and were made from the same config.

Which config sections each step depends on (a change re-runs that step and every step
after it that reads its output); what each writes, and what marks it as made, is the store's
table of steps (`pate.store.stages.STAGES`, which the door's writers read too):

=========  ==========================================
step       sections
=========  ==========================================
teachers   data, teachers, fine_grained.scattering_* and groups (a teacher map's)
label      data, teachers, aggregation, privacy.target_*
student    data, teachers, aggregation, student
analyze    data, teachers, aggregation, privacy
=========  ==========================================

How a step is known to be valid: ``pipeline.json`` (written after each step) records,
per step, the hash of its sections (`section_hash`), the digest of its main artifact
and of the artifacts it read. Those files include private ones (``teachers.json``,
``privacy.json``), which an adversary who knows all votes but one teacher's can rebuild
byte for byte for each neighbouring data set; a plain sha256 in ``pipeline.json``
(world-readable) would tell them which one is real. So the digests are HMAC-SHA256
under the run's secret key ``pipeline.key`` (`pate.store.digests.keyed_digest`, 0600): they
still show that a file is unchanged, and without the key they reveal nothing of it. A
lost key only makes the digests match nothing: steps are then checked by their config
hashes, as below. A step is skipped when its artifacts are all present, its
main artifact is the one recorded, its sections hash equals the current config's, and
its inputs are the ones it was made from. Artifacts made by the single commands (no
record yet) are recognised by the config hash in their ``meta``: it must be the hash of
the current config or of the run's ``config.toml``.

Before a step is skipped its artifacts are checked (`pate.store.digests.damaged`): a damaged
student or report is made again, damaged teachers or labels are refused (a new release
needs ``--overwrite``). Results flow forward: ``pipeline.json`` keeps the figures each
step returned (the label accuracy `label` measured; n/a for labels made elsewhere).

A run directory whose ``config.toml`` has another ``[data]`` section (another data set,
another pool) is refused: nothing is deleted unless ``overwrite``.

Distributed (`pate run --distributed`, docs/scale.md): process 0 decides as above; the
teachers, label and round-2 steps (`SHARED`) run on every process by their own distributed
paths, each told by process 0 at an agreement (`_Crew`, `_follow`); the others wait for its
word while it trains round 1's student and writes its report alone (with ``[rounds] rounds =
2``); after the last shared step every process leaves the cluster together and process 0
trains the student and writes the report alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Callable, Iterable


from analysis.core.errors import PateError
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from pate.store import digests, rundir, stages
from pate.release.labels import read_labels, read_run_labels, release_digest, release_subjects
from pate.config import check_config, Config, config_hash, config_to_dict
from pate.programs.data_facts import check_maps_ready, facts, say_data_note, with_data_defaults
from pate.store.door import step
from pate.release.run_summary import RunSummary, StepRecord, summarise

@dataclasses.dataclass(frozen=True)
class _Context:
    """What every step is run with."""

    config: Config
    run_dir: rundir.RunDir
    stored: Config | None  # the run's config.toml before the step, if readable
    overwrite: bool
    seed: int | None
    show_progress: bool
    echo: Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of `pate run`.

    Attributes:
      name: how the run names it.
      sections: the config sections its output depends on.
      artifacts: what it writes; all must be present for it to count as done.
      main: the file that identifies its output (written last, or the DP release).
      upstream: the earlier steps whose output it reads.
      inputs: the files it reads from them.
      run: runs it; returns the figures `pipeline.json` keeps for the summary.
      kept: round 1's student or release as round 2 kept them (`steps_of`).
      stage: its record in the store's table of steps (`_step`).
    """

    name: str
    sections: tuple[str, ...]
    artifacts: tuple[str, ...]
    main: str
    upstream: tuple[str, ...]
    inputs: tuple[str, ...]
    run: Callable[[_Context], dict]
    kept: bool = False  # round 1's student or release as round 2 kept them: never made again in place
    stage: str = ""  # its record in `pate.store.stages.STAGES` (what it writes; the door's writer)


def _step(stage: str, sections: tuple[str, ...], upstream: tuple[str, ...], inputs: tuple[str, ...],
          run: Callable[[_Context], dict], name: str = "") -> Step:
    """A step on the store's record of `stage` (`pate.store.stages.STAGES`): its artifacts are
    the ones that mark the stage as made, its main file the stage's; named `name` (default the stage's)."""
    record = stages.STAGES[stage]
    return Step(name or record.name, sections, record.made, record.main, upstream, inputs, run, stage=stage)


# The scattering settings and a learned map's weights are those of a teacher map (`[teachers]
# features`): named key by key, so runs that leave them at their defaults keep their hashes.
_MAP_KEYS = ("features.weights", "features.filters", "features.hog_cell", "features.hog_bins", "features.hog_signed",
             "features.hog_block")
_TEACHER_SECTIONS = ("data", "teachers", "fine_grained.scattering_j", "fine_grained.scattering_l", "fine_grained.groups",
                     *_MAP_KEYS)
_TARGET_KEYS = ("privacy.target_eps", "privacy.target_probability", "privacy.target_accuracy",
                "rounds.round1_target_eps")  # plan the labels


def _resumes_teachers(run_dir: rundir.RunDir, config: Config, stored: Config | None, overwrite: bool) -> bool:
    """Whether the teachers step continues a killed training (its checkpoint there, no
    teachers.json, the same teacher sections in config.toml) rather than starting afresh."""
    return (not overwrite and run_dir.exists(rundir.TEACHERS_DIR)
            and not run_dir.exists(rundir.TEACHERS_JSON) and stored is not None
            and section_hash(stored, _TEACHER_SECTIONS) == section_hash(config, _TEACHER_SECTIONS))


def _train_teachers(ctx: _Context) -> dict:
    from pate.steps.teachers import train_teachers

    run_dir, stored, config = ctx.run_dir, ctx.stored, ctx.config
    if _resumes_teachers(run_dir, config, stored, ctx.overwrite):
        ctx.echo(f"[teachers] resuming from the checkpoint in {run_dir / rundir.TEACHERS_DIR}")
        # Resume with the stored config (train_teachers checks it is unchanged); its
        # [data] and [teachers] equal the current ones.
        result = train_teachers(stored, run_dir.path, resume=True, show_progress=ctx.show_progress)
    else:
        result = train_teachers(config, run_dir.path, overwrite=True, show_progress=ctx.show_progress)
    ctx.echo(result.summary())
    return {}


def _label(ctx: _Context) -> dict:
    from pate.steps.label import label

    result = label(ctx.config, ctx.run_dir.path, seed=ctx.seed, overwrite=True, echo=ctx.echo)
    # A benchmark figure (the pool's true labels): kept for the summary of later runs
    # that skip this step, so that no run reloads the data set to compute it again.
    return {"label_accuracy": result.label_accuracy}


def _train_student(ctx: _Context, rounds: int | None = 1) -> dict:
    """The student of round 1's labels (``rounds`` 1), or of both rounds (None)."""
    from pate.steps.student import train_student

    result = train_student(ctx.config, ctx.run_dir.path, overwrite=True, show_progress=ctx.show_progress,
                           rounds=rounds, echo=ctx.echo)
    ctx.echo(result.summary())
    return {}


def _round2(ctx: _Context) -> dict:
    from pate.steps.label_round2 import label_round2

    result = label_round2(ctx.config, ctx.run_dir.path, seed=ctx.seed, overwrite=True, echo=ctx.echo)
    return {"label_accuracy": result.label_accuracy}


def _analyze(ctx: _Context) -> dict:
    from pate.steps.analyze import analyze

    analyze(ctx.config, ctx.run_dir.path, seed=ctx.seed, echo=ctx.echo)
    return {}


#: The steps in order (the module docstring's table).
STEPS: tuple[Step, ...] = (
    _step("teachers", _TEACHER_SECTIONS, upstream=(), inputs=(), run=_train_teachers),
    _step("label", ("data", "teachers", "aggregation", *_TARGET_KEYS), upstream=("teachers",),
          inputs=(rundir.TEACHERS_JSON,), run=_label),
    _step("student", ("data", "teachers", "aggregation", "student"), upstream=("teachers", "label"),
          inputs=(rundir.LABELS_NPZ,), run=_train_student),
    # labels.npz is written with votes.npz: it identifies that label run too.
    _step("analyze", ("data", "teachers", "aggregation", "privacy"), upstream=("teachers", "label"),
          inputs=(rundir.LABELS_NPZ,), run=_analyze),
)


#: With ``[rounds] rounds = 2``: round 2 on the finished round 1, the student of both rounds, their report.
_ROUND2_SECTIONS = ("data", "teachers", "aggregation", "student", "privacy", "rounds")
ROUND2_STEPS: tuple[Step, ...] = (
    _step("round2", _ROUND2_SECTIONS, upstream=("teachers", "label", "student", "analyze"),
          inputs=(rundir.LABELS_NPZ,), run=_round2),
    _step("student", _ROUND2_SECTIONS, upstream=("round2",), inputs=(rundir.LABELS_ROUND2_NPZ,),
          run=lambda ctx: _train_student(ctx, rounds=None), name="student2"),
    _step("analyze", _ROUND2_SECTIONS, upstream=("round2",), inputs=(rundir.LABELS_ROUND2_NPZ,), run=_analyze,
          name="analyze2"),
)


#: With ``[aggregation] mechanism = "fine-grained"``: no teachers; one release of the private
#: records' own votes labels the whole pool, then the student and the report (no plot: its ε
#: has no per-query curve).
_FINE_SECTIONS = ("data", "aggregation", "fine_grained", "features.map", "features.whiten", *_MAP_KEYS)
FINE_GRAINED_STEPS: tuple[Step, ...] = (
    _step("label-fine-grained", (*_FINE_SECTIONS, "privacy.delta"), upstream=(), inputs=(), run=_label,
          name="label"),
    _step("student", (*_FINE_SECTIONS, "student"), upstream=("label",), inputs=(rundir.LABELS_NPZ,),
          run=_train_student),
    _step("analyze-fine-grained", (*_FINE_SECTIONS, "privacy"), upstream=("label",), inputs=(rundir.LABELS_NPZ,),
          run=_analyze, name="analyze"),
)


def steps_of(config: Config, run_dir: rundir.RunDir) -> tuple[Step, ...]:
    """The steps a run takes: `STEPS`, then with two rounds `ROUND2_STEPS`. Once round 2
    has run, round 1's student and report are the copies it kept (student-round1/,
    release-round1.json): ``student/`` and ``release.json`` are then round 2's. A
    fine-grained run takes `FINE_GRAINED_STEPS`."""
    if not registry.record_type(config.aggregation.mechanism).needs_teachers:
        return FINE_GRAINED_STEPS
    if config.rounds.rounds == 1:
        return STEPS
    kept = {name: dict(artifacts=copies, main=main, kept=True)
            for name, copies, main in stages.STAGES["round2"].keeps}
    if not run_dir.exists(rundir.STUDENT_ROUND1_JSON):
        kept = {}
    return tuple(dataclasses.replace(s, **kept.get(s.name, {})) for s in STEPS) + ROUND2_STEPS


#: Keys that permit a step rather than shape what it makes: in no step's hash, so setting one
#: on a finished run makes nothing again (a second release of the same labels).
PERMISSIONS = ("aggregation.allow_near_chance",)


def section_hash(config: Config, sections: Iterable[str]) -> str:
    """A stable 16-hex-digit hash of the named sections of a config (defaults included);
    "section.key" names one key, left out while it has its default (so adding such a key
    to a step leaves the hashes of runs that do not use it unchanged). `PERMISSIONS` are
    left out always."""
    full, default = config_to_dict(config), config_to_dict(Config())
    for name in PERMISSIONS:
        table, _, key = name.partition(".")
        full[table].pop(key, None)
        default[table].pop(key, None)
    part = {}
    for name in sorted(sections):
        table, _, key = name.partition(".")
        if not key:
            part[name] = full[name]
        elif full[table][key] != default[table][key]:
            part[name] = full[table][key]
    canonical = json.dumps(part, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _meta_hash(path: Path) -> str | None:
    """The config hash in an artifact's ``meta`` (JSON or npz), or None."""
    try:
        if path.suffix == ".json":
            meta = rundir.read_json(path).get("meta", {})
        else:
            meta = rundir.read_npz(path).get("meta", {})
        return meta.get("config_hash") if isinstance(meta, dict) else None
    except (OSError, ValueError, PateError):
        return None


class _Manifest:
    """``pipeline.json``: per step, its sections hash, main artifact and input digests."""

    def __init__(self, run: rundir.RunDir):
        self.run = run
        self.steps: dict[str, dict] = {}
        self._key: bytes | None = None
        path = run / rundir.PIPELINE_JSON
        if path.exists():
            try:
                doc = rundir.read_json(path)  # a plain file: never a FIFO's endless wait
                self.steps = {k: v for k, v in doc.get("steps", {}).items() if isinstance(v, dict)}
            except (OSError, ValueError, AttributeError, PateError):
                self.steps = {}  # unreadable: every step is checked from its artifacts
            # Plain digests an older version wrote: removed now, even if every step is skipped.
            if any([e.pop(k, None) for e in self.steps.values() for k in ("artifact_sha256", "inputs_sha256")]):
                rundir.atomic_write_text(path, json.dumps({**doc, "steps": self.steps}, indent=2) + "\n")

    def digest(self, path: Path) -> str | None:
        """The file's HMAC-SHA256 under the run's secret key, or None when it is missing."""
        if not path.is_file():
            return None
        if self._key is None:
            self._key = digests.digest_key(self.run.path)
        return digests.keyed_digest(path, self._key)

    def digest_inputs(self, step: Step) -> dict[str, str | None]:
        return {name: self.digest(self.run / name) for name in step.inputs}

    def record(self, step: Step, config: Config, figures: dict) -> None:
        self.steps[step.name] = {
            "sections": {name: section_hash(config, [name]) for name in step.sections},
            "sections_hash": section_hash(config, step.sections),
            "hash_version": HASH_VERSION,
            "artifact_hmac": self.digest(self.run / step.main),
            "inputs_hmac": self.digest_inputs(step),
            "figures": figures,
        }
        self.run.write_json(rundir.PIPELINE_JSON, {"steps": self.steps}, config)

    def figure(self, step: str, key: str) -> float:
        """A figure a step recorded when it ran (NaN when it did not run under `pate run`)."""
        figures = self.steps.get(step, {}).get("figures")
        value = figures.get(key) if isinstance(figures, dict) else None
        return float(value) if isinstance(value, (int, float)) else float("nan")

    def forget(self, step: str) -> None:
        self.steps.pop(step, None)


#: Bumped when a version of pate adds config keys (their defaults change every hash).
HASH_VERSION = 5  # 3: [rounds] round1_target_eps, student_init, student_steps; 4: [rounds] check;
#                  5: [data] dataset


def _older_version_same_toml(entry: dict, stored: Config | None, step: Step, want: str) -> bool:
    """A record written by an older pate (no ``hash_version``; its hashes lack the keys added
    since) is taken as current when the run's config.toml, read now, has the step's sections
    of the current config: otherwise upgrading pate would re-run finished steps (a second
    release of the labels)."""
    return (entry.get("hash_version", 1) < HASH_VERSION and stored is not None
            and section_hash(stored, step.sections) == want)


def _changed(names) -> str:
    return "config changed in " + ", ".join(f"[{n}]" for n in names)


def _kept_state(run: rundir.RunDir, step: Step) -> str | None:
    """None when round 1's student or release, as round 2 kept them (`steps_of`), is whole
    and made from ``labels.npz``, else what is wrong. Its config is checked by round 2's
    step, whose sections hold every section of theirs: they were made before round 2."""
    missing = [a for a in step.artifacts if not run.exists(a)]
    if missing:
        return f"{', '.join(missing)} missing"
    damage = digests.damaged(run.path, step.artifacts)
    if damage is not None:
        return damage
    doc = run.read_json(step.main)
    if step.name == "student":
        made_from = doc.get("labels_sha256") == release_digest(run.path, 1)
    else:
        made_from = (doc.get("meta") or {}).get("labels_sha256") in release_subjects(run / rundir.LABELS_NPZ)
    return None if made_from else f"{step.main} was not made from {rundir.LABELS_NPZ}"


def _refuse_replacing(run: rundir.RunDir, step: Step, reason: str) -> None:
    """`pate run` never replaces round 2's release nor what it stood on (round 1's student and
    release it kept): it refuses in one line, naming what and the options that would."""
    if step.kept:
        raise PateError(f"{run / step.main}: {reason}; round 2's release stood on it and `pate run` does not "
                        "make it again over a finished round 2: run with --overwrite (every step again, new "
                        "releases) or in another --workdir")
    if step.name == "round2" and run.exists(rundir.LABELS_ROUND2_NPZ):
        raise PateError(f"{run / rundir.LABELS_ROUND2_NPZ} is a finished round-2 release ({reason}); `pate run` "
                        f"does not replace it: `pate label --round 2 --workdir {run.path} --overwrite` releases "
                        "round 2 again, or use another --workdir")


def _refuse_redrawing(run: rundir.RunDir, step: Step, config: Config, stored: Config | None) -> None:
    """`pate run` never draws a release again for a change that is only post-processing of the
    finished one (`pate.release.fine_grained_release.POST_PROCESSING`: the smoothing): the labels the
    ledger charged are written once, with their smoothing (and releases written before labels.npz kept
    its noisy histogram have nothing to smooth again), so it would take a new draw, charged; refused in
    one line."""
    from pate.config import config_diff
    from pate.release.fine_grained_release import POST_PROCESSING

    if step.name != "label" or stored is None or not run.exists(rundir.LABELS_NPZ):
        return
    if registry.record_type(config.aggregation.mechanism).needs_teachers:
        return
    changed = config_diff(stored, config)
    if changed and set(changed) <= set(POST_PROCESSING):
        raise PateError(f"{', '.join(changed)} changed on a finished release ({run / rundir.LABELS_NPZ}): it is "
                        "post-processing, but the released labels are written once with their smoothing, so applying it "
                        "would draw and charge a new release; restore the setting, or release again on purpose with "
                        "--overwrite")


def _check_rounds(config: Config, run: rundir.RunDir) -> None:
    """Refuses a rounds = 1 config on a run that holds round 2: its steps would train the
    round-1 student over the student of both rounds and publish over their release."""
    held = [n for n in (rundir.LABELS_ROUND2_NPZ, rundir.STUDENT_ROUND1_JSON) if run.exists(n)]
    if config.rounds.rounds == 1 and held:
        raise PateError(f"{run.path} holds round 2 ({', '.join(held)}) and this config has rounds = 1: its run "
                        "would replace the student of both rounds and their release.json; run with rounds = 2 "
                        "(as the run's config.toml), --overwrite (every step again) or another --workdir")


def _as_recorded(config: Config, step: Step) -> Config:
    """The config a step's artifacts record when it ran from `config`: the student of both
    rounds records the steps it trained (``[rounds] student_steps`` for ``[student] steps``,
    `pate.steps.student.train_student`), and config.toml says so until the run ends."""
    if step.name == "student2" and config.rounds.student_steps:
        steps = config.rounds.student_steps
        return dataclasses.replace(config, student=dataclasses.replace(config.student, steps=steps))
    return config


def _check_state(run: rundir.RunDir, manifest: _Manifest, step: Step, config: Config,
                 stored: Config | None, upstream_ran: bool) -> str | None:
    """None when `step` is up to date, else why it must run."""
    if step.kept:
        return _kept_state(run, step)
    missing = [a for a in step.artifacts if not run.exists(a)]
    if missing:
        return f"{', '.join(missing)} missing"
    damage = digests.damaged(run.path, step.artifacts, {rundir.LABELS_NPZ: lambda p: read_run_labels(p.parent)})
    if damage is not None and step.name in ("teachers", "label"):
        raise PateError(f"{damage}: `pate run` does not replace damaged teachers or a release on its own; "
                        "move them aside, or run again with --overwrite")
    if damage is not None:
        return damage
    if upstream_ran:
        return "an earlier step ran again"
    want = section_hash(config, step.sections)
    main = run / step.main
    entry = manifest.steps.get(step.name)
    if entry and entry.get("artifact_hmac") == manifest.digest(main):
        if entry.get("sections_hash") != want and not _older_version_same_toml(entry, stored, step, want):
            recorded = entry.get("sections") if isinstance(entry.get("sections"), dict) else {}
            changed = [n for n in step.sections if recorded.get(n) != section_hash(config, [n])]
            return _changed(changed or step.sections)
        if entry.get("inputs_hmac") != manifest.digest_inputs(step):
            return "its inputs changed"
        return None
    # Made by a single command (or killed before its record): find its config by the hash in its meta.
    made_with, recorded = _meta_hash(main), _as_recorded(config, step)
    source = next((c for c in (config, recorded, stored) if c is not None and config_hash(c) == made_with), None)
    if source is None and step.name == "teachers" and stored is not None:
        # Every command carries config.toml's [data] and [teachers] forward unchanged.
        source = stored
    if source is None:
        return "made by an unknown config"
    if section_hash(source, step.sections) not in (want, section_hash(recorded, step.sections)):
        return _changed([n for n in step.sections if section_hash(source, [n]) != section_hash(config, [n])])
    if step.name in ("student", "student2"):
        info = run.read_json(step.main)
        if info.get("labels_sha256") != release_digest(run.path, 1 if step.name == "student" else None):
            return "the labels changed since the student was trained"
    return None


def preflight(config: Config, seed: int | None) -> Mechanism | None:
    """Every check that can be made before a step runs, made before the first one: a
    failure after `label` would have spent the privacy of a release for nothing.

    Checks the seed (0 <= seed < 2**128), the teachers' and student's models against the data's
    public facts (`pate.programs.models.check_models`: a CNN on rows, a user's module on a sample
    batch), the release settings (`accountable_record`, whose record it returns), the queries and
    threshold against the pool (``data.public_size``) and ensemble size the config fixes, and what
    the release is expected to buy on simulated public votes (`pate.release.outcome`: near chance
    is refused unless ``[aggregation] allow_near_chance``; checked silently here, printed by the
    label step): no refusal the config implied comes after hours of teacher training."""
    from pate.release import outcome, soft_targets
    from pate.release.aggregation import noise_source
    from pate.programs.models import check_models
    from pate.release.budget import accountable_record, resolve

    noise_source(seed)  # the same 128-bit check serves the aggregator and the release
    needs_teachers = registry.record_type(config.aggregation.mechanism).needs_teachers
    check_maps_ready(config, teachers=needs_teachers)  # before any data is read
    check_models(config, facts(config), teachers=needs_teachers)  # a model the inputs refuse, before any training
    soft_targets.check_config(config)  # soft targets only a fine-grained release can give
    if not needs_teachers:
        return _fine_grained_preflight(config)
    record = accountable_record(config.aggregation, config.privacy)
    resolve(record, config.aggregation.queries, num_teachers=config.teachers.num_teachers,
            pool_size=config.data.public_size)
    outcome.of_config(config, record, config.teachers.num_teachers, outcome.public_classes(config),
                      echo=lambda _line: None)
    if config.rounds.rounds == 2:
        from pate.release.target import check_round2
        from pate.steps.label_round2 import round2_queries

        round2_queries(config.rounds.queries, None, _left_for_round2(config))  # refuses an empty rest
        check_round2(config)
    return record


def _left_for_round2(config: Config) -> int:
    """The pool points round 1 leaves unqueried (public: the pool's size, round 1's queries);
    round 2 asks ``[rounds] queries`` of them at most (`pate.steps.label_round2.round2_queries`)."""
    return config.data.public_size - config.aggregation.queries


def _fine_grained_preflight(config: Config) -> None:
    """A fine-grained run's checks before its release: the noise its settings ask for (public),
    no plan that applies to teachers, and neighbours the pool can give."""
    from pate.release.fine_grained_release import charged_noise

    charged_noise(config.fine_grained, config.privacy.delta)
    if config.privacy.target_eps or config.rounds.rounds == 2:
        raise PateError("privacy.target_eps and rounds = 2 plan a teachers' release; a fine-grained run spends "
                        "fine_grained.eps once: set that, target_eps = 0 and rounds = 1")
    most = max(config.fine_grained.votes_per_record, config.fine_grained.smoothing, config.fine_grained.pca)
    if most > config.data.public_size:
        raise PateError(f"fine_grained.votes_per_record, smoothing and pca must be at most data.public_size "
                        f"({config.data.public_size}), got {most}")


def check_budget(config: Config, run_dir: rundir.RunDir, record: Mechanism | None) -> None:
    """Refuses, before the teachers train, a run whose releases would take its data set's
    cumulative ε over ``[privacy] total_budget`` (`pate.store.ledger`), or whose ledger no
    release could be charged to (`pate.store.ledger.Ledger.check_usable`). Counts what the
    run has yet to release: its labels (both rounds) when it has none, and the sanitised ε
    of each round (`pate.release.budget.sanitised_cost`) when it has no release.json; a
    finished run's steps are skipped, not released again. Under a target
    (``privacy.target_eps``) the costs are those of the plans `label` and `label --round 2`
    will make (`_target_costs`: public values only, the same plans)."""
    from analysis.mechanisms import composition
    from pate.release.budget import sanitised_cost
    from pate.store.ledger import Ledger

    labelled, published = run_dir.exists(rundir.LABELS_NPZ), run_dir.exists(rundir.RELEASE_JSON)
    if labelled and published:
        return
    book = Ledger.for_config(config)
    book.check_usable()
    p = config.privacy
    if not p.total_budget:
        return
    if record is None:  # fine-grained: one release of the configured noise
        from pate.release.fine_grained_release import charged_noise

        if not labelled:  # k may be left to the public proxy: the most any candidate charges
            book.check_budget([charged_noise(config.fine_grained, p.delta).cost()], p.total_budget, p.delta,
                              "this run's fine-grained release")
        return
    if p.target_eps:
        costs = _target_costs(config, run_dir, record, labelled)
    else:
        rounds = [config.aggregation.queries]
        if config.rounds.rounds == 2:
            rounds.append(min(config.rounds.queries, _left_for_round2(config)))
        costs = [] if labelled else [composition.labels_cost(record, n) for n in rounds]
        if record.sanitised:  # a record without a sanitised release draws nothing after its labels
            costs += [sanitised_cost(record, n, p) for n in rounds]
    book.check_budget(costs, p.total_budget, p.delta, "this run's releases (labels and sanitised eps)")


def _target_costs(config: Config, run_dir: rundir.RunDir, record: Mechanism, labelled: bool) -> list:
    """What a run under ``[privacy] target_eps`` has yet to release, by the plans it will make
    (deterministic, from public values: `pate.release.target`): round 1's labels (unless
    made) and its sanitised draw at the planned release (the labels' recorded plan when they
    exist); with two rounds, round 2's labels and draw as `choose_round2` will plan them after
    round 1's releases (a target round 2 cannot meet is refused here, before any training)."""
    from analysis.mechanisms import composition
    from pate.data import load_dataset
    from pate.release import target as release_target
    from pate.release.budget import accountable_record, sanitised_cost

    def quiet(_line):
        return None

    p = config.privacy
    num_classes = load_dataset(config.data).num_classes
    if labelled:
        labels = read_labels(run_dir / rundir.LABELS_NPZ)
        n1, choice = int(labels["indices"].size), release_target.planned(labels)
    else:
        choice = release_target.choose(config, config.teachers.num_teachers, num_classes, record=record, echo=quiet)
        n1 = choice.num_queries
    released = (sanitised_cost(record, n1, p) if choice is None else
                release_target.planned_release_cost(record, choice))
    earlier = [composition.labels_cost(record, n1), released]  # round 1's releases, as both rounds count them
    costs = earlier[1:] if labelled else list(earlier)  # what is yet to be charged
    if config.rounds.rounds == 2:
        rc = dataclasses.replace(config.rounds, queries=min(config.rounds.queries, config.data.public_size - n1))
        second = accountable_record(dataclasses.replace(config.aggregation, queries=rc.queries), p)
        order = choice.order if choice is not None else (p.release_order or None)
        plan = release_target.choose_round2(dataclasses.replace(config, rounds=rc), config.teachers.num_teachers,
                                            num_classes, {"details": {"release_order": order}}, earlier=earlier,
                                            record=second, echo=quiet)
        costs += [composition.labels_cost(second, plan.num_queries), release_target.planned_release_cost(second, plan)]
    return costs


#: The steps every process of a distributed `pate run` takes (`--distributed`: their own
#: distributed paths); the others run on process 0 alone.
SHARED = ("teachers", "label", "round2")
#: Process 0's word to the other processes before each shared step (`_Crew`): skip it, run it,
#: continue a killed training; and "done": the shared steps are over, leave.
_SKIP, _RUN, _RESUME = 0, 1, 2
_DONE = -1


class _Crew:
    """Process 0's side of a distributed `pate run` (`pate.programs.cluster.Cluster`): before
    each shared step it tells the other processes, at an agreement, whether to run it, and
    then that the shared steps are over. It alone decides (from the run directory, under its
    lock), so every process takes the same steps in the same order. One process: no words.

    A failure of process 0 while the others wait for its word (its checks, its decisions,
    between the shared steps) is told to them in that agreement: each stops with one line.
    A failure inside a shared step is that step's own (`pate label --distributed` stops every
    process with one line)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.waiting = cluster.count > 1  # the others wait in an agreement for process 0's word
        self.done = False  # the shared steps are over

    def tell(self, name: str, word: int) -> None:
        """Tells the others what to do about shared step `name` (`_SKIP`, `_RUN`, `_RESUME`)."""
        if self.waiting:
            self.cluster.agree(SHARED.index(name) * 4 + word)
            self.waiting = word == _SKIP  # a step that runs: they are in it with process 0

    def back(self) -> None:
        """A shared step ended on process 0: the others wait for the next word."""
        if self.cluster.count > 1 and not self.done:
            self.waiting = True

    def finish(self) -> None:
        """The shared steps are over: every process leaves JAX's cluster (`Cluster.dissolve`),
        the others exit and process 0 goes on alone. Until then a step of process 0 alone (round
        1's student and report before round 2) runs while the others wait for its word."""
        if self.waiting:
            self.cluster.agree(_DONE)
            self.waiting = False
            self.cluster.dissolve()
        self.done = True

    def fail(self, err: BaseException) -> None:
        """Tells the waiting others that process 0 failed (they stop with its line)."""
        if self.waiting:
            self.waiting = False
            line = " ".join(str(err).split()) or type(err).__name__
            try:
                self.cluster.agree(failure=line)
            except Exception:  # noqa: BLE001 - they are gone already: nothing more to tell
                pass


def _follow(config: Config, workdir: str | Path, cluster, seed: int | None, echo) -> None:
    """A distributed `pate run` on a process other than 0: it takes the shared steps process 0
    names (`_Crew`), each by its own distributed path (training its part of the teachers,
    voting with its block, fitting its block's round-2 heads), takes no lock and writes nothing
    of its own, and leaves when process 0 says the shared steps are over, with one line."""
    from pate.steps.label import label
    from pate.steps.label_round2 import label_round2
    from pate.steps.teachers import train_teachers

    run_dir, did, me = rundir.RunDir(workdir), [], f"process {cluster.index} of {cluster.count}"
    while True:
        value = cluster.agree()  # process 0's word (its failure stops this process here)
        if value == _DONE:
            cluster.dissolve()  # with process 0, which goes on alone
            break
        name, word = SHARED[value // 4], value % 4
        if word == _SKIP:
            continue
        if name == "teachers":
            stored = run_dir.stored_config() if word == _RESUME else None
            train_teachers(stored or config, workdir, resume=word == _RESUME, overwrite=word != _RESUME,
                           show_progress=False, echo=lambda _line: None)
            did.append("trained its part of the teachers")
        elif name == "label" and not registry.record_type(config.aggregation.mechanism).needs_teachers:
            label(config, workdir, seed=seed, overwrite=True, echo=lambda _line: None)
            did.append("counted the votes of its slice of the private records")
        elif name == "label":
            label(config, workdir, seed=seed, overwrite=True, echo=lambda _line: None)
            rows = cluster.rows(config.teachers.num_teachers)
            did.append(f"voted with teachers {rows.start}-{rows.stop - 1}" if rows else "voted with no teacher")
        else:
            label_round2(config, workdir, seed=seed, overwrite=True, echo=lambda _line: None)
            rows = cluster.rows(config.teachers.num_teachers)
            did.append(f"voted with round-2 heads {rows.start}-{rows.stop - 1}" if rows else
                       "fitted no round-2 head")
    done = ", ".join(did) if did else "had nothing to do (the teachers and labels are up to date)"
    echo(f"{me}: {done}; process 0 trains the student and writes the report alone")


def run(config: Config, workdir: str | Path, *, overwrite: bool = False, seed: int | None = None,
        show_progress: bool = True, echo: Callable[[str], None] = print) -> RunSummary | None:
    """Runs the whole job over one run directory, skipping what is up to date.

    In a distributed run (`jax.distributed` started: `pate run --distributed`) every process
    calls it with the same arguments: process 0 decides, under the run's lock, which steps
    run; the teachers, the labels and round 2's labels (`SHARED`) run on every process by their
    own distributed paths (the others waiting while process 0 trains round 1's student and
    writes its report); then the other processes return None with one line and process 0
    trains the student and writes the report alone (`_Crew`, `_follow`).

    Args:
      config: the resolved config.
      workdir: the run directory (created if missing).
      overwrite: run every step again from scratch.
      seed: noise seed of the aggregator and of the sanitised release (research only;
        never written). Default: fresh OS entropy.
      show_progress: draw progress bars for the teachers and the student.
      echo: where status lines go.

    Returns:
      A `RunSummary` (its `summary()` is what `pate run` prints); None on a process other
      than 0 of a distributed run.

    Raises:
      PateError: the run directory belongs to another data set (nothing is touched), or
        any step's own error (the artifacts of earlier steps are kept).
    """
    from pate.programs import agreement
    from pate.programs.cluster import Cluster

    check_config(config, "pate.run")
    config = with_data_defaults(config)  # the keys the file left out, from the data's public facts
    cluster = Cluster()
    # Every process runs process 0's config (each step agrees again on its data and checkpoints).
    agreement.agree(cluster, config)
    if not cluster.leader:
        return _follow(config, workdir, cluster, seed, echo)
    crew = _Crew(cluster)
    try:
        start = time.time()
        record = preflight(config, seed)
        # Nothing is touched in the run directory of another data set unless `overwrite`.
        data = None if overwrite else DATA_CHECK
        with step("run", workdir, config=config, data=data, echo=echo) as door:
            run_dir = door.run
            check_budget(config, run_dir, record)
            if not overwrite:
                _check_rounds(config, run_dir)
            config = say_data_note(config, echo)  # which values the data chose, once the checks have passed
            manifest = _Manifest(run_dir)
            records = _run_steps(config, run_dir, manifest, overwrite, seed, show_progress, echo, crew)
            door.write_config()
            return summarise(config, run_dir, manifest, records, start)
    except BaseException as err:
        crew.fail(err)
        raise


#: The door's data check of `run`: the run's config must be readable and of this data set.
DATA_CHECK = dict(unreadable="use another --workdir, or --overwrite to replace the run",
                  remedy="use another --workdir, or --overwrite to replace the whole run")


def _run_steps(config: Config, run_dir: rundir.RunDir, manifest: "_Manifest", overwrite: bool,
               seed: int | None, show_progress: bool, echo, crew: _Crew) -> list[StepRecord]:
    """Runs every step that is not up to date (`_check_state`), recording each in the manifest;
    tells the other processes of a distributed run which shared steps to take (`crew`)."""
    stored = run_dir.stored_config()
    records: list[StepRecord] = []
    ran: set[str] = set()
    for i in range(len(steps_of(config, run_dir))):
        steps = steps_of(config, run_dir)  # asked again: a step run again moves round 2's copies aside
        step_ = steps[i]
        reason = "--overwrite" if overwrite else _check_state(run_dir, manifest, step_, config, stored,
                                                              bool(ran & set(step_.upstream)))
        shared = step_.name in SHARED and not crew.done
        if not shared and not any(later.name in SHARED for later in steps[i + 1:]):
            crew.finish()  # the other processes leave: process 0 goes on alone
        # (a step of process 0 alone before a shared one: the others wait for its word)
        if reason is None:
            if shared:
                crew.tell(step_.name, _SKIP)
            echo(f"[{step_.name}] up to date: skipped")
            records.append(StepRecord(step_.name, False, 0.0, "up to date"))
            continue
        if not overwrite:
            _refuse_replacing(run_dir, step_, reason)
            _refuse_redrawing(run_dir, step_, config, stored)
        if shared:
            resume = step_.name == "teachers" and _resumes_teachers(run_dir, config, stored, overwrite)
            crew.tell(step_.name, _RESUME if resume else _RUN)
        echo(f"[{step_.name}] running ({reason})")
        manifest.forget(step_.name)
        t0 = time.time()
        figures = step_.run(_Context(config, run_dir, stored, overwrite, seed, show_progress, echo))
        if shared:
            crew.back()
        manifest.record(step_, config, figures)
        stored = run_dir.stored_config()
        records.append(StepRecord(step_.name, True, time.time() - t0, reason))
        ran.add(step_.name)
    crew.finish()
    return records
