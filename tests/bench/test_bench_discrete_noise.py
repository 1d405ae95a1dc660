"""bench/discrete_noise.py: the samplers' rates are printed as one JSON object per (sampler,
scale), and the run is short with small counts (speed is measured, never asserted)."""

from __future__ import annotations

import json

from conftest import bench_module


def test_bench_prints_one_json_row_per_sampler_and_scale(capsys):
    module = bench_module("discrete_noise")
    rows = module.main(["--scales", "1", "700", "--vector", "2000", "--scalar", "20", "--seed", "3"])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == rows and len(rows) == 6
    assert {r["sampler"] for r in rows} == {"discrete_laplace_array", "discrete_laplace (scalar)",
                                            "float64 laplace (inexact)"}
    assert all(r["samples_per_s"] > 0 and r["entropy"] == "philox seed" for r in rows)
