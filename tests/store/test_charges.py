"""Charges that match what was released (issue 32): one order for every writer (written,
charged, renamed into place; a commit that puts nothing in place withdraws its charge), a
`pate run` preflight that checks the whole budget and the ledger, and one-line errors that
name the real fault."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

from analysis.mechanisms import composition
from analysis.core.errors import CommitFailed, OptionError, PateError
from conftest import (ROOT, TINY, failing_replace, invoke, one_line, own_copy, small_tmpfs, snapshot, run_entries,
                      staged_labels, unpublished_copy)
from pate.store import door, ledger as ledger_mod, rundir




# --------------------------------------------------------------------------- analyze


def test_a_folder_where_release_json_goes_charges_nothing_and_a_later_analyze_works(labelled_tiny, tmp_path):
    run = unpublished_copy(labelled_tiny, tmp_path)
    (run / rundir.RELEASE_JSON).mkdir()
    before = snapshot(run)
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 1 and "is a folder" in one_line(result), result.output
    assert snapshot(run) == before and [e["kind"] for e in run_entries(run)] == ["labels"]
    (run / rundir.RELEASE_JSON).rmdir()
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert [e["kind"] for e in run_entries(run)] == ["labels", "sanitised-eps"]


def test_a_failed_analyze_commit_puts_everything_back_and_withdraws_its_charge(labelled_tiny, tmp_path,
                                                                              monkeypatch):
    """The rename of release.json fails after privacy.json and privacy.png are in place (an
    I/O error no check can foresee): they are put back, the draw's charge is withdrawn, and
    the next analyze is not refused as a second draw."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    (run / rundir.PRIVACY_JSON).write_text("an older report")
    before = snapshot(run)
    real = failing_replace(monkeypatch, lambda src, dst: OSError(errno.EIO, "Input/output error", dst)
                           if dst == str(run / rundir.RELEASE_JSON) and src.endswith(".tmp") else None)
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 1 and "nothing was changed" in one_line(result), result.output
    assert snapshot(run) == before and not [n for n in os.listdir(run) if n.endswith(".tmp")]
    assert [e["kind"] for e in run_entries(run)] == ["labels"]
    monkeypatch.setattr(os, "replace", real)
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert [e["kind"] for e in run_entries(run)] == ["labels", "sanitised-eps"]


def test_the_staged_release_json_is_owner_only_until_it_is_in_place(labelled_tiny, tmp_path, monkeypatch):
    """A charge withdrawn must be of a release no one could read: the staged public file is
    0600 until its commit, then gets the mode a plain file gets."""
    from analysis.reporting import report_io

    run = unpublished_copy(labelled_tiny, tmp_path)
    modes, real = [], report_io.StagedOutputs.commit

    def spy(self):
        modes.extend(os.stat(tmp).st_mode & 0o777 for tmp, _, _ in self.staged)
        return real(self)

    monkeypatch.setattr(report_io.StagedOutputs, "commit", spy)
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert modes == [0o600, 0o600, 0o600]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(run / rundir.RELEASE_JSON).st_mode & 0o777 == 0o666 & ~mask
    assert os.stat(run / rundir.PRIVACY_JSON).st_mode & 0o777 == 0o600


# --------------------------------------------------------------------------- the door's order


def _book(tmp_path) -> ledger_mod.Ledger:
    return ledger_mod.Ledger("test data", tmp_path / "ledgers")


def _charge(book, eps=1.0, **options) -> door.Charge:
    return door.Charge(book, "labels", composition.Cost("pure", {"eps0": eps, "count": 1}), options)


