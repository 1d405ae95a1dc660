"""`pate run` on the tiny synthetic config: the whole job through the CLI, skipping
what is up to date, re-running what a config change affects, and refusing a run
directory of another data set."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from cli import main
from pate.store import digests, rundir
from pate.config import load_config
from pate.programs.data_facts import with_data_defaults
from pate.steps import pipeline
from pate.release import run_summary

from conftest import CONFIGS, TINY, invoke, own_copy, unpublished_copy

OUTPUTS = {
    "teachers": rundir.TEACHERS_JSON,
    "label": rundir.LABELS_NPZ,
    "student": rundir.STUDENT_JSON,
    "analyze": rundir.PRIVACY_JSON,
}


def pate_run(workdir, *extra, reseeded: bool = False):
    """`pate run` of the tiny config, seeded; ``reseeded``: another noise seed, for a run that
    labels its own copy's teachers again (the same labels drawn again would rightly be refused
    a second sanitised draw by the run's ledger, which `own_copy` brings)."""
    return invoke("run", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 1 if reseeded else 0,
                  *extra)


def stamps(workdir):
    """Modification time of each step's main output (None when missing)."""
    paths = {step: os.path.join(workdir, name) for step, name in OUTPUTS.items()}
    return {step: os.stat(p).st_mtime_ns if os.path.exists(p) else None for step, p in paths.items()}


def ran_steps(before, after):
    return sorted(step for step in OUTPUTS if before[step] != after[step])


@pytest.fixture(scope="module")
def _finished(tmp_path_factory):
    """One full `pate run` of configs/tiny.toml through the CLI (speed is a benchmark's
    business, not a test's: no time limit here)."""
    workdir = tmp_path_factory.mktemp("pipeline") / "run"
    # A ledger of its own beside it (`own_copy` brings it): the session's finished tiny run
    # released the same labels (same teachers, same seed), and the ledger rightly refuses a
    # second sanitised draw of them.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(workdir.parent / "ledgers"))
        result = pate_run(workdir)
    assert result.exit_code == 0, result.output
    return workdir, result.output


@pytest.fixture
def finished(_finished, tmp_path):
    """A copy of the finished run, with its ledger (a run belongs to one ledger)."""
    workdir, _ = _finished
    return own_copy(workdir, tmp_path / "run")


def test_full_run_through_the_cli(_finished):
    workdir, output = _finished
    for name in (*rundir.TEACHER_ARTIFACTS, *rundir.LABEL_ARTIFACTS, *rundir.STUDENT_ARTIFACTS,
                 *rundir.ANALYSIS_ARTIFACTS, rundir.PIPELINE_JSON, rundir.CONFIG_TOML):
        assert (workdir / name).exists(), name
    for needle in ("teacher ensemble accuracy", "label accuracy", "student accuracy",
                   "data-independent eps", "data-dependent eps", "PRIVATE", "sanitised eps"):
        assert needle in output
    assert load_config(workdir / "config.toml") == with_data_defaults(load_config(TINY))  # the keys the data chose
    student = json.loads((workdir / "student.json").read_text())
    assert student["accuracy"] > 0.5  # 4 classes
    # `pate run --seed`: the release says a research seed made its noise (never which).
    assert json.loads((workdir / "release.json").read_text())["research_seed"] is True
    assert rundir.read_npz(workdir / "labels.npz")["meta"]["research_seed"] is True


def test_rerun_skips_every_step(finished):
    before = stamps(finished)
    result = pate_run(finished)
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(finished)) == []
    assert result.output.count("up to date: skipped") == 4
    assert "student accuracy" in result.output


@pytest.mark.slow  # 11 s
def test_records_of_an_older_pate_are_taken_from_config_toml(finished):
    """A pipeline.json written before the config gained keys (no hash_version, other hashes):
    upgrading pate must not re-run finished steps (a second, charged release of the labels)
    while config.toml still has the current settings, and must when it does not."""
    path = finished / rundir.PIPELINE_JSON
    record = json.loads(path.read_text())
    for entry in record["steps"].values():
        entry.pop("hash_version")
        entry["sections_hash"] = "0" * 16
        entry["sections"] = {name: "0" * 16 for name in entry["sections"]}
    path.write_text(json.dumps(record))
    before = stamps(finished)
    result = pate_run(finished)
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(finished)) == [] and result.output.count("up to date: skipped") == 4
    path.write_text(json.dumps(record))  # the skip rewrote it: old records again, and a changed student
    result = pate_run(finished, "--set", "student.steps=30")
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(finished)) == ["student"]


