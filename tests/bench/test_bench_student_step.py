"""bench/student_step.py: one JSON row per timed call, ratios to the per-image reference
(speed is measured, never asserted)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from conftest import TINY, bench_module


def _bench():
    return bench_module("student_step")


@pytest.mark.slow  # a research harness end to end (the fast suite is near its 7 minutes)
def test_rows_on_the_tiny_config(capsys):
    rows = _bench().main(["--config", str(TINY), "--reps", "2", "--steps", "2", "--shape", "8", "8", "1"])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == rows
    assert [r["what"] for r in rows] == ["strong (product)", "strong (per-image keys)", "weak", "train step"]
    assert all(r["ms"] > 0 for r in rows) and rows[1]["ratio_to_per_image_strong"] == 1.0


@pytest.mark.slow  # the harness's reference, not the product
def test_the_reference_makes_the_same_kind_of_image():
    """The reference the product is timed against does the same operations: same range,
    one grey square per image, the images changed."""
    images = np.random.default_rng(0).uniform(0, 1, (8, 28, 28, 1)).astype(np.float32)
    out = np.asarray(_bench().strong_per_image_keys(jax.random.key(1), images, 0, False, 8))
    assert out.shape == images.shape and out.min() >= 0 and out.max() <= 1
    for o in out:
        ys, xs = np.nonzero(o[..., 0] == 0.5)
        assert ys.size == (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
    assert np.mean(np.abs(out - images)) > 0.05