def test_publish_charges_then_commits_and_withdraws_when_the_commit_put_nothing_in_place(tmp_path):
    book, seen = _book(tmp_path), []
    door.publish([_charge(book)], lambda: seen.append(len(book.entries())))
    assert seen == [1] and len(book.entries()) == 1  # charged before the commit ran

    def nothing_in_place():
        raise CommitFailed("cannot put x in place; nothing was changed")

    with pytest.raises(CommitFailed):
        door.publish([_charge(book, 2.0)], nothing_in_place)
    assert [e["cost"]["eps0"] for e in book.entries()] == [1.0]

    def in_place_for_a_moment():
        raise PateError("x was in place for a moment")

    with pytest.raises(PateError):
        door.publish([_charge(book, 3.0)], in_place_for_a_moment)
    assert [e["cost"]["eps0"] for e in book.entries()] == [1.0, 3.0]  # over-counts, never under


def test_a_refused_second_charge_withdraws_the_first_and_commits_nothing(tmp_path):
    book, commits = _book(tmp_path), []
    with pytest.raises(PateError, match="total_budget"):
        door.publish([_charge(book, 1.0), _charge(book, 50.0, budget=10.0)], lambda: commits.append(1))
    assert commits == [] and book.entries() == []


def test_an_interrupt_during_the_charge_and_commit_lands_after_the_commit(tmp_path):
    # Python's own SIGINT handler, whatever the process inherited: a test worker, or a library a
    # test before this one loaded in the same process, may have left another (or one outside
    # Python, which the door leaves alone), and then no KeyboardInterrupt would come.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_during_publish(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def _interrupt_during_publish(tmp_path):
    book, done = _book(tmp_path), []

    def commit():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("committed")

    with pytest.raises(KeyboardInterrupt):
        door.publish([_charge(book)], commit, "test (x)")
    assert done == ["committed"] and len(book.entries()) == 1 and door.committed()[-1] == "test (x)"


def test_a_staging_commit_that_fails_before_anything_is_in_place_raises_commit_failed(tmp_path, monkeypatch):
    run, staging = staged_labels(tmp_path, (rundir.LABELS_NPZ,), (rundir.VOTES_NPZ, rundir.LABELS_NPZ))
    assert os.stat(staging.path).st_mode & 0o777 == 0o700
    failing_replace(monkeypatch, lambda src, dst: OSError(errno.EPERM, "Operation not permitted", src)
                    if src == str(run / rundir.LABELS_NPZ) else None)  # the old labels are immutable
    with pytest.raises(CommitFailed, match="nothing was changed"):
        staging.commit()
    assert sorted(os.listdir(run.path)) == [rundir.LABELS_NPZ]
    assert (run / rundir.LABELS_NPZ).read_text() == "old labels"


