"""`pate ledger --export` (issue 42): the data set's releases as one dp-accounting event, which
dp-accounting's own accountants read back and compose — to the ledger's own cumulative ε where the
costs have an exact event (Gaussians), to no less than it where the event is looser (pure ε as
zCDP), and not at all where dp-accounting has no event for a cost (a GNSS release)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analysis.mechanisms import composition, events
from analysis.mechanisms.noisy_max import ConfidentGNMax, GNMax
from analysis.mechanisms.permute_flip import PermuteAndFlip
from cli import main
from pate.store import ledger as ledger_mod


def _book(tmp_path, costs):
    book = ledger_mod.Ledger("data", tmp_path / "ledgers")
    for i, cost in enumerate(costs):
        book.charge("labels", cost, subject=f"release-{i}")
    return book


def test_gaussian_releases_compose_in_dp_accounting_to_the_ledgers_eps(tmp_path):
    """GNMax and Confident-GNMax labels: dp-accounting's PLD accountant on the exported event
    gives the ledger's PLD route (the same distributions; the ledger's discretisation), and its
    RDP accountant the ledger's RDP route up to the orders each tries."""
    from dp_accounting import pld, rdp

    costs = [composition.labels_cost(GNMax(40.0), 300), composition.labels_cost(ConfidentGNMax(200, 150, 40), 500)]
    book = _book(tmp_path, costs)
    doc = json.loads(json.dumps(book.export(1e-5)))  # through JSON, as a user reads the file
    event = events.from_json(doc["event"])
    total = composition.compose(costs, 1e-5)
    assert doc["releases"] == 2 and doc["ledger_eps"] == pytest.approx(total.eps)
    assert doc["dp_accounting_eps"]["pld"] == pytest.approx(total.routes["pld"], rel=1e-2)
    assert pld.PLDAccountant().compose(event).get_epsilon(1e-5) == pytest.approx(doc["dp_accounting_eps"]["pld"])
    assert rdp.RdpAccountant().compose(event).get_epsilon(1e-5) == pytest.approx(total.routes["rdp"], rel=3e-2)


def test_pure_releases_export_as_zcdp_never_below_the_ledger(tmp_path):
    book = _book(tmp_path, [PermuteAndFlip(0.05).cost(200)])
    doc = book.export(1e-5)
    assert doc["dp_accounting_eps"]["pld"] is None  # no dp-accounting PLD of a generic pure-eps step
    assert doc["dp_accounting_eps"]["rdp"] >= doc["ledger_eps"]
    assert doc["dp_accounting_eps"]["rdp"] <= 1.5 * doc["ledger_eps"]


def test_a_cost_without_an_event_makes_dp_accounting_refuse_the_whole_export(tmp_path):
    """A GNSS release has no dp-accounting event: the export says so (no figure from either
    accountant) instead of composing the rest and under-counting."""
    book = _book(tmp_path, [composition.labels_cost(GNMax(40.0), 300), composition.gnss_cost(0.01, 10.0)])
    doc = book.export(1e-5)
    assert doc["dp_accounting_eps"] == {"rdp": None, "pld": None}
    assert "gnss" in doc["cost_kinds"] and "UnsupportedDpEvent" in json.dumps(doc["event"])


def test_from_json_builds_dp_accounting_events_only():
    with pytest.raises(ValueError, match="not a dp-accounting event"):
        events.from_json({"module_name": "os", "class_name": "system", "command": "true"})
    with pytest.raises(ValueError, match="not a dp-accounting event"):
        events.from_json({"module_name": "dp_accounting.dp_event", "class_name": "Sequence"})


def test_the_cli_writes_the_export_and_lists_the_ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    _book(tmp_path, [composition.labels_cost(GNMax(40.0), 300)])
    out = tmp_path / "export.json"
    result = CliRunner().invoke(main, ["ledger", "--name", "data", "--export", str(out)])
    assert result.exit_code == 0, result.output
    assert "cumulative eps" in result.output and "as one dp-accounting event" in result.output
    doc = json.loads(out.read_text())
    assert doc["data_set"] == "data" and doc["event"]["class_name"] == "ComposedDpEvent"
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    refused = CliRunner().invoke(main, ["ledger", "--name", "data", "--export", str(link)])
    assert refused.exit_code == 2 and "symbolic link" in refused.output


def test_release_json_carries_the_releases_own_event(finished_tiny):
    """release.json of a run: the labels' and the sanitised draw's costs as dp-accounting events
    (LNMax's pure eps as zCDP, the smooth-sensitivity release's (eps, delta) unsupported)."""
    doc = json.loads((finished_tiny / "release.json").read_text())
    event = events.from_json(doc["dp_event"]["event"])
    assert [type(e).__name__ for e in event.events][0] in ("SelfComposedDpEvent", "ZCDpEvent")
    assert doc["dp_event"]["read_by"] == [k for k, v in events.supported(event).items() if v]


def test_an_export_of_a_ledger_name_that_does_not_exist_is_refused(tmp_path, monkeypatch):
    """`ledger --name TYPO --export` wrote an eps-0 event for a data set no ledger knows (issue 52)."""
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    _book(tmp_path, [composition.labels_cost(GNMax(40.0), 300)])
    out = tmp_path / "export.json"
    result = CliRunner().invoke(main, ["ledger", "--name", "dta", "--export", str(out)])
    assert result.exit_code == 1 and "no ledger named 'dta'" in result.output and not out.exists()
    assert [p.name for p in (tmp_path / "ledgers").glob("*.jsonl")] == [ledger_mod.Ledger("data").path.name]


def test_a_budget_for_a_ledger_name_that_does_not_exist_is_refused_and_nothing_written(tmp_path, monkeypatch):
    """`ledger --name TYPO --set-budget EPS` wrote a new ledger holding that budget, exit 0 (issue
    52): the data set's own ledger kept none. Refused in one line; the folder is as it was."""
    from conftest import one_line_error, snapshot

    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    _book(tmp_path, [composition.labels_cost(GNMax(40.0), 300)])
    before = snapshot(tmp_path / "ledgers")
    line = one_line_error(CliRunner().invoke(main, ["ledger", "--name", "dta", "--set-budget", "5"]), 1)
    assert line.startswith("pate: no ledger named 'dta' in ") and "no budget set (nothing written)" in line, line
    assert snapshot(tmp_path / "ledgers") == before
    ok = CliRunner().invoke(main, ["ledger", "--name", "data", "--set-budget", "50"])
    assert ok.exit_code == 0 and "budget: eps 50" in ok.output, ok.output
