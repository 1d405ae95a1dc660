"""The ledger holds what was released, whatever fails (issue 44): a commit whose rollback
fails still withdraws the charge of what never reached its place, in one line; entry numbers
stay unique after a withdraw; `pate ledger --json` gives scripts what the table shows."""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest

from analysis.core.errors import CommitFailed, PateError
from analysis.mechanisms import composition
from conftest import failing_replace, invoke, one_line, run_entries, staged_labels, unpublished_copy
from pate.store import door, ledger as ledger_mod, rundir




# --------------------------------------------------------------------------- a rollback that fails


def test_an_analyze_commit_whose_rollback_is_refused_withdraws_its_draw_in_one_line(labelled_tiny, tmp_path,
                                                                                   monkeypatch):
    """release.json cannot be renamed into place (EIO) and putting privacy.json back meets a
    permission error: no public file was ever in place, so the draw's charge is withdrawn,
    the error is one line, and the next analyze draws (it is not refused as a second draw)."""
    run = unpublished_copy(labelled_tiny, tmp_path)

    def fault(src, dst):
        if dst == str(run / rundir.RELEASE_JSON) and src.endswith(".tmp"):
            return OSError(errno.EIO, "Input/output error", dst)
        if src == str(run / rundir.PRIVACY_JSON):  # the rollback of privacy.json
            return OSError(errno.EACCES, "Permission denied", src)
        return None

    real = failing_replace(monkeypatch, fault)
    result = invoke("analyze", "--workdir", run)
    line = one_line(result)
    assert result.exit_code == 1 and "Input/output error" in line and "Permission denied" in line, result.output
    assert "withdrawn" in line or "nothing was released" in line, line
    assert [e["kind"] for e in run_entries(run)] == ["labels"]
    assert not (run / rundir.RELEASE_JSON).exists()
    monkeypatch.setattr(os, "replace", real)
    again = invoke("analyze", "--workdir", run)
    assert again.exit_code == 0, again.output
    assert [e["kind"] for e in run_entries(run)] == ["labels", "sanitised-eps"]


def test_a_staging_commit_whose_rollback_is_refused_is_a_commit_failed_when_no_release_was_in_place(
        tmp_path, monkeypatch):
    """The new labels.npz cannot come in (EIO) after the private votes.npz did, and moving the
    old votes back meets EPERM: labels.npz (the release) never reached its place, so the commit
    raises `CommitFailed` (its charge is withdrawn), never a plain OSError."""
    label_files = (rundir.VOTES_NPZ, rundir.LABELS_NPZ)
    run, staging = staged_labels(tmp_path, label_files, label_files)

    def fault(src, dst):
        if dst == str(run / rundir.LABELS_NPZ) and src.startswith(str(staging.path)):
            return OSError(errno.EIO, "Input/output error", dst)
        if src == str(run / rundir.VOTES_NPZ) and dst.startswith(str(staging.path)):  # the rollback
            return OSError(errno.EPERM, "Operation not permitted", src)
        return None

    real = failing_replace(monkeypatch, fault)
    with pytest.raises(CommitFailed) as err:
        staging.commit()
    message = str(err.value)
    assert "\n" not in message and "Input/output error" in message and "Operation not permitted" in message
    monkeypatch.setattr(os, "replace", real)
    assert (run / rundir.LABELS_NPZ).read_text() == "old labels"
    assert not staging.path.exists()  # never left for the next command to swap in


def test_a_staging_commit_whose_rollback_leaves_the_release_in_place_keeps_its_charge(tmp_path, monkeypatch):
    """labels.npz came in, the next rename failed, and taking labels.npz back out is refused:
    the release is out, so the commit raises a plain `PateError` (the charge stays), one line."""
    run, staging = staged_labels(tmp_path, (rundir.LABELS_NPZ,), (rundir.LABELS_NPZ,), extra=(rundir.CONFIG_TOML,))

    def fault(src, dst):
        if dst == str(run / rundir.CONFIG_TOML):
            return OSError(errno.EIO, "Input/output error", dst)
        if src == str(run / rundir.LABELS_NPZ) and dst.startswith(str(staging.path)):
            return OSError(errno.EPERM, "Operation not permitted", src)
        return None

    failing_replace(monkeypatch, fault)
    with pytest.raises(PateError) as err:
        staging.commit(extra=(rundir.CONFIG_TOML,))
    assert not isinstance(err.value, CommitFailed) and "\n" not in str(err.value)
    assert "stays charged" in str(err.value) and "Operation not permitted" in str(err.value)
    assert (run / rundir.LABELS_NPZ).exists()