def test_every_release_is_charged_through_the_door():
    """One order for every writer: no module but the ledger and the door makes a charge
    (`Ledger.charge`); writers ask `Door.charge` (or `door.publish`) for it. `pate ledger
    --import` charges releases already in place, so it publishes nothing and calls the ledger; a
    silo's share (`pate.release.silo_ledger`) leaves as a message, no file: charged before it is
    sent, with no run directory to publish into."""
    offenders = []
    for path in sorted((ROOT / "pate").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("pate/store/ledger.py", "pate/store/door.py", "pate/steps/ledger_import.py",
                   "pate/release/silo_ledger.py"):
            continue  # ledger_import charges what a run released before the ledger: nothing to publish
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(book|ledger|self)\.charge\(", line):
                offenders.append(f"{rel}:{k}: {line.strip()}")
    assert offenders == []


# --------------------------------------------------------------------------- writers on a full disk


def _full_disk_on(name: str):
    def write(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", name)

    return write


@pytest.mark.slow
def test_synth_on_a_full_disk_charges_nothing_and_a_retry_charges_once(tmp_path, monkeypatch):
    workdir = tmp_path / "synth"
    real = rundir.RunDir.write_npz
    monkeypatch.setattr(rundir.RunDir, "write_npz", _full_disk_on(rundir.SYNTHETIC_NPZ))
    fast = ("--set", "synth.merf_steps=2", "--set", "synth.samples=20", "--set", "synth.eval_epochs=1")
    result = invoke("synth", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 1, *fast)
    assert result.exit_code == 1 and "free space" in one_line(result), result.output
    from pate.config import load_config

    book = ledger_mod.Ledger.for_config(load_config(TINY))
    assert book.entries() == []
    monkeypatch.setattr(rundir.RunDir, "write_npz", real)
    assert invoke("synth", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 1, *fast).exit_code == 0
    assert [e["kind"] for e in book.entries()] == ["synth"]
    written = json.loads((workdir / rundir.SYNTH_JSON).read_text())
    assert written["data_set"]["releases"] == 1  # the file counts its own release, once


@pytest.mark.slow
def test_round2_on_a_full_disk_charges_nothing(finished_tiny, tmp_path, monkeypatch):
    """The round-2 labels are written, then round 1's student is copied beside them: a full
    disk there used to leave the round-2 release charged."""
    from pate.steps import label_round2

    run = own_copy(finished_tiny, tmp_path / "run")
    before = snapshot(run)
    monkeypatch.setattr(label_round2.shutil, "copy2", _full_disk_on(rundir.STUDENT_ROUND1_JSON))
    result = invoke("label", "--workdir", run, "--round", 2, "--queries", 40, "--seed", 1)
    assert result.exit_code == 1 and "free space" in one_line(result), result.output
    assert snapshot(run) == before
    assert [e["kind"] for e in run_entries(run)] == ["labels", "sanitised-eps"]  # round 1's, nothing more


def test_a_label_release_is_charged_after_it_is_written(trained_run, monkeypatch):
    run, _ = trained_run
    order, real_write, real_charge = [], rundir.RunDir.write_npz, ledger_mod.Ledger.charge
    monkeypatch.setattr(rundir.RunDir, "write_npz",
                        lambda self, name, *a, **k: (order.append(name), real_write(self, name, *a, **k))[1])
    monkeypatch.setattr(ledger_mod.Ledger, "charge",
                        lambda self, *a, **k: (order.append("charge"), real_charge(self, *a, **k))[1])
    assert invoke("label", "--workdir", run).exit_code == 0
    assert order == [rundir.VOTES_NPZ, rundir.LABELS_NPZ, "charge"]


# --------------------------------------------------------------------------- interrupted after a commit


def test_ctrl_c_after_a_complete_commit_says_what_was_committed(trained_run, monkeypatch):
    run, _ = trained_run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ledger_mod, "cumulative_line", interrupted)  # printed after the commit
    result = invoke("label", "--workdir", run)
    assert result.exit_code == 1
    line = one_line(result)
    assert "interrupted after committing label" in line and rundir.LABELS_NPZ in line, line
    assert (run / rundir.LABELS_NPZ).exists()


# --------------------------------------------------------------------------- preflight


def test_run_refuses_before_training_a_budget_the_sanitised_release_would_exceed(tmp_path):
    """tiny: its labels cost eps 79.8 and the labels with the sanitised release 82.1; a
    total_budget of 81 used to train the teachers and charge the labels, then refuse the
    release (labels that can never be published)."""
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", "--set", "privacy.total_budget=81")
    assert result.exit_code == 1 and "total_budget" in result.output and "sanitised" in result.output, result.output
    assert not (run / rundir.TEACHERS_DIR).exists()
    from pate.config import load_config

    # the config's budget is recorded (it holds for later commands); nothing is charged
    assert [e["kind"] for e in ledger_mod.Ledger.for_config(load_config(TINY)).entries()] in ([], ["budget"])


def test_run_refuses_before_training_a_ledger_it_could_not_charge(tmp_path, monkeypatch):
    blocked = tmp_path / "ledgers"
    blocked.write_text("a file where the ledger folder goes")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(blocked))
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress")
    assert result.exit_code == 1 and "ledger" in one_line(result), result.output
    assert not (run / rundir.TEACHERS_DIR).exists()


@pytest.mark.parametrize("mechanism, settings", [
    ("lnmax", dict(gamma=0.5)),
    ("gnmax", dict(sigma=40.0)),
    ("confident-gnmax", dict(sigma=20.0, threshold=200.0, sigma_threshold=150.0)),
])
def test_the_preflight_release_cost_is_what_analyze_charges(mechanism, settings):
    """`sanitised_cost` (config alone) against the cost analyze records from its report."""
    import dataclasses

    import numpy as np

    from pate.config import AggregationConfig, PrivacyConfig
    from pate.release.budget import accountable_record, sanitised_cost
    from pate.release.labels import released_arrays
    from pate.release.privacy_report import release_cost_of, report_for_release

    rng = np.random.default_rng(0)
    votes = rng.multinomial(250, [0.7, 0.1, 0.1, 0.1], size=60).astype(np.int64)
    privacy = PrivacyConfig()
    record = accountable_record(AggregationConfig(mechanism=mechanism, queries=60, **settings), privacy)
    labels = released_arrays(votes, np.arange(60), record, 7, None)
    beta = record.release_beta(privacy)
    rep = report_for_release(votes, labels, delta=privacy.delta, beta=beta, gnss_beta=beta,
                             conversion=privacy.conversion, release_cost=privacy.release_cost)
    assert sanitised_cost(record, 60, privacy) == release_cost_of(rep, privacy.release_cost)
    other = dataclasses.replace(privacy, release_order=12.0)
    rep = report_for_release(votes, labels, delta=other.delta, beta=beta, gnss_beta=beta, conversion=other.conversion,
                             release_order=12.0, release_cost=other.release_cost)
    assert sanitised_cost(record, 60, other) == release_cost_of(rep, other.release_cost)


# --------------------------------------------------------------------------- fedavg


@pytest.mark.parametrize("eps", ["0.001", "1e-30", pytest.param("1e-300", marks=pytest.mark.slow)])
def test_fedavg_refuses_an_eps_it_cannot_state_or_meet(tmp_path, eps):
    """0.001 used to write eps 0.0 while the ledger composed 20 x 2.83e-6; 1e-300 wrote
    0.0035, more than asked; 1e-30 ended in "RDP values must be non-negative numbers"."""
    result = invoke("fedavg", "--config", TINY, "--workdir", tmp_path / "f", "--eps", eps, "--no-progress")
    assert result.exit_code == 2, result.output
    assert "--eps" in one_line(result)
    assert not (tmp_path / "f" / rundir.FEDAVG_JSON).exists()


def test_a_plan_is_refused_unless_its_charged_eps_is_the_one_asked_for():
    from pate.baselines.fedavg import _check_met

    cost = composition.Cost("pure", {"eps0": 2.83e-6, "count": 20})
    _check_met(1.0, 0.99, cost, 1e-5)
    with pytest.raises(OptionError, match="cannot be met on the grid: the nearest release costs eps 0.0035"):
        _check_met(1e-300, 0.0035, cost, 1e-5)
    with pytest.raises(OptionError, match="would read as eps 0"):
        _check_met(0.001, 0.0, cost, 1e-5)


def test_randomized_response_rdp_stays_a_nonnegative_upper_bound_for_tiny_eps():
    import numpy as np

    orders = np.array([1.5, 2.0, 8.0, 64.0, 1e4])
    # 7.6e-9 and 9.1e-9 rounded below 0, which the RDP conversion refuses
    for eps0 in (1e-300, 1e-30, 1e-12, 7.58577575029182e-09, 9.120108393559115e-09, 9.9e-5):
        rdp = composition.rr_rdp(eps0, orders)
        assert np.all(rdp >= 0) and np.all(rdp <= orders * eps0 ** 2 / 2)
    below, above = composition.rr_rdp(0.99999e-4, orders), composition.rr_rdp(1.00001e-4, orders)
    assert np.allclose(below[:4], above[:4], rtol=1e-3)  # the bound meets the exact formula where it takes over


def test_fedavg_json_states_exactly_what_was_charged(tmp_path):
    workdir = tmp_path / "f"
    assert invoke("fedavg", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 1).exit_code == 0
    written = json.loads((workdir / rundir.FEDAVG_JSON).read_text())
    (entry,) = run_entries(workdir)
    assert written["cost"] == entry["cost"]
    cost = composition.Cost.from_json(entry["cost"])
    assert written["release_eps"] == composition.single_eps(cost, written["delta"]) <= written["target_eps"]
    assert written["release_eps"] > 0


# --------------------------------------------------------------------------- smaller


@pytest.mark.parametrize("where, says", [("key", "not a plain file"), ("lock", "it is a folder")])
def test_a_ledger_key_or_lock_folder_is_named_not_called_a_full_disk(trained_run, where, says):
    from pate.config import load_config

    run, _ = trained_run
    book = ledger_mod.Ledger.for_config(load_config(TINY))
    book.directory.mkdir(parents=True, exist_ok=True)
    if where == "key":
        (book.directory / ".key").unlink(missing_ok=True)  # naming the data set made one
    (book.directory / ".key" if where == "key" else pathlib.Path(str(book.path) + ".lock")).mkdir()
    result = invoke("label", "--workdir", run)
    assert result.exit_code == 1
    line = one_line(result)
    assert says in line and "free space" not in line, line
    assert not (run / rundir.LABELS_NPZ).exists()


def test_a_huge_synthetic_image_shape_is_refused_up_front(tmp_path):
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress",
                    "--set", "data.synthetic_shape=[100000, 100000, 3]")
    assert result.exit_code == 1
    line = one_line(result)
    assert "synthetic_shape" in line and "queries" not in line, line
    assert not run.exists()


