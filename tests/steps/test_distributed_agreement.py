"""Every `--distributed` command agrees, before anything is read or drawn, on the data set, the
teachers' checkpoint and every privacy setting (`pate.programs.agreement`): a process whose
differ stops with one line naming what differs and tells the others, nothing read, charged or
written. Before, process 1 with `dpsgd.clip_norm = 1000`, randomized response on one process
only, or another data set or teachers, released with exit 0, charged at process 0's settings
to process 0's data set alone. Process 1 is played here (its cluster an all-gather of the test's,
`Others`, with process 0's words); tests/programs/test_agreement.py tests the agreement itself."""

from __future__ import annotations

import dataclasses
import os

import pytest

from analysis.core.errors import PateError
from conftest import Others
from pate.programs import agreement
from pate.programs import cluster as cl


def _as_process_1(monkeypatch, theirs: dict) -> Others:
    """Process 1 of 2 (the `Cluster()` a step makes), process 0 saying `theirs`, then its word."""
    gather = Others(cl.facts_word(theirs), cl.status(), index=1)
    played = cl.Cluster(1, 2, gather)
    monkeypatch.setattr(cl, "Cluster", lambda *a, **k: played)
    return gather


def _stopped_here(gather, err) -> None:
    assert not isinstance(err.value, cl.Stopped)
    assert [w[0] for w in gather.sent] == [0, 1]  # its facts, then its line: the others stop with it


def test_dpsgd_process_1_with_another_clip_norm_stops_all(monkeypatch, tiny_config, tmp_path):
    from pate.baselines.dpsgd import train_dpsgd

    mine = dataclasses.replace(tiny_config, dpsgd=dataclasses.replace(tiny_config.dpsgd, clip_norm=1000.0))
    gather = _as_process_1(monkeypatch, agreement.facts(tiny_config, data=True))
    with pytest.raises(PateError, match=r"process 1's dpsgd.clip_norm \(1000.0\) differs from process 0's") as err:
        train_dpsgd(mine, tmp_path / "run", show_progress=False, echo=lambda _: None)
    _stopped_here(gather, err)
    assert not (tmp_path / "run").exists()


def _fine(config, **kw):
    return dataclasses.replace(config, aggregation=dataclasses.replace(config.aggregation, mechanism="fine-grained"),
                               fine_grained=dataclasses.replace(config.fine_grained, pca=16, **kw))


def test_fine_grained_process_1_with_randomized_response_alone_stops_all(monkeypatch, tiny_config, tmp_path):
    from pate.steps.label import label

    ours = _fine(tiny_config)
    mine = _fine(tiny_config, label_noise="randomized-response", label_eps=2.0)
    gather = _as_process_1(monkeypatch, agreement.facts(ours, data=True))
    with pytest.raises(PateError, match=r"process 1's fine_grained.label_eps \(2.0\) differs from process 0's "
                                        r"\(and 1 more\)") as err:
        label(mine, tmp_path / "run", echo=lambda _: None)
    _stopped_here(gather, err)
    assert not (tmp_path / "run").exists()


def test_fine_grained_process_1_on_another_data_set_stops_all(monkeypatch, tiny_config, tmp_path):
    from pate.steps.label import label

    ours = agreement.facts(_fine(tiny_config), data=True)
    ours[agreement.DATA_SET] = "process 0's records"
    gather = _as_process_1(monkeypatch, ours)
    with pytest.raises(PateError, match=r"process 1's training data set \(its records' digest\) differs") as err:
        label(_fine(tiny_config), tmp_path / "run", echo=lambda _: None)
    _stopped_here(gather, err)


def test_label_process_1_with_other_teachers_stops_all(monkeypatch, trained_run, tiny_config):
    from pate.steps.label import label

    workdir, _ = trained_run
    ours = agreement.facts(tiny_config, teachers=workdir)
    ours[agreement.TEACHERS] = "4:other teachers"
    gather = _as_process_1(monkeypatch, ours)
    before = sorted(os.listdir(workdir))
    with pytest.raises(PateError, match=r"process 1's teachers' checkpoint \(teachers.json's digest\) differs"):
        label(tiny_config, workdir, echo=lambda _: None)
    assert [w[0] for w in gather.sent] == [0, 1]
    assert sorted(os.listdir(workdir)) == before


def test_run_process_1_with_another_privacy_setting_stops_all(monkeypatch, tiny_config, tmp_path):
    from pate.steps.pipeline import run

    mine = dataclasses.replace(tiny_config, privacy=dataclasses.replace(tiny_config.privacy, delta=1e-3))
    gather = _as_process_1(monkeypatch, agreement.facts(tiny_config))
    with pytest.raises(PateError, match=r"process 1's privacy.delta \(0.001\) differs from process 0's"):
        run(mine, tmp_path / "run", echo=lambda _: None)
    assert [w[0] for w in gather.sent] == [0, 1]
    assert not (tmp_path / "run").exists()


def test_fine_grained_process_1_with_other_votes_per_record_stops_all(monkeypatch, tiny_config, tmp_path):
    """Issue 52 saw a votes_per_record that differs between processes end in "internal error" (the
    histograms' totals disagreed); the one agreement, made before any record is read, names it."""
    from pate.steps.label import label

    gather = _as_process_1(monkeypatch, agreement.facts(_fine(tiny_config), data=True))
    with pytest.raises(PateError, match=r"process 1's fine_grained.votes_per_record \(3\) differs from process "
                                        r"0's") as err:
        label(_fine(tiny_config, votes_per_record=3), tmp_path / "run", echo=lambda _: None)
    _stopped_here(gather, err)
    assert not (tmp_path / "run").exists()