@pytest.mark.parametrize("setting, expected", [
    pytest.param("student.steps=30", ["student"], marks=pytest.mark.slow),  # 10 s; the skip test above retrains the student
    ("aggregation.gamma=0.4", ["analyze", "label", "student"]),
])
def test_changed_config_reruns_affected_steps(finished, setting, expected):
    before = stamps(finished)
    result = pate_run(finished, "--set", setting)
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(finished)) == expected
    assert f"config changed in [{setting.split('.')[0]}]" in result.output
    # ... and the next run with the same change skips everything.
    again = stamps(finished)
    assert pate_run(finished, "--set", setting).exit_code == 0
    assert ran_steps(again, stamps(finished)) == []


def test_changed_privacy_does_not_release_the_same_labels_twice(finished):
    """A changed [privacy] section would draw a second sanitised eps of the same votes: an
    attacker averaging the two removes the noise while each headline counts one draw. The
    run refuses, says why and what to do, and the published release.json stays as it was."""
    released = (finished / "release.json").read_bytes()
    before = stamps(finished)
    result = pate_run(finished, "--set", "privacy.lnmax_beta=0.1")
    assert result.exit_code == 1
    assert "config changed in [privacy]" in result.output
    assert "already publishes the sanitised eps of these labels" in result.output
    assert "label again in a new run directory" in result.output
    assert (finished / "release.json").read_bytes() == released
    assert ran_steps(before, stamps(finished)) == []
    # The same from `pate analyze`, even with other release settings.
    result = invoke("analyze", "--workdir", finished, "--beta", "0.2")
    assert result.exit_code == 1 and "already publishes" in result.output
    assert (finished / "release.json").read_bytes() == released


def test_relabelled_by_hand_reruns_student_and_analysis(finished):
    assert invoke("label", "--workdir", finished, "--overwrite", "--seed", 5).exit_code == 0
    before = stamps(finished)
    result = pate_run(finished)
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(finished)) == ["analyze", "student"]