def test_an_npz_label_past_the_class_limit_is_refused_before_any_folder(tmp_path):
    import numpy as np

    from pate.data import load_npz

    rng = np.random.default_rng(0)
    path = tmp_path / "data.npz"
    y = rng.integers(0, 3, 200)
    y[7] = 2_000_000_000
    np.savez(path, x_train=rng.integers(0, 255, (200, 8, 8), dtype=np.uint8), y_train=y,
             x_test=rng.integers(0, 255, (40, 8, 8), dtype=np.uint8), y_test=rng.integers(0, 3, 40))
    with pytest.raises(PateError, match="y_train holds the label 2000000000"):
        load_npz(path)
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", "--set", "data.name=npz",
                    "--set", f"data.path={path}", "--set", "data.public_size=20", "--set", "aggregation.queries=10")
    assert result.exit_code == 1 and "2000000000" in one_line(result), result.output
    assert not (run / rundir.TEACHERS_DIR).exists()


def test_late_callbacks_into_a_closed_event_loop_are_dropped_and_others_kept(monkeypatch):
    """A save that fails on a full disk: tensorstore's writes still in flight call back into
    orbax's closed event loop, each printing a traceback (31 lines for train-student)."""
    from types import SimpleNamespace

    from pate.store import checkpoints

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    checkpoints._drop_closed_loop_callbacks()  # what every save does first
    closed = SimpleNamespace(exc_value=RuntimeError("Event loop is closed"), object=None)
    other = SimpleNamespace(exc_value=RuntimeError("something else"), object=None)
    sys.unraisablehook(closed)
    sys.unraisablehook(other)
    assert seen == [other]


