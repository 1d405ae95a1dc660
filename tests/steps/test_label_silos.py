"""`pate silos run` (pate.steps.label_silos): three silos, each reading only its own third of the
records, release every pool point's label through Flower's SecAgg+ with one ledger charge, the
coordinator reading no private record; a silo killed mid-round, a silo on other settings, or one
index twice stops the round, nothing released or charged; `pate analyze` reports the release on
its ledger. Fast tests run Flower's real workflow and mod in this process (`pate.programs.flower_loopback`);
the slow ones start a SuperLink and three SuperNodes on 127.0.0.1."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("flwr")

from analysis.core.errors import PateError
from pate import data as data_mod
from pate.data import loading
from pate.config import config_to_toml, load_config
from pate.programs.data_facts import with_data_defaults
from pate.programs.flower_loopback import loopback_grid, server_context
from analysis.mechanisms.silos import guaranteed_eps
from pate.programs.cluster import block
from pate.release import silo_ledger
from pate.release.fine_grained_release import noise_of
from pate.release.labels import read_labels
from pate.steps import label_silos as silos
from pate.store import rundir
from pate.store.ledger import Ledger

from conftest import (TINY, coordinator_entries, invoke, one_line_error, run_with_a_silo_killed, silo_entries,
                      write_embeddings)

FINE = {"aggregation.mechanism": "fine-grained", "fine_grained.pca": 8, "features.map": "none",
        "fine_grained.smoothing": 10}


def _configs(tmp_path, theirs: dict | None = None, **more):
    """The coordinator's config on an .npz of embeddings (480 records, a pool of 200) and its file;
    the silos' files (silo 1's with `theirs` changed)."""
    data = write_embeddings(tmp_path / "records.npz")
    settings = {**FINE, "data.name": "npz", "data.path": data, "silos.timeout": 3.0, **more}
    config = with_data_defaults(load_config(TINY, settings))
    path = tmp_path / "coordinator.toml"
    path.write_text(config_to_toml(config))
    paths = [path] * config.silos.silos
    if theirs:
        other = tmp_path / "silo1.toml"
        other.write_text(config_to_toml(with_data_defaults(load_config(TINY, {**settings, **theirs}))))
        paths[1] = other
    return config, paths


def _nodes(paths, indices=None):
    return [{"pate_config": str(p), "silo": i if indices is None else indices[i], "slice": True}
            for i, p in enumerate(paths)]


def _ledger_files(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.jsonl"))}


def test_three_silos_release_every_label_with_one_charge_and_the_coordinator_reads_no_record(tmp_path, monkeypatch):
    config, paths = _configs(tmp_path)
    loaded = []
    monkeypatch.setattr(loading, "on_rows_loaded", lambda x, y: loaded.append(np.array(x)))
    for module in (loading, data_mod):
        for whole_split in ("load_dataset", "train_chunks"):
            monkeypatch.setattr(module, whole_split, lambda *a, **k: pytest.fail("the whole split was read"))
    run = tmp_path / "run"
    lines = []
    result = silos.coordinate(config, run, loopback_grid(silos.client_app, _nodes(paths)), server_context(),
                              echo=lines.append)
    thirds = np.split(np.load(config.data.path)["x_train"], 3)
    read = [[i for i, third in enumerate(thirds) if np.array_equal(x, third)] for x in loaded]
    # each silo its own third alone (to count, and once to know its ledger); the coordinator nothing
    assert all(len(r) == 1 for r in read) and sorted({r[0] for r in read}) == [0, 1, 2]
    labels = read_labels(run / rundir.LABELS_NPZ)
    assert labels["labels"].shape == (200,) and labels["labels"].min() >= 0
    with np.load(run / rundir.LABELS_NPZ, allow_pickle=False) as f:
        meta = json.loads(str(f["meta"]))
    assert meta["silos"]["present"] == 3 and meta["ledger"] == "silos:records"
    entries = coordinator_entries(config)
    assert [e["kind"] for e in entries] == ["labels"] and entries[0]["mechanism"]["silos"] == 3
    assert entries[0]["mechanism"]["eps"] == result.eps == 1.0
    assert result.present == 3 and result.label_accuracy > 0.5
    analyzed = invoke("analyze", "--workdir", run)
    assert analyzed.exit_code == 0, analyzed.output
    assert "3 present; 3 of 3 needed" in analyzed.output  # the report names the trust it assumes
    release = json.loads((run / rundir.RELEASE_JSON).read_text())
    assert release["data_set"]["data_set"] == "silos:records" and release["data_set"]["eps"] == pytest.approx(1.0, rel=1e-4)
    assert [e["kind"] for e in coordinator_entries(config)] == ["labels"]  # the report charged nothing more


def test_silos_on_their_own_files_and_a_coordinator_holding_the_pool_alone(tmp_path):
    """Real hosts: each silo's .npz holds its own records and the shared pool, the coordinator's
    the pool alone (no x_train row); `[silos] records` bounds them all."""
    whole = np.load(write_embeddings(tmp_path / "all.npz"))
    pool = {"x_test": whole["x_test"], "y_test": whole["y_test"]}
    settings = {**FINE, "data.name": "npz", "silos.timeout": 3.0, "silos.records": 500}
    paths = []
    for i, rows in enumerate((slice(0, 100), slice(100, 300), slice(300, 480))):
        np.savez(tmp_path / f"silo{i}.npz", x_train=whole["x_train"][rows], y_train=whole["y_train"][rows], **pool)
        paths.append(tmp_path / f"silo{i}.toml")
        paths[-1].write_text(config_to_toml(with_data_defaults(load_config(
            TINY, {**settings, "data.path": str(tmp_path / f"silo{i}.npz")}))))
    np.savez(tmp_path / "pool.npz", x_train=whole["x_train"][:0], y_train=whole["y_train"][:0], **pool)
    config = with_data_defaults(load_config(TINY, {**settings, "data.path": str(tmp_path / "pool.npz")}))
    nodes = [{"pate_config": str(p), "silo": i} for i, p in enumerate(paths)]
    made = silos.coordinate(config, tmp_path / "run", loopback_grid(silos.client_app, nodes), server_context(),
                            echo=lambda _: None)
    assert made.present == 3 and made.label_accuracy > 0.5 and [e["kind"] for e in coordinator_entries(config)] == ["labels"]
    with pytest.raises(PateError, match=r"set \[silos\] records"):  # a silo's own count bounds no one else's
        silos.contribute({"pate_config": str(_unbounded(tmp_path, paths[0])), "silo": 0}, {})


def _unbounded(tmp_path, path):
    """`path`'s config with `[silos] records` left at 0."""
    out = tmp_path / "unbounded.toml"
    out.write_text(config_to_toml(load_config(path, {"silos.records": 0})))
    return out