def _book(tmp_path) -> ledger_mod.Ledger:
    return ledger_mod.Ledger("test data", tmp_path / "ledgers")


def _charge(book, eps=1.0, **options) -> door.Charge:
    return door.Charge(book, "labels", composition.Cost("pure", {"eps0": eps, "count": 1}), options)


def test_a_commit_error_no_commit_classified_keeps_the_charge_and_says_so_in_one_line(tmp_path):
    """Both commits (`door.Staging.commit`, the report's) classify every failure, their rollback's
    included; an error from elsewhere cannot say whether the release was out, so `publish` keeps
    the charge (over-counts, never under) and says so in one line."""
    book = _book(tmp_path)

    def broken():
        raise OSError(errno.EACCES, "Permission denied", str(tmp_path / "x"))

    with pytest.raises(PateError) as err:
        door.publish([_charge(book)], broken)
    assert "\n" not in str(err.value) and "Permission denied" in str(err.value)
    assert "stays charged" in str(err.value)
    assert len(book.entries()) == 1


# --------------------------------------------------------------------------- entry numbers, --json


def test_entry_numbers_stay_unique_after_a_withdraw(tmp_path):
    """Entries 1, 2, 3; the 2nd withdrawn (its commit put nothing in place): the next entry is
    4, not a second 3 (the number was the count of entries, plus one)."""
    book = _book(tmp_path)
    cost = composition.Cost("pure", {"eps0": 1.0, "count": 1})
    made = [book.charge("labels", cost, subject=f"s{k}") for k in range(3)]
    book.withdraw(made[1])
    book.charge("labels", cost, subject="s3")
    seqs = [e["seq"] for e in book.entries()]
    assert seqs == [1, 3, 4]
    assert len(set(seqs)) == len(seqs)


def test_ledger_json_gives_scripts_what_the_table_shows(tmp_path, monkeypatch):
    """`pate ledger --name N --json`: one JSON document on stdout with every entry (its number,
    kind, own eps at the delta asked), the cumulative eps, delta and route, and the budget — the
    same figures the table prints."""
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    book = ledger_mod.Ledger("scripted data", tmp_path / "ledgers")
    book.charge("labels", composition.Cost("pure", {"eps0": 0.5, "count": 2}), note="one")
    book.charge("labels", composition.Cost("gaussian", {"mu2": 0.25}), note="two")
    book.set_budget(10.0, 1e-5)
    result = invoke("ledger", "--name", "scripted data", "--json", "--delta", "1e-5")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    total = book.total(1e-5)
    assert doc["ledger"] == book.name and doc["delta"] == 1e-5
    assert [e["seq"] for e in doc["entries"]] == [1, 2, 3]
    assert [e["kind"] for e in doc["entries"]] == ["labels", "labels", "budget"]
    own = [composition.single_eps(composition.Cost.from_json(e["cost"]), 1e-5) for e in book.releases()]
    assert [e["own_eps"] for e in doc["entries"][:2]] == pytest.approx(own, rel=0, abs=0)
    assert doc["entries"][2]["own_eps"] is None
    assert doc["cumulative"]["eps"] == total.eps and doc["cumulative"]["delta"] == total.delta
    assert doc["cumulative"]["route"] == total.route and doc["cumulative"]["releases"] == 2
    assert doc["budget"] == {"eps": 10.0, "delta": 1e-5}
    table = invoke("ledger", "--name", "scripted data", "--delta", "1e-5").output
    assert f"cumulative eps {total.eps:.4g}" in table


def test_ledger_json_keeps_stdout_json_when_it_imports(finished_tiny, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(finished_tiny, run)
    result = invoke("ledger", "--import", run, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [e["kind"] for e in doc["entries"]] == ["labels", "sanitised-eps"]
    assert "charged: labels" in result.stderr