def test_asyncio_records_of_a_failed_saves_writes_are_dropped_and_others_kept(monkeypatch, caplog):
    """A save that fails on a full disk under load: the futures gathering tensorstore's writes are
    collected after the one line and asyncio logs "exception was never retrieved" with a traceback.
    Dropped once a save has failed; kept before, and every other asyncio record kept."""
    import logging

    from pate.store import checkpoints

    monkeypatch.setattr(checkpoints._FailedWritesFilter, "failed", False)
    checkpoints._drop_closed_loop_callbacks()  # what every save does first
    log = logging.getLogger("asyncio")
    late = "_GatheringFuture exception was never retrieved"
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        log.error(late)
        checkpoints._failed_save()  # what a failed save does before its one line
        log.error(late)
        log.error("Task was destroyed but it is pending!")
    assert [r.getMessage() for r in caplog.records] == [late, "Task was destroyed but it is pending!"]


def test_os_errors_say_what_is_wrong():
    from pate.cli.options import os_error_line

    assert "folder" in os_error_line(IsADirectoryError(errno.EISDIR, "Is a directory", "/r/x.json"))
    assert "free space" not in os_error_line(IsADirectoryError(errno.EISDIR, "Is a directory", "/r/x.json"))
    assert "free space" in os_error_line(OSError(errno.ENOSPC, "No space left on device", "/r/x"))
    assert "writable" in os_error_line(PermissionError(errno.EACCES, "Permission denied", "/r/x"))


