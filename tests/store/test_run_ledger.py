"""A run belongs to one ledger (issues 44, 51): a command on a run whose labels were charged to a
ledger the current ledger folder does not hold refuses in one line and charges nothing (it
used to charge a fresh, empty ledger there), and the "once" guard of the sanitised draw sees
the same labels' draw in every ledger folder it can see. Every route that reads a run or its
votes -- analyze (fine-grained too), label --overwrite, label --votes, analyze --votes,
train-student, dpsgd beside the run -- finds the run's ledger or refuses; labels no ledger
records are neither published nor learnt from."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from analysis.mechanisms import composition
from conftest import TINY, invoke, one_line, one_line_error, own_copy, run_entries, snapshot, unpublished_copy
from pate.config import load_config
from pate.store import ledger as ledger_mod, rundir


def _ledger_files(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("*.jsonl")) if folder.exists() else []


def _labelled(labelled_tiny, ledger_dir, tmp_path):
    """A copy of the tiny run, its labels charged to ``ledger_dir`` (the test's own PATE_LEDGER_DIR)."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    assert _ledger_files(ledger_dir)
    return run


def test_analyze_under_another_ledger_folder_refuses_in_one_line(labelled_tiny, ledger_dir, tmp_path, monkeypatch):
    run = _labelled(labelled_tiny, ledger_dir, tmp_path)
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(other))
    result = invoke("analyze", "--workdir", run)
    line = one_line(result)
    assert result.exit_code == 1 and "ledger" in line and str(other) in line, result.output
    assert "--import" in line
    assert _ledger_files(other) == [] and not (run / rundir.RELEASE_JSON).exists()
    # counted there on purpose, the run belongs to that folder's ledger too
    assert invoke("ledger", "--import", run).exit_code == 0
    again = invoke("analyze", "--workdir", run)
    assert again.exit_code == 0, again.output


def test_a_second_draw_of_the_same_labels_is_refused_from_another_ledger_folder(trained_run, ledger_dir, tmp_path,
                                                                                monkeypatch):
    """The labels' draw is recorded under the first folder; a copy of the run without its
    release.json, imported under a second folder (its labels counted there), is refused a second
    draw: the guard looks in the folder the run was labelled under too (labelled here, under
    the test's folder: a shared run's labelling folder is read-only)."""
    run, _ = trained_run
    assert invoke("label", "--config", TINY, "--workdir", run).exit_code == 0
    assert invoke("analyze", "--workdir", run).exit_code == 0
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    os.unlink(copy / rundir.RELEASE_JSON)
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(other))
    assert invoke("ledger", "--import", copy).exit_code == 0
    result = invoke("analyze", "--workdir", copy)
    line = one_line(result)
    assert result.exit_code == 1 and "already records" in line and str(ledger_dir) in line, result.output
    assert not (copy / rundir.RELEASE_JSON).exists()
    assert [e["kind"] for e in ledger_mod.Ledger.for_run(copy).entries()] == ["labels"]


def test_analyze_under_another_home_refuses_and_charges_the_runs_own_ledger_back_home(labelled_tiny, ledger_dir,
                                                                                       tmp_path, monkeypatch):
    """Under another HOME (no $PATE_LEDGER_DIR, no XDG_STATE_HOME: the default ledger folder is
    the new home's) the run's labels belong to a ledger that folder does not hold: one line
    naming that ledger and what to do, nothing drawn or charged anywhere. Pointed back at the
    run's own ledger folder, the same command charges that ledger."""
    run = _labelled(labelled_tiny, ledger_dir, tmp_path)
    named = json.loads(str(np.load(run / rundir.LABELS_NPZ)["meta"]))["ledger"]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("PATE_LEDGER_DIR")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    result = invoke("analyze", "--workdir", run)
    line = one_line(result)
    assert result.exit_code == 1 and named in line and str(home) in line, result.output
    assert "PATE_LEDGER_DIR" in line and "[privacy] ledger" in line and "--import" in line
    assert not (run / rundir.RELEASE_JSON).exists() and not list(home.rglob("*.jsonl"))
    monkeypatch.setenv("PATE_LEDGER_DIR", str(ledger_dir))
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert [e["kind"] for e in ledger_mod.Ledger.for_run(run).entries()] == ["labels", "sanitised-eps"]


def test_round2_under_another_ledger_folder_refuses_in_one_line(finished_tiny, tmp_path, monkeypatch):
    """Round 2 composes with round 1, whose releases are charged to the run's ledger: under a
    folder that does not hold it, `pate label --round 2` refuses before drawing anything."""
    run = own_copy(finished_tiny, tmp_path / "run")
    before = snapshot(run)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "other-ledgers"))
    result = invoke("label", "--round", 2, "--workdir", run, "--queries", 5)
    line = one_line(result)
    assert result.exit_code == 1 and "--import" in line and str(tmp_path / "other-ledgers") in line, result.output
    assert snapshot(run) == before and not list((tmp_path / "other-ledgers").glob("*.jsonl"))


@pytest.fixture(scope="module")
def fine_labelled(tmp_path_factory):
    """A fine-grained release of the tiny config (`pate label`, no teachers, seconds), its labels
    charged to a ledger folder of its own beside it (``fine_labelled.parent / "ledgers"``, which
    `own_copy` brings)."""
    folder = tmp_path_factory.mktemp("fine-labelled")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(folder / "ledgers"))
        result = invoke("label", "--config", TINY, "--workdir", folder / "run", "--mechanism", "fine-grained",
                        "--seed", 3)
    assert result.exit_code == 0, result.output
    return folder / "run"


