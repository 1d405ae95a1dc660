"""No command writes into a ledger folder but the ledger itself (issue 52): a report, an export,
a run directory or an encoder inside one is refused in one line and the ledgers stay as they
were (`pate.store.ledger_home.ledger_folder_of`, asked by `pate.store.rundir.output_problem`, the
door and `pate features`)."""

from __future__ import annotations

import pytest

from conftest import TINY, invoke, one_line_error, own_copy, snapshot
from pate.store import identity, ledger_home


@pytest.fixture
def run_and_ledgers(labelled_tiny, tmp_path, ledger_dir):
    """An own copy of the labelled tiny run, its ledger in ``$PATE_LEDGER_DIR`` (``ledger_dir``)."""
    run = own_copy(labelled_tiny, tmp_path / "run")
    assert any(ledger_dir.glob("*.jsonl")) and (ledger_dir / ".key").is_file()
    return run, ledger_dir


def _ledger_file(ledgers):
    return sorted(ledgers.glob("*.jsonl"))[0]


@pytest.mark.parametrize("target", ["ledger", "key", "new"])
def test_an_export_into_the_ledger_folder_is_refused_and_the_ledgers_kept(run_and_ledgers, target):
    run, ledgers = run_and_ledgers
    path = {"ledger": _ledger_file(ledgers), "key": ledgers / ".key", "new": ledgers / "export.json"}[target]
    before = snapshot(ledgers)
    line = one_line_error(invoke("ledger", "--workdir", run, "--export", path), 2)
    assert "inside the ledger folder" in line and "--export" in line
    assert snapshot(ledgers) == before
    assert invoke("ledger", "--workdir", run).exit_code == 0  # not "damaged"


@pytest.mark.parametrize("target", ["ledger", "key"])
def test_audit_and_analyze_reports_into_the_ledger_folder_are_refused(run_and_ledgers, target):
    run, ledgers = run_and_ledgers
    path = _ledger_file(ledgers) if target == "ledger" else ledgers / ".key"
    before, run_before = snapshot(ledgers), snapshot(run)
    line = one_line_error(invoke("audit", "--config", TINY, "--trials", 100, "--json", path), 2)
    assert "inside the ledger folder" in line
    for option in ("--json", "--release-json", "--plot"):
        line = one_line_error(invoke("analyze", "--workdir", run, option, path), 2)
        assert "inside the ledger folder" in line and option in line
    assert snapshot(ledgers) == before and snapshot(run) == run_before


def test_a_run_directory_inside_the_ledger_folder_is_refused(ledger_dir, tmp_path):
    """A ledger folder (or a folder in it) as --workdir: refused before the lock or any file is
    made, by $PATE_LEDGER_DIR's name and, under another one, by the ledgers it holds."""
    identity.keyed(ledger_dir, b"probe")  # the folder's key, as the first charge makes it
    before = snapshot(ledger_dir)
    for workdir in (ledger_dir, ledger_dir / "run"):
        line = one_line_error(invoke("train-teachers", "--config", TINY, "--workdir", workdir, "--no-progress"), 1)
        assert f"inside the ledger folder {ledger_dir}" in line
    assert snapshot(ledger_dir) == before and not (ledger_dir / "run").exists()
    (ledger_dir / "a.jsonl").write_text("")
    elsewhere = tmp_path / "other-ledgers"
    line = one_line_error(invoke("train-teachers", "--config", TINY, "--set",
                                 f'privacy.ledger="{elsewhere}"', "--workdir", ledger_dir / "run", "--no-progress"), 1)
    assert "inside the ledger folder" in line  # the folder holds ledgers, whatever the config names
    assert not (ledger_dir / "run").exists()


def test_the_ledger_folder_is_known_by_name_and_by_what_it_holds(tmp_path, monkeypatch):
    named = tmp_path / "named"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(named))
    assert ledger_home.ledger_folder_of(named / "x" / "y.json") == named  # not made yet: still its name
    other = tmp_path / "other"
    identity.keyed(other, b"probe")
    assert ledger_home.ledger_folder_of(other / "r.json") is None  # a key alone is not yet a ledger folder
    (other / "d.jsonl").write_text("")
    assert ledger_home.ledger_folder_of(other / "r.json") == other
    (tmp_path / "link").symlink_to(other)
    assert ledger_home.ledger_folder_of(tmp_path / "link" / "r.json") == other
    assert ledger_home.ledger_folder_of(tmp_path / "run" / "release.json") is None
