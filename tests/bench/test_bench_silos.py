"""bench/silos.py on the tiny config: one JSON row per release (central, then across silos, each
draw), then the summary; every release charged in the ledger folder under the bench's root (the
coordinator's once a draw, the data set's for each central release and each silo's share); a
root that holds a draw's run is refused. Accuracy and speed are measured by the bench, not here."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("flwr")

from pate.store.ledger import Ledger

from conftest import TINY, bench_module

SETS = ['aggregation.mechanism="fine-grained"', 'features.map="pixels"', "fine_grained.pca=8"]


@pytest.fixture
def bench(monkeypatch):
    """bench/silos.py as a module, with what it replaces for its process (the scattering and map
    caches, the timed silo, `$PATE_LEDGER_DIR`) put back after the test."""
    from pate.programs import public_features, scattering
    from pate.steps import label_silos

    for module, name in ((public_features, "fit"), (scattering, "scatter"), (label_silos, "contribute")):
        monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setenv("PATE_LEDGER_DIR", os.environ["PATE_LEDGER_DIR"])
    return bench_module("silos")


@pytest.mark.slow  # a research harness end to end; the release across silos has fast tests of its own
def test_a_row_per_release_then_the_summary_each_release_charged_under_the_root(bench, tmp_path, capsys):
    root = tmp_path / "root"
    argv = ["--config", str(TINY), *[a for s in SETS for a in ("--set", s)], "--silos", "3", "--draws", "2",
            "--root", str(root)]
    out = bench.main(argv)
    *rows, summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert summary == out
    assert [(r["method"], r["draw"]) for r in rows] == [("central", 1), ("silos", 1), ("central", 2), ("silos", 2)]
    assert all(r["eps"] == 1.0 and 0.5 < r["label_accuracy"] <= 1.0 for r in rows)
    assert all(r["present"] == 3 and len(r["silo_s"]) == 3 for r in rows if r["method"] == "silos")
    assert out["summary"]["silos"]["label_accuracy"]["draws"] == 2 and out["silos"] == 3
    assert os.environ["PATE_LEDGER_DIR"] == str(root / "ledgers")
    coordinator = Ledger.for_run(root / "silos-d1").releases()
    assert [e["mechanism"].get("silos") for e in coordinator] == [3, 3]
    data_set = Ledger.for_run(root / "central-d1").releases()
    assert sorted(str(e["mechanism"].get("silo")) for e in data_set) == sorted(["None"] * 2 + ["0", "1", "2"] * 2)
    with pytest.raises(SystemExit):  # every draw is a new release: a used root is refused
        bench.main(argv)
