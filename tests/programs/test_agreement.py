"""The one agreement of a `--distributed` command (`pate.programs.agreement`, `Cluster.agree_on`):
what every process must share (every setting by name, the data set's and the teachers' digests,
the map's weights by content, never where a file lies), and how a process whose facts differ
stops every process with one line naming the first that differs. Played clusters (`Others`),
no JAX processes; tests/steps/test_distributed_agreement.py plays it for each command."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import Others
from pate.programs import agreement
from pate.programs import cluster as cl


def told(word) -> str:
    return bytes(word[3:3 + word[2]].astype(np.uint8)).decode()


def test_every_setting_is_a_fact_by_its_name_but_not_where_files_lie(tiny_config):
    facts = agreement.facts(tiny_config)
    for name in ("dpsgd.clip_norm", "dpsgd.eps", "fine_grained.eps", "fine_grained.label_noise",
                 "fine_grained.label_eps", "fine_grained.votes_per_record", "fine_grained.noise",
                 "aggregation.sigma", "aggregation.mechanism", "privacy.delta", "features.map", "teachers.features"):
        assert name in facts
    assert "data.path" not in facts and "features.weights" not in facts
    moved = dataclasses.replace(tiny_config, data=dataclasses.replace(tiny_config.data, path="/elsewhere"))
    assert agreement.facts(moved) == facts
    assert len(facts) <= cl.MESSAGE_BYTES  # one agreement word carries them all


def test_the_data_set_is_its_content_not_its_file(tiny_config, tmp_path):
    from pate.data import load_dataset

    made = load_dataset(tiny_config.data)
    arrays = {"x_train": made.x_train, "y_train": made.y_train, "x_test": made.x_test, "y_test": made.y_test}
    np.savez(tmp_path / "a.npz", **arrays)
    np.savez_compressed(tmp_path / "b.npz", **arrays)
    arrays["x_train"] = made.x_train.copy()
    arrays["x_train"][5, 0, 0, 0] = 1.0 - arrays["x_train"][5, 0, 0, 0]
    np.savez(tmp_path / "c.npz", **arrays)

    def of(name):
        data = dataclasses.replace(tiny_config.data, name="npz", path=str(tmp_path / name))
        return agreement.facts(dataclasses.replace(tiny_config, data=data), data=True)

    a, b, c = of("a.npz"), of("b.npz"), of("c.npz")
    assert a == b
    assert [n for n in a if a[n] != c[n]] == [agreement.DATA_SET]


def test_the_map_weights_are_compared_by_digest(tiny_config, tiny_encoder, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_encoder, copy)
    at = lambda folder: agreement.facts(dataclasses.replace(
        tiny_config, features=dataclasses.replace(tiny_config.features, map="learned", weights=str(folder))))
    assert at(tiny_encoder) == at(copy)  # the same weights elsewhere
    assert agreement.MAP_WEIGHTS in at(copy)


def test_the_teachers_are_their_checkpoint(trained_run, tiny_config):
    workdir, _ = trained_run
    facts = agreement.facts(tiny_config, teachers=workdir)
    recorded = json.loads((workdir / "teachers.json").read_text())["checkpoint"]
    assert facts[agreement.TEACHERS] == f"{recorded['step']}:{recorded['sha256']}"


def _two(config, **kw):
    return agreement.facts(config, **kw)


def test_a_process_whose_setting_differs_names_it_and_tells_the_others(tiny_config):
    mine = dataclasses.replace(tiny_config, dpsgd=dataclasses.replace(tiny_config.dpsgd, clip_norm=1000.0))
    gather = Others(cl.facts_word(_two(tiny_config)), cl.status(), index=1)
    with pytest.raises(PateError) as err:
        cl.Cluster(1, 2, gather).agree_on(_two(mine))
    line = str(err.value)
    assert line.startswith("process 1's dpsgd.clip_norm (1000.0) differs from process 0's: give every process the "
                           "same config")
    assert not isinstance(err.value, cl.Stopped)
    assert [w[0] for w in gather.sent] == [0, 1] and told(gather.sent[1]) == line  # the others stop with it


def test_process_0_stops_with_the_line_of_the_process_that_differs(tiny_config):
    line = "process 1's fine_grained.label_noise ('randomized-response') differs from process 0's"
    gather = Others(cl.facts_word(_two(tiny_config)), cl.status(line))
    with pytest.raises(cl.Stopped) as err:
        cl.Cluster(0, 2, gather).agree_on(_two(tiny_config))
    assert str(err.value) == f"process 1 of 2 failed, so every process stopped (nothing was charged or written): {line}"


def test_processes_that_agree_go_on(tiny_config):
    facts = _two(tiny_config)
    for index in (0, 1):
        gather = Others(cl.facts_word(facts), cl.status(), index=index)
        cl.Cluster(index, 2, gather).agree_on(facts)
        assert len(gather.sent) == 2 and not any(w[0] for w in gather.sent)


def test_a_process_that_failed_before_the_agreement_is_heard_there(tiny_config):
    gather = Others(cl.status("cannot read its data"), index=1)
    with pytest.raises(cl.Stopped, match="process 0 of 2 failed.*cannot read its data"):
        cl.Cluster(1, 2, gather).agree_on(_two(tiny_config))
    assert len(gather.sent) == 1


def test_another_kind_of_command_is_told_apart(tiny_config):
    gather = Others(cl.facts_word({"a": "1"}), cl.status(), index=1)
    with pytest.raises(PateError, match="process 1 runs another command or release than process 0"):
        cl.Cluster(1, 2, gather).agree_on(_two(tiny_config))


def test_inside_together_the_failure_is_told_once(tiny_config):
    mine = dataclasses.replace(tiny_config, privacy=dataclasses.replace(tiny_config.privacy, delta=1e-6))
    gather = Others(cl.facts_word(_two(tiny_config)), cl.status(), index=1)
    cluster = cl.Cluster(1, 2, gather)
    with pytest.raises(PateError, match="privacy.delta"):
        with cluster.together():
            cluster.agree_on(_two(mine))
    assert len(gather.sent) == 2  # no third word: the others already know


def test_one_process_agrees_with_itself_without_reading_anything(tiny_config, monkeypatch):
    monkeypatch.setattr(agreement, "facts", lambda *a, **k: pytest.fail("read for one process"))
    agreement.agree(cl.Cluster(0, 1, gather=lambda x: np.asarray(x)[None]), tiny_config, data=True)
