"""pate/released_labels.py: the one reader of labels.npz (analyze, student, run)."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.core.errors import PateError
from pate.release.labels import read_labels, read_release


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_reads_what_pate_label_writes(tmp_path):
    path = _write(tmp_path / "labels.npz", indices=np.arange(5), labels=np.array([1, -1, 0, 2, -1], np.int32),
                  mechanism=np.array("gnmax"), sigma=np.array(40.0))
    data = read_labels(path)
    assert data["mechanism"] == "gnmax" and float(data["sigma"]) == 40.0
    release = read_release(tmp_path, pool_size=10, num_classes=3)
    assert release.indices.tolist() == [0, 2, 3] and release.labels.tolist() == [1, 0, 2]
    assert release.num_queries == 5 and release.mechanism == "gnmax" and len(release.digest) == 64


def test_mechanism_is_required_for_the_analysis_only(tmp_path):
    path = _write(tmp_path / "labels.npz", indices=np.arange(3), labels=np.array([0, 1, 1]))
    with pytest.raises(PateError, match="mechanism"):
        read_labels(path)
    assert read_labels(path, require_mechanism=False)["mechanism"] == "unknown"
    assert read_release(tmp_path, pool_size=3, num_classes=2).mechanism == "unknown"


@pytest.mark.parametrize("arrays, message", [
    ({"indices": np.arange(3), "labels": np.array([0.0, 1.0, 1.0])}, "integer arrays"),
    ({"indices": np.arange(3), "labels": np.array([0, 1])}, "one length"),
    ({"indices": np.arange(4).reshape(2, 2), "labels": np.zeros((2, 2), int)}, "1-d"),
    ({"labels": np.array([0, 1])}, "indices"),
])
def test_bad_files_are_refused_with_the_reason(tmp_path, arrays, message):
    path = _write(tmp_path / "labels.npz", mechanism=np.array("lnmax"), **arrays)
    with pytest.raises(PateError, match=message):
        read_labels(path)


def test_a_missing_file_names_the_command_that_writes_it(tmp_path):
    with pytest.raises(PateError, match="pate label"):
        read_labels(tmp_path / "labels.npz")
    with pytest.raises(PateError, match="pate label"):
        read_release(tmp_path, pool_size=3, num_classes=2)