def test_steps_run_by_hand_are_recognised(labelled_tiny, tmp_path):
    """Without pipeline.json the artifacts' own config hashes identify them: on a run labelled,
    its student trained and not yet analysed (a deleted release.json is no licence for a
    second sanitised draw: the ledger refuses it), only analyze runs."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    os.unlink(run / rundir.PIPELINE_JSON)
    before = stamps(run)
    result = pate_run(run)
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(run)) == ["analyze"]


def test_interrupted_teachers_resume(finished):
    os.unlink(finished / rundir.TEACHERS_JSON)
    before = stamps(finished)
    result = pate_run(finished, reseeded=True)
    assert result.exit_code == 0, result.output
    assert "resuming" in result.output
    # New teachers: everything after them runs again.
    assert ran_steps(before, stamps(finished)) == ["analyze", "label", "student", "teachers"]


@pytest.mark.parametrize("args, needle", [
    (["--set", "data.synthetic_classes=3"], "another [data] section"),
    (["--config", CONFIGS / "quickstart.toml"], "another [data] section"),
])
def test_run_directory_of_another_data_set_is_refused(finished, args, needle):
    before = {name: os.stat(finished / name).st_mtime_ns for name in os.listdir(finished)}
    if args[0] == "--config":
        result = invoke("run", *args, "--workdir", finished, "--no-progress")
    else:
        result = pate_run(finished, *args)
    assert result.exit_code == 1
    assert needle in result.output and len(result.output.strip().splitlines()) == 1
    assert {name: os.stat(finished / name).st_mtime_ns for name in os.listdir(finished)} == before


def test_student_without_answers_fails_cleanly(finished):
    """A release that answers nothing (as Confident-GNMax may): the student step stops
    with one line; the teachers and the release are kept."""
    rundir.write_npz(finished / rundir.LABELS_NPZ, {
        "indices": np.arange(100), "labels": -np.ones(100, np.int32), "mechanism": np.array("confident-gnmax"),
        "threshold": np.array(6.0), "sigma_threshold": np.array(1.0), "sigma": np.array(1.0)},
        with_data_defaults(load_config(TINY)))  # the run's own config (the keys the data chose)
    result = pate_run(finished)
    assert result.exit_code == 1
    assert "answers none" in result.output.strip().splitlines()[-1]
    for name in (rundir.TEACHERS_JSON, rundir.LABELS_NPZ, rundir.VOTES_NPZ):
        assert (finished / name).exists()


def _private_fingerprints(workdir):
    """The sha256 of every private file of a run, and of the teachers' folder and each
    file and folder under it (what teachers.json records)."""
    found = {digests.file_digest(workdir / name)
             for name in (rundir.PRIVACY_JSON, rundir.PRIVACY_PNG, rundir.TEACHERS_JSON, rundir.VOTES_NPZ)}
    teachers = workdir / rundir.TEACHERS_DIR
    for path in (teachers, *teachers.rglob("*")):
        found.add(digests.file_digest(path) if path.is_file() else digests.tree_digest(path))
    return found


def test_no_fingerprint_of_a_private_file_in_a_public_one(_finished):
    """Whoever knows all votes but one teacher's can rebuild privacy.json (or votes.npz) for
    each neighbouring data set byte for byte: a plain digest of it in a world-readable file
    would say which one is real. Only keyed digests (secret key, owner-only) are written."""
    workdir = _finished[0]
    fingerprints = _private_fingerprints(workdir)
    assert len(fingerprints) > 6
    public = [p for p in workdir.rglob("*")
              if p.is_file() and not set(p.relative_to(workdir).parts) & rundir.PRIVATE_ARTIFACTS]
    names = {p.relative_to(workdir).as_posix() for p in public}
    assert {rundir.PIPELINE_JSON, rundir.RELEASE_JSON, rundir.LABELS_NPZ, rundir.STUDENT_JSON} <= names
    for path in public:
        data = path.read_bytes().lower()
        for digest in fingerprints:
            for form in (digest.encode(), digest[:16].encode(), bytes.fromhex(digest)):
                assert form not in data, f"{path.name} holds a digest of a private file"
    # Everything that is not checked above is owner-only.
    for name in rundir.PRIVATE_ARTIFACTS:
        if (workdir / name).exists():
            assert os.stat(workdir / name).st_mode & 0o077 == 0, name
    assert len((workdir / rundir.PIPELINE_KEY).read_bytes()) == 32
    steps = json.loads((workdir / rundir.PIPELINE_JSON).read_text())["steps"]
    assert all(len(entry["artifact_hmac"]) == 64 for entry in steps.values())


def test_changed_private_input_is_noticed_through_its_keyed_digest(finished):
    """teachers.json rewritten (same config hash): the teachers are still recognised by their
    config, and the labels made from the old file run again."""
    doc = json.loads((finished / rundir.TEACHERS_JSON).read_text())
    doc["edited"] = True
    rundir.atomic_write_text(finished / rundir.TEACHERS_JSON, json.dumps(doc))
    before = stamps(finished)
    result = pate_run(finished, reseeded=True)
    assert result.exit_code == 0, result.output
    assert "[label] running (its inputs changed)" in result.output
    assert ran_steps(before, stamps(finished)) == ["analyze", "label", "student"]


def test_plain_digests_of_an_older_pipeline_json_are_removed(finished):
    """A pipeline.json with plain sha256 digests (as older versions wrote) loses them on the next
    `pate run`, even when every step is up to date; so does a lost key change nothing but the
    record: the artifacts' config hashes still identify every step."""
    path = finished / rundir.PIPELINE_JSON
    doc = json.loads(path.read_text())
    for name, entry in doc["steps"].items():
        entry.pop("artifact_hmac")
        entry["artifact_sha256"] = digests.file_digest(finished / OUTPUTS[name])
        entry["inputs_sha256"] = {k: digests.file_digest(finished / k) for k in entry.pop("inputs_hmac")}
    path.write_text(json.dumps(doc))
    os.unlink(finished / rundir.PIPELINE_KEY)
    before = stamps(finished)
    result = pate_run(finished)
    assert result.exit_code == 0, result.output
    assert ran_steps(before, stamps(finished)) == []
    assert "sha256" not in path.read_text()
    assert json.loads(path.read_text())["steps"]["label"]["figures"]  # what the summary needs is kept


