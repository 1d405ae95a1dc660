"""The run directory: atomic writes, metadata, npz/JSON round trips, overwrite/resume rules."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from analysis.core.errors import PateError
from pate import __version__
from pate.store import rundir
from pate.config import config_hash
from conftest import charged


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "a.txt"
    rundir.atomic_write_text(path, "one")
    rundir.atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.txt"]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask


def test_failed_write_keeps_old_content(tmp_path, monkeypatch):
    path = tmp_path / "a.json"
    rundir.atomic_write_text(path, "old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(rundir.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        rundir.atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_json_carries_meta(tmp_path, tiny_config):
    path = tmp_path / "x.json"
    rundir.write_json(path, {"acc": np.array([0.5, 0.25]), "n": np.int64(3),
                             "bad": float("nan")}, tiny_config)
    doc = json.loads(path.read_text())
    assert doc["meta"]["config_hash"] == config_hash(tiny_config)
    assert doc["meta"]["pate_version"] == __version__
    assert doc["acc"] == [0.5, 0.25] and doc["n"] == 3 and doc["bad"] is None
    assert rundir.read_json(path) == doc


def test_report_json_carries_meta_and_null_for_infinite(tmp_path, tiny_config):
    """privacy.json and release.json carry the `meta` every JSON artifact carries, and
    write a non-finite number as null (as write_json does), never as a string."""
    from analysis.reporting import report_io
    from pate.steps.analyze import analyze

    votes = np.zeros((20, 4), np.int32)
    votes[:, 0] = 6
    np.savez(tmp_path / rundir.VOTES_NPZ, votes=votes)
    np.savez(tmp_path / rundir.LABELS_NPZ, indices=np.arange(20), labels=np.zeros(20, np.int32),
             mechanism=np.array("lnmax"), gamma=np.array(0.1))
    rundir.RunDir(tmp_path).write_config(tiny_config)
    charged(tmp_path)  # hand-made labels: charged first (`pate ledger --import`)
    analyze(tiny_config, tmp_path, seed=1, echo=lambda *a: None)
    for name in (rundir.PRIVACY_JSON, rundir.RELEASE_JSON):
        meta = json.loads((tmp_path / name).read_text())["meta"]
        assert meta["config_hash"] == config_hash(tiny_config) and meta["pate_version"] == __version__
    assert report_io.jsonable({"a": float("inf"), "b": [np.float32("-inf"), np.float64(2.5)],
                               "c": np.array([1.0, np.nan])}) == {"a": None, "b": [None, 2.5], "c": [1.0, None]}


def test_read_json_errors(tmp_path):
    with pytest.raises(PateError, match="not found"):
        rundir.read_json(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(PateError, match="not readable JSON"):
        rundir.read_json(tmp_path / "bad.json")


def test_npz_round_trip_with_meta(tmp_path, tiny_config):
    votes = np.arange(12, dtype=np.int32).reshape(4, 3)
    rundir.write_npz(tmp_path / "votes.npz", {"votes": votes}, tiny_config)
    out = rundir.read_npz(tmp_path / "votes.npz", required=["votes"])
    np.testing.assert_array_equal(out["votes"], votes)
    assert out["votes"].dtype == np.int32
    assert out["meta"]["config_hash"] == config_hash(tiny_config)
    with np.load(tmp_path / "votes.npz", allow_pickle=False) as f:  # readable without pate
        assert f["votes"].shape == (4, 3)
    with pytest.raises(PateError, match="lacks labels"):
        rundir.read_npz(tmp_path / "votes.npz", required=["labels"])
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(PateError, match="not a readable .npz"):
        rundir.read_npz(tmp_path / "broken.npz")
    with pytest.raises(ValueError, match="reserved"):
        rundir.write_npz(tmp_path / "m.npz", {"meta": votes})


def test_config_round_trip(tmp_path, tiny_config):
    run = rundir.RunDir(tmp_path / "run")
    with pytest.raises(PateError, match="run directory"):
        run.read_config()
    run.write_config(tiny_config)
    assert run.read_config() == tiny_config
    run.check_same_config(tiny_config)
    other = dataclasses.replace(tiny_config, teachers=dataclasses.replace(
        tiny_config.teachers, epochs=99))
    with pytest.raises(PateError, match=r"differs .* in teachers\.epochs"):
        run.check_same_config(other)


def test_config_cut_on_any_line_is_refused_and_an_older_file_still_reads(tmp_path, tiny_config):
    """config.toml is written between a first and an end line: cut after any line but the last
    (every prefix of whole lines parses as TOML, a shorter config with defaults), it is refused
    as damaged; a file of an older version (neither line) still reads."""
    from pate.config import CONFIG_END, CONFIG_HEAD, config_to_toml, load_config

    run = rundir.RunDir(tmp_path / "run")
    run.write_config(tiny_config)
    path = run / rundir.CONFIG_TOML
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    assert lines[0].rstrip() == CONFIG_HEAD and lines[-1].rstrip() == CONFIG_END
    for k in range(1, len(lines)):
        path.write_text("".join(lines[:k]))
        with pytest.raises(PateError, match="cut short"):
            run.read_config()
    path.write_text(text + "\n")  # a trailing blank line is not damage
    assert run.read_config() == tiny_config
    path.write_text(config_to_toml(tiny_config))  # as older versions wrote it
    assert run.read_config() == tiny_config
    path.write_text("".join(lines[:-1]))  # any reader of a config file, not only a run's
    with pytest.raises(PateError, match="cut short"):
        load_config(path)


def test_prepare_rules(tmp_path):
    run = rundir.RunDir(tmp_path / "run")
    names = rundir.TEACHER_ARTIFACTS
    assert run.prepare(names) is False  # fresh: creates the directory
    assert run.path.is_dir()
    with pytest.raises(PateError, match="nothing to resume"):
        run.prepare(names, resume=True)
    (run / rundir.TEACHERS_DIR).mkdir()
    (run / rundir.TEACHERS_DIR / "1").mkdir()
    (run / rundir.TEACHERS_JSON).write_text("{}")
    (run / rundir.VOTES_NPZ).write_text("other command's file")
    with pytest.raises(PateError, match="already holds teachers, teachers.json; pass --overwrite"):
        run.prepare(names)
    with pytest.raises(PateError, match="exclude each other"):
        run.prepare(names, overwrite=True, resume=True)
    assert run.prepare(names, resume=True) is True
    assert run.exists(rundir.TEACHERS_JSON)
    assert run.prepare(names, overwrite=True) is False
    assert not run.exists(rundir.TEACHERS_DIR) and not run.exists(rundir.TEACHERS_JSON)
    assert run.exists(rundir.VOTES_NPZ)  # only the named artifacts are replaced