@pytest.mark.slow
def test_train_student_and_synth_on_a_full_disk_print_one_line(finished_tiny, tmp_path):
    """A real full disk (a small tmpfs; needs root): orbax fails part-way through its save."""
    with small_tmpfs(tmp_path / "small", "2m") as mnt:
        run = mnt / "run"
        shutil.copytree(finished_tiny, run, ignore=shutil.ignore_patterns("teachers"))
        free = os.statvfs(mnt)
        (mnt / "fill").write_bytes(b"x" * max(0, free.f_bavail * free.f_frsize - 24 * 1024))
        env = {**os.environ, "PATE_LEDGER_DIR": str(tmp_path / "ledgers")}
        for args in (["train-student", "--workdir", run, "--overwrite", "--no-progress"],
                     ["synth", "--config", TINY, "--workdir", mnt / "synth", "--no-progress"]):
            done = subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], env=env,
                                  capture_output=True, text=True, timeout=600)
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert not (tmp_path / "ledgers").exists() or not any((tmp_path / "ledgers").glob("*.jsonl"))


def test_run_with_a_target_refuses_before_training_a_budget_its_sanitised_release_would_exceed(tmp_path):
    """Under [privacy] target_eps the preflight counted the labels' cost only (the target plan
    was left to `label`): with total_budget between the labels' eps and the labels with the
    planned sanitised draw, the teachers trained, the labels were charged, and the release was
    refused at the end. Now the plan's draw counts too, and nothing trains."""
    from analysis.mechanisms import composition
    from pate.config import load_config
    from pate.release import target as release_target
    from pate.release.budget import accountable_record

    noise = {"aggregation.mechanism": "confident-gnmax", "aggregation.threshold": 4.0,
             "aggregation.sigma_threshold": 2.0, "aggregation.sigma": 2.0, "privacy.target_eps": 100.0}
    config = load_config(TINY, noise)
    record = accountable_record(config.aggregation, config.privacy)
    choice = release_target.choose(config, 6, 4, record=record, echo=lambda _line: None)
    assert choice.num_queries == config.aggregation.queries  # the plan asks them all: labels 73.6, with the draw 75.3
    labels = composition.labels_cost(record, choice.num_queries)
    alone = composition.compose([labels], config.privacy.delta).eps
    both = composition.compose([labels, release_target.planned_release_cost(record, choice)], config.privacy.delta).eps
    assert alone + 0.5 < both
    budget = (alone + both) / 2
    settings = [a for k, v in noise.items() for a in ("--set", f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}")]
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", *settings,
                    "--set", f"privacy.total_budget={budget}")
    assert result.exit_code == 1 and "total_budget" in one_line(result), result.output
    assert not (run / rundir.TEACHERS_DIR).exists()
    assert [e["kind"] for e in ledger_mod.Ledger.for_config(config).entries()] in ([], ["budget"])
