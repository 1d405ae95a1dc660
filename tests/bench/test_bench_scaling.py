"""bench/scaling.py on a small case: its JSON rows and summary, the private bytes each process
records (train-teachers: its own teachers' shards; label's processes read the public pool alone: 0),
the same votes in every layout. Slow: four launches of JAX processes (40-90 s on the shared 2-core machine). Speed is
measured by the bench, never here."""

from __future__ import annotations

import json

import pytest

from conftest import bench_module


@pytest.mark.slow  # 1 and 2 processes train 2 teachers and vote: 40-90 s
def test_the_bench_reports_each_processs_private_records_and_the_same_votes(capsys):
    bench_module("scaling").main(["--processes", "1", "2", "--train-size", "600", "--teachers", "2",
                                  "--commands", "teachers", "votes"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    *rows, summary = lines
    by = {(r["command"], r["processes"]): r for r in rows}
    assert set(by) == {("teachers", 1), ("votes", 1), ("teachers", 2), ("votes", 2)}
    private = 600 * 28 * 28 * 4 / 2**20  # float32 images; labels are a few KiB more
    assert abs(by[("teachers", 1)]["private_mib"][0] - private) < 0.1  # one process: the whole split
    assert all(abs(b - private / 2) < 0.1 for b in by[("teachers", 2)]["private_mib"])  # its teacher's shard, each
    assert by[("votes", 2)]["private_mib"] == [0, 0]  # the pool alone (process 0: the split's digest as a stream)
    assert len(by[("votes", 2)]["peak_rss_mib"]) == 2
    assert summary["summary"]["votes"]["same_release_as_first"] is True
    assert summary["summary"]["teachers"]["ratio_to_first"]["1"] == 1.0
