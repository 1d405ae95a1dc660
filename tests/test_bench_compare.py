"""bench/compare.py's PATE side: rows released from one trained ensemble through `pate run`,
read from public files only, and the accuracy-against-ε plot."""

from __future__ import annotations

import importlib.util
import json
import os

from conftest import ROOT, TINY


def _compare():
    spec = importlib.util.spec_from_file_location("bench_compare", ROOT / "bench" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pate_rows_from_one_ensemble(trained_run, tmp_path, capsys):
    run, _ = trained_run
    root, png = tmp_path / "compare", tmp_path / "compare.png"
    compare = _compare()
    before = {p.name: p.stat().st_mtime_ns for p in (run / "teachers").rglob("*") if p.is_file()}
    assert compare.main(["--config", str(TINY), "--root", str(root), "--models",
                         "--pate-teachers", str(run), "--pate-queries", "20", "60", "--plot", str(png)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    pate = [r for r in rows if r.get("method", "").startswith("pate")]
    assert [r["queries"] for r in pate] == [20, 60]
    for r, q in zip(pate, (20, 60)):
        release = json.loads((root / f"pate-q{q}" / "release.json").read_text())
        student = json.loads((root / f"pate-q{q}" / "student.json").read_text())
        assert r["eps"] == release["eps"] and r["eps_source"] == "release.json:eps"
        assert r["accuracy"] == student["accuracy"]
        assert r["wall_time_parts"]["teachers"] is not None
    assert pate[0]["eps"] > 0 and pate[0]["delta"] > 0
    # The teachers were linked, not retrained: same inodes, untouched files.
    linked = root / "pate-q20" / "teachers"
    for p in (run / "teachers").rglob("*"):
        if p.is_file():
            q = linked / p.relative_to(run / "teachers")
            assert os.stat(q).st_ino == os.stat(p).st_ino
    assert before == {p.name: p.stat().st_mtime_ns for p in (run / "teachers").rglob("*") if p.is_file()}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second call reads the rows instead of training again.
    mtime = (root / "pate-q20" / "student.json").stat().st_mtime_ns
    assert compare.main(["--config", str(TINY), "--root", str(root), "--models", "--no-train",
                         "--pate-teachers", str(run), "--pate-queries", "20"]) == 0
    assert (root / "pate-q20" / "student.json").stat().st_mtime_ns == mtime
