"""bench/fine_grained.py read the real training split and printed figures measured on it, uncharged and
unrecorded (issue 51). It now runs on the public proxy alone unless --on-private-data, which records a
private-tuning mark in the data set's ledger before any private record is read."""

from __future__ import annotations

import json

import pytest

from conftest import TINY, bench_module

ARGS = ["--config", str(TINY), "--eps", "1", "--ks", "1", "--ms", "5", "--proxy-draws", "1", "--draws", "1",
        "--pca", "8", "--no-hindsight"]


def test_the_default_reads_no_private_record(tmp_path, monkeypatch):
    import pate.data

    bench = bench_module("fine_grained")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))

    def refuse(*_, **__):
        raise AssertionError("the private split was made")

    monkeypatch.setattr(pate.data, "split", refuse)  # synthetic data are generated whole; the split is what is private
    out = bench.main(ARGS + ["--cache", str(tmp_path / "cache")])
    assert out["proxy"]["choice"] and "not measured" in out["real"]
    assert not (tmp_path / "ledgers").exists() or not any((tmp_path / "ledgers").glob("*.jsonl"))


def test_the_private_split_is_read_after_the_ledger_records_it(tmp_path, monkeypatch, capsys):
    from pate.config import load_config
    from pate.store.ledger import Ledger

    bench = bench_module("fine_grained")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    out = bench.main(ARGS + ["--cache", str(tmp_path / "cache"), "--on-private-data"])
    assert out["real"]["at_choice"]
    assert Ledger.for_config(load_config(TINY)).tuned_on_private_data()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["bench"] == "fine_grained"