def test_fine_grained_analyze_under_a_folder_that_does_not_hold_its_labels_refuses(fine_labelled, ledger_dir,
                                                                                  tmp_path, monkeypatch):
    """It published a headline of 0 ("0 release(s), this one included") under an empty folder,
    and another release of the same data alone under a folder that holds that one; now it
    refuses as a teachers' run does, and publishes under the folder that charged it."""
    run = own_copy(fine_labelled, tmp_path / "run")
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(other))
    line = one_line_error(invoke("analyze", "--workdir", run), 1)
    assert "--import" in line and str(other) in line and "PATE_LEDGER_DIR" in line, line
    assert not (run / rundir.RELEASE_JSON).exists() and _ledger_files(other) == []
    book = ledger_mod.Ledger.for_config(load_config(run / rundir.CONFIG_TOML))  # the same data set, under `other`
    book.charge("labels", composition.Cost.from_json({"kind": "pure", "eps0": 1.0, "count": 1}), subject="another")
    line = one_line_error(invoke("analyze", "--workdir", run), 1)
    assert "--import" in line and str(other) in line, line
    assert not (run / rundir.RELEASE_JSON).exists() and len(book.entries()) == 1
    monkeypatch.setenv("PATE_LEDGER_DIR", str(ledger_dir))
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert json.loads((run / rundir.RELEASE_JSON).read_text())["data_set"]["releases"] == 1


def test_every_command_on_a_run_or_its_votes_under_another_folder_refuses(labelled_tiny, tmp_path, monkeypatch):
    """Under a folder that does not hold the run's ledger, `label --overwrite`, `label --votes
    RUN/votes.npz`, `analyze --votes RUN/votes.npz`, `train-student` and `dpsgd` beside the run
    each refuse in one line naming the folder the run was labelled under, before any work;
    they charged a fresh ledger there (a second budget) or trained on the run unchecked."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    home = labelled_tiny.parent / "ledgers"  # the folder its votes were labelled under
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(other))
    before = snapshot(run)
    votes = run / rundir.VOTES_NPZ
    for args in (("label", "--workdir", run, "--overwrite"),
                 ("label", "--votes", votes, "--workdir", tmp_path / "new", "--num-classes", 4, "--mechanism",
                  "gnmax", "--sigma", 3),
                 ("analyze", "--votes", votes, "--mechanism", "gnmax", "--sigma", 3, "--release-json",
                  tmp_path / "out.json"),
                 ("train-student", "--workdir", run, "--overwrite", "--no-progress"),
                 ("dpsgd", "--config", TINY, "--workdir", run, "--no-progress")):
        line = one_line_error(invoke(*args), 1)
        assert "PATE_LEDGER_DIR" in line and "--import" in line, (args[0], line)
        # the folder is named from the votes; a student never opens them
        assert str(home) in line or args[0] == "train-student", (args[0], line)
    assert snapshot(run) == before and _ledger_files(other) == []
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "new" / rundir.LABELS_NPZ).exists()


def test_labels_no_ledger_records_are_neither_published_nor_learnt_from(labelled_tiny, tmp_path):
    """Labels written by a script (one label changed, no ledger named) were counted in one
    release.json and never charged, and a student trained on them; now both refuse, naming
    `pate ledger --import`, after which they are charged once and published."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    with np.load(run / rundir.LABELS_NPZ) as f:
        arrays = {k: f[k] for k in f.files if k != "meta"}
    first = int(np.flatnonzero(arrays["labels"] >= 0)[0])
    arrays["labels"] = arrays["labels"].copy()
    arrays["labels"][first] = (arrays["labels"][first] + 1) % 4
    np.savez(run / rundir.LABELS_NPZ, **arrays)
    before, entries = snapshot(run), run_entries(run)
    for args in (("analyze", "--workdir", run), ("train-student", "--workdir", run, "--overwrite", "--no-progress")):
        line = one_line_error(invoke(*args), 1)
        assert f"pate ledger --import {run}" in line and "no ledger records" in line, line
    assert snapshot(run) == before and run_entries(run) == entries
    assert invoke("ledger", "--import", run).exit_code == 0
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 0, result.output
    assert [e["kind"] for e in run_entries(run)] == ["labels", "labels", "sanitised-eps"]
    assert json.loads((run / rundir.RELEASE_JSON).read_text())["data_set"]["releases"] == 3


def test_randomized_response_is_composed_over_the_data_sets_releases(tmp_path, monkeypatch):
    """Each fine-grained release randomises the labels again, so its label-DP eps is spent once per
    release: release.json gave the release's own label_eps alone (issue 51). The data set's label-DP
    figure adds every release's (capped by the data set's replace-one headline, which bounds it too)."""
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    config = tmp_path / "rr.toml"
    config.write_text(TINY.read_text() + '\n[fine_grained]\npca = 16\nlabel_noise = "randomized-response"\n'
                      'label_eps = 0.25\n')
    for run in ("a", "b"):
        result = invoke("label", "--config", config, "--workdir", tmp_path / run, "--mechanism", "fine-grained")
        assert result.exit_code == 0, result.output
    analyzed = invoke("analyze", "--workdir", tmp_path / "b")
    assert analyzed.exit_code == 0, analyzed.output
    release = json.loads((tmp_path / "b" / "release.json").read_text())
    assert release["details"]["label_eps"] == 0.25  # this release's
    assert release["eps"] > 0.5 and release["details"]["label_eps_data_set"] == pytest.approx(0.5)