def test_a_silo_killed_mid_round_stops_it_and_nothing_is_charged(tmp_path):
    config, paths = _configs(tmp_path)
    grid = loopback_grid(silos.client_app, _nodes(paths), answers={2: 2})  # silo 2 dies after sharing its keys
    began = time.monotonic()
    with pytest.raises(PateError) as err:
        silos.coordinate(config, tmp_path / "run", grid, server_context(), echo=lambda _: None)
    assert "\n" not in str(err.value) and "nothing was released or charged by the coordinator" in str(err.value)
    assert time.monotonic() - began < 30
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists() and coordinator_entries(config) == []
    # silo 2 never sent its input: nothing charged; silos 0 and 1 had sent theirs: kept (conservative)
    assert [len(silo_entries(config, i)) for i in range(3)] == [1, 1, 0]


def test_each_silo_charges_its_own_records_every_round_it_sends_a_share(tmp_path):
    config, paths = _configs(tmp_path)
    noise = noise_of(config.fine_grained, config.privacy.delta)
    share_eps = guaranteed_eps(noise, 1, 3)  # one of the 3 shares needed: whoever sees it alone
    assert share_eps > noise.eps()
    for round_ in (1, 2):  # the coordinator asks again: each silo counts it
        made = silos.coordinate(config, tmp_path / f"run{round_}", loopback_grid(silos.client_app, _nodes(paths)),
                                server_context(), echo=lambda _: None)
        assert made.eps == noise.eps()
        for i in range(3):
            entries = silo_entries(config, i)
            assert len(entries) == round_
            assert entries[-1]["cost"] == {"kind": "pure", "eps0": share_eps, "count": 1.0}
            assert entries[-1]["mechanism"]["silo"] == i and entries[-1]["mechanism"]["release_eps"] == noise.eps()
    assert len(coordinator_entries(config)) == 2  # the coordinator's ledger: what it published, once a release
    # a silo's ledger is the one a central command gives the same records (here: silo 1's third in a file of its own)
    whole = np.load(config.data.path)
    np.savez(tmp_path / "third.npz", x_train=whole["x_train"][160:320], y_train=whole["y_train"][160:320],
             x_test=whole["x_test"], y_test=whole["y_test"])
    own = load_config(paths[1], {"data.path": str(tmp_path / "third.npz")})
    assert Ledger.for_config(own).name == silo_ledger.silo_ledger(config, block(480, 3, 1)).name


def test_one_share_needed_costs_a_silo_the_release_eps():
    noise = noise_of(with_data_defaults(load_config(TINY, FINE)).fine_grained, 1e-5)
    assert silo_ledger.share_cost(noise, 1) == noise.cost()
    assert silo_ledger.share_cost(noise, 4).params["eps0"] == pytest.approx(noise.eps() + 2 * noise.votes * np.log(4))


def test_a_silo_past_its_budget_refuses_before_any_share_is_sent(tmp_path, ledger_dir):
    noise = noise_of(with_data_defaults(load_config(TINY, FINE)).fine_grained, 1e-5)
    budget = 1.5 * guaranteed_eps(noise, 1, 3)  # one round fits, two do not
    config, paths = _configs(tmp_path, theirs={"privacy.total_budget": budget})
    silos.coordinate(config, tmp_path / "run1", loopback_grid(silos.client_app, _nodes(paths)), server_context(),
                     echo=lambda _: None)
    before = _ledger_files(ledger_dir)
    assert len(before) == 4  # the coordinator's and each silo's
    with pytest.raises(PateError) as err:
        silos.coordinate(config, tmp_path / "run2", loopback_grid(silos.client_app, _nodes(paths)), server_context(),
                         echo=lambda _: None)
    line = str(err.value)
    assert "\n" not in line and "silo 1: its share of this release across silos would take" in line, line
    assert f"= {budget:g}; nothing was written" in line
    assert not (tmp_path / "run2" / rundir.LABELS_NPZ).exists()
    assert _ledger_files(ledger_dir) == before  # no silo charged, the coordinator neither