def test_section_hash():
    a = load_config(TINY)
    assert pipeline.section_hash(a, ["data"]) == pipeline.section_hash(a, ("data",))
    assert pipeline.section_hash(a, ["data", "teachers"]) == pipeline.section_hash(a, ["teachers", "data"])
    assert pipeline.section_hash(a, ["data"]) != pipeline.section_hash(a, ["teachers"])
    # A change in one section moves that section's hash and no other.
    b = load_config(TINY, {"student.steps": a.student.steps + 1})
    assert pipeline.section_hash(b, ["student"]) != pipeline.section_hash(a, ["student"])
    assert pipeline.section_hash(b, ["data", "teachers"]) == pipeline.section_hash(a, ["data", "teachers"])
    assert pipeline.section_hash(load_config(TINY), ["privacy"]) == pipeline.section_hash(a, ["privacy"])
    # "section.key" hashes one key: a target headline re-plans the labels, a new delta does not.
    label = next(s for s in pipeline.STEPS if s.name == "label").sections
    target = load_config(TINY, {"privacy.target_eps": 2.0})
    other_delta = load_config(TINY, {"privacy.delta": 1e-6})
    assert pipeline.section_hash(target, label) != pipeline.section_hash(a, label)
    assert pipeline.section_hash(other_delta, label) == pipeline.section_hash(a, label)
    assert pipeline.section_hash(other_delta, ["privacy"]) != pipeline.section_hash(a, ["privacy"])
    # a key at its default is left out: runs without a target keep the label hash they had
    plain = tuple(name for name in label if "." not in name)
    assert pipeline.section_hash(a, label) == pipeline.section_hash(a, plain)


def test_summary_shows_the_headline_eps():
    """The summary's headline is release.json's eps at its delta (everything released), not
    the sanitised value alone."""
    common = dict(steps=(), dataset="d", mechanism="lnmax", num_queries=100, num_answered=100,
                  teacher_ensemble_accuracy=0.9, label_accuracy=0.9, student_method="fixmatch",
                  student_accuracy=0.9, eps_data_independent=5.3, eps_data_dependent=2.0,
                  eps_sanitized=2.1, delta=1e-5, wall_time_s=1.0)
    text = run_summary.RunSummary(**common, eps=4.3, delta_total=2e-5).summary()
    assert "HEADLINE eps:          4.300  at delta 2e-05" in text
    assert "HEADLINE eps:          n/a" in run_summary.RunSummary(**common, eps=None, delta_total=None).summary()


@pytest.mark.parametrize("setting,needle", [("aggregation.queries=100000", "more than the"),
                                            ("aggregation.threshold=1e6", "above the")])
def test_run_refuses_what_the_config_implies_before_training(tmp_path, setting, needle):
    """A query count beyond the pool or a threshold above the ensemble is refused before
    the teachers train: one line, exit 1, no run directory written."""
    workdir = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", workdir, "--no-progress",
                    "--set", 'aggregation.mechanism="confident-gnmax"', "--set", setting)
    assert result.exit_code == 1 and needle in result.output, result.output
    assert result.output.strip().count("\n") == 0
    assert not (workdir / rundir.TEACHERS_JSON).exists() and not (workdir / "teachers").exists()


# --------------------------------------------------------------------------- second hunt (issue 21)


def test_skipped_steps_are_checked_against_their_records(finished):
    """A step is skipped only when its artifacts are what their records say: a student
    folder replaced by a file is trained again (not "up to date"); a changed teacher
    checkpoint is refused (a new release needs --overwrite), nothing touched."""
    shutil.rmtree(finished / rundir.STUDENT_DIR)
    (finished / rundir.STUDENT_DIR).write_text("not a checkpoint")
    result = pate_run(finished)
    assert result.exit_code == 0, result.output
    assert "[student] up to date" not in result.output and "[student] running" in result.output
    assert (finished / rundir.STUDENT_DIR).is_dir()

    info = json.loads((finished / rundir.TEACHERS_JSON).read_text())
    final = finished / rundir.TEACHERS_DIR / str(info["checkpoint"]["step"])
    target = max((p for p in final.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = target.read_bytes()
    target.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    labels = (finished / rundir.LABELS_NPZ).read_bytes()
    result = pate_run(finished)
    assert result.exit_code == 1, result.output
    assert "teacher checkpoint" in result.output and "--overwrite" in result.output
    assert (finished / rundir.LABELS_NPZ).read_bytes() == labels


def test_a_fifo_for_pipeline_json_is_no_record_not_a_hang(finished):
    """pipeline.json is bookkeeping: a FIFO in its place (a read would block for ever) is
    read as no record, and every step is recognised from its own artifacts."""
    import signal

    os.unlink(finished / rundir.PIPELINE_JSON)
    os.mkfifo(finished / rundir.PIPELINE_JSON)

    class Hung(BaseException):  # no handler of the command may swallow it
        pass

    def hung(*_):
        raise Hung("pate run hung on a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        result = pate_run(finished)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert result.exit_code == 0, result.output
    assert result.output.count("up to date: skipped") == 4