def test_fewer_silos_than_needed_are_refused_and_enough_are_released(tmp_path):
    config, paths = _configs(tmp_path, **{"silos.needed": 2})
    made = silos.coordinate(config, tmp_path / "run", loopback_grid(silos.client_app, _nodes(paths), answers={2: 2}),
                            server_context(), echo=lambda _: None)
    assert made.present == 2 and [e["kind"] for e in coordinator_entries(config)] == ["labels"]  # 2 of 3 shares: the central law


def test_a_silo_on_other_settings_refuses_and_nothing_is_charged(tmp_path):
    config, paths = _configs(tmp_path, theirs={"fine_grained.eps": 4.0})
    with pytest.raises(PateError) as err:
        silos.coordinate(config, tmp_path / "run", loopback_grid(silos.client_app, _nodes(paths)), server_context(),
                         echo=lambda _: None)
    assert "silo 1: the coordinator's plan is not this silo's" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists() and coordinator_entries(config) == []
    assert [silo_entries(config, i) for i in range(3)] == [[], [], []]  # refused at setup: no input was sent


def test_one_silo_index_twice_is_refused_before_the_release(tmp_path):
    config, paths = _configs(tmp_path)
    with pytest.raises(PateError, match="silo 1 answered twice"):
        silos.coordinate(config, tmp_path / "run", loopback_grid(silos.client_app, _nodes(paths, [0, 1, 1])),
                         server_context(), echo=lambda _: None)
    assert coordinator_entries(config) == []


def test_missing_silos_are_waited_for_then_refused(tmp_path):
    config, paths = _configs(tmp_path, **{"silos.timeout": 0.5})
    with pytest.raises(PateError, match="only 2 of the 3 silos joined"):
        silos.coordinate(config, tmp_path / "run", loopback_grid(silos.client_app, _nodes(paths[:2])),
                         server_context(), echo=lambda _: None)
    assert coordinator_entries(config) == []


def test_the_command_refuses_bad_settings_before_starting_anything(tmp_path, monkeypatch):
    from pate.programs import flower_deploy

    monkeypatch.setattr(flower_deploy, "LocalDeployment", lambda *a, **k: pytest.fail("a process was started"))
    gaussian = invoke("silos", "run", "--config", TINY, "--workdir", tmp_path / "run", "--silos", 3,
                      *[a for k, v in FINE.items() for a in ("--set", f"{k}={json.dumps(v)}")],
                      "--set", 'fine_grained.noise="gaussian"')
    assert 'fine_grained.noise = "laplace"' in one_line_error(gaussian, 1)
    assert "--silos" in one_line_error(invoke("silos", "run", "--config", TINY, "--workdir", tmp_path / "r",
                                              "--silos", 1), 2)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- real processes


def _sets(values: dict) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={json.dumps(v)}")]


@pytest.mark.slow
def test_a_superlink_and_three_supernodes_release_with_one_charge(tmp_path, ledger_dir):
    data = write_embeddings(tmp_path / "records.npz")
    settings = {**FINE, "data.name": "npz", "data.path": data, "silos.timeout": 30.0}
    began = time.monotonic()
    result = invoke("silos", "run", "--config", TINY, "--workdir", tmp_path / "run", "--silos", 3, *_sets(settings))
    took = time.monotonic() - began
    assert result.exit_code == 0, result.output
    assert "from 3 silos' secure sum" in result.output
    config = with_data_defaults(load_config(TINY, settings))
    assert [e["kind"] for e in coordinator_entries(config)] == ["labels"]
    assert [len(silo_entries(config, i)) for i in range(3)] == [1, 1, 1]  # each SuperNode charged its third
    assert len(_ledger_files(ledger_dir)) == 4
    assert read_labels(tmp_path / "run" / rundir.LABELS_NPZ)["labels"].shape == (200,)
    print(f"pate silos run --silos 3 (SuperLink + 3 SuperNodes): {took:.1f} s")


@pytest.mark.slow
def test_a_killed_supernode_stops_the_round_with_nothing_charged(tmp_path, monkeypatch):
    _, paths = _configs(tmp_path, **{"silos.timeout": 20.0})
    error, config, took = run_with_a_silo_killed(tmp_path, monkeypatch, paths[0], silos.run)
    assert "\n" not in str(error) and "nothing was released or charged by the coordinator" in str(error)
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists() and coordinator_entries(config) == []
    assert silo_entries(config, 2) == []  # killed before its input was asked: nothing charged
    print(f"a killed SuperNode stopped the round in {took:.1f} s")
