"""`pate silos fedavg` (`pate.baselines.fedavg_silos`): DP-FedSGD across silos on Flower. The fast tests
run the coordinator's ServerApp body and the silos' ClientApp through the in-process Flower
deployment (`pate.programs.flower_loopback`: Flower's own SecAgg+ workflow and mod); the slow one
starts a SuperLink and three SuperNodes on 127.0.0.1."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("flwr")

from analysis.core.errors import PateError
from analysis.mechanisms import composition
from analysis.mechanisms import skellam as sk
from pate.baselines import fedavg
from pate.config import config_to_toml, load_config
from pate.programs.data_facts import with_data_defaults
from pate.programs.flower_loopback import loopback_grid, server_context
from pate.baselines import fedavg_silos as fs
from pate.store import rundir

from conftest import TINY, coordinator_entries, invoke, one_line_error, run_with_a_silo_killed, silo_entries

#: The tiny synthetic config (480 records, 8x8 pixels, 4 classes) as DP-FedSGD of 2 rounds over 3 silos.
FED = {"fedavg.mechanism": "skellam", "fedavg.rounds": 2, "fedavg.grid": 20, "fedavg.clients": 3,
       "silos.silos": 3, "silos.timeout": 3.0}


def _configs(tmp_path, theirs: dict | None = None, **more):
    """The coordinator's config and its file; the silos' files (silo 1's with `theirs` changed)."""
    config = with_data_defaults(load_config(TINY, {**FED, **more}))
    path = tmp_path / "coordinator.toml"
    path.write_text(config_to_toml(config))
    paths = [path] * 3
    if theirs:
        paths[1] = tmp_path / "silo1.toml"
        paths[1].write_text(config_to_toml(with_data_defaults(load_config(TINY, {**FED, **more, **theirs}))))
    return config, paths


def _grid(paths, answers=None):
    nodes = [{"pate_config": str(p), "silo": i, "slice": True} for i, p in enumerate(paths)]
    return loopback_grid(fs.client_app, nodes, answers=answers)


def _zero_shares(monkeypatch):
    zero = lambda source, mu, clients, shape: np.zeros(shape, np.int64)  # noqa: E731
    monkeypatch.setattr(sk, "skellam_share", zero)  # the record's share: at every silo and in process


def test_three_silos_train_the_in_process_model_and_charge_once(tmp_path, monkeypatch):
    _zero_shares(monkeypatch)  # both ways: the model is then a function of the data alone
    models = []
    to_flax = fedavg.to_flax
    monkeypatch.setattr(fedavg, "to_flax", lambda theta: models.append(np.array(theta)) or to_flax(theta))
    config, paths = _configs(tmp_path)
    run = tmp_path / "run"
    lines = []
    result = fs.coordinate(config, run, _grid(paths), server_context(), echo=lines.append)
    with monkeypatch.context() as central:
        central.setenv("PATE_LEDGER_DIR", str(tmp_path / "central-ledgers"))  # not the silos' ledgers
        fedavg.train_fedavg(config, tmp_path / "central", seed=3, show_progress=False, echo=lambda _: None)
    assert len(models) == 2 and np.abs(models[0]).sum() > 0
    assert np.array_equal(models[0], models[1])  # the silos' SecAgg+ rounds are `pate fedavg`'s rounds
    record = json.loads((run / rundir.FEDAVG_JSON).read_text())
    assert record["silos"]["silos"] == 3 and record["mechanism"] == "skellam" and record["rounds"] == 2
    assert record["eps"] == pytest.approx(result.eps) and result.eps <= config.fedavg.eps
    entries = coordinator_entries(config)  # the coordinator: ONE charge, the central composition
    assert [e["kind"] for e in entries] == ["fedavg"] and entries[0]["cost"]["kind"] == "skellam"
    assert entries[0]["cost"]["count"] == 2
    for i in range(3):  # each silo: one charge a round, at its own share's noise
        charged = silo_entries(config, i)
        assert [e["mechanism"]["round"] for e in charged] == [1, 2]
        assert charged[0]["cost"]["mu"] == pytest.approx(record["grid"]["mu"] / 3)
    assert any("across 3 silos: 3 shares in each of 2 rounds" in line for line in lines)


def test_a_silo_killed_mid_run_stops_it_and_the_coordinator_writes_and_charges_nothing(tmp_path):
    config, paths = _configs(tmp_path)
    with pytest.raises(PateError) as err:  # silo 2 answers round 1's four messages and round 2's setup, then dies
        fs.coordinate(config, tmp_path / "run", _grid(paths, answers={2: 5}), server_context(), echo=lambda _: None)
    assert "\n" not in str(err.value) and str(err.value).startswith("round 2 of 2:")
    assert "nothing was released or charged by the coordinator" in str(err.value)
    assert not (tmp_path / "run" / rundir.FEDAVG_JSON).exists() and coordinator_entries(config) == []
    assert [len(silo_entries(config, i)) for i in range(3)] == [1, 1, 1]  # round 1 was sent: kept


def test_a_silo_on_another_plan_refuses_before_any_input_and_nothing_is_charged(tmp_path):
    config, paths = _configs(tmp_path, theirs={"fedavg.eps": 2.0})
    with pytest.raises(PateError, match="silo 1: the coordinator's plan is not this silo's") as err:
        fs.coordinate(config, tmp_path / "run", _grid(paths), server_context(), echo=lambda _: None)
    assert "\n" not in str(err.value) and coordinator_entries(config) == []
    assert [len(silo_entries(config, i)) for i in range(3)] == [0, 0, 0]


def test_a_silo_whose_budget_cannot_pay_every_round_refuses_before_its_first_input(tmp_path):
    config, paths = _configs(tmp_path)
    plan = fs.public_plan(config)[2]
    every = composition.single_eps(plan.record.alone_cost(2), config.privacy.delta)
    one = composition.single_eps(plan.record.alone_cost(1), config.privacy.delta)
    assert one < every
    _, paths = _configs(tmp_path, theirs={"privacy.total_budget": (one + every) / 2})
    with pytest.raises(PateError, match="silo 1: its messages of the 2 rounds left") as err:
        fs.coordinate(config, tmp_path / "run", _grid(paths), server_context(), echo=lambda _: None)
    assert "\n" not in str(err.value) and coordinator_entries(config) == []
    assert [len(silo_entries(config, i)) for i in range(3)] == [0, 0, 0]


def test_a_silos_charge_is_the_theorem_at_its_own_share_and_composes_over_rounds():
    record = sk.SkellamSum.of(1.0, 15, 8, 3, 90, 3.0, 4, 1e-5)
    q, delta = record.quantiser, 1e-5
    alone = composition.single_eps(record.alone_cost(4), delta)
    assert alone == pytest.approx(sk.coalition_eps(record.mu, q.l1, q.l2sq, 4, delta, 3, 2), rel=1e-9)
    assert alone > composition.single_eps(record.cost(), delta)  # one share is less noise than the sum
    per_round = record.alone_cost(1).to_json()
    assert per_round["count"] == 1 and per_round["mu"] == pytest.approx(record.mu / 3)


def test_the_command_refuses_per_message_noise_before_starting_anything(tmp_path, monkeypatch):
    from pate.programs import flower_deploy

    monkeypatch.setattr(flower_deploy, "LocalDeployment", lambda *a, **k: pytest.fail("a process was started"))
    result = invoke("silos", "fedavg", "--config", TINY, "--workdir", tmp_path / "run", "--silos", 3,
                    "--set", 'fedavg.mechanism="laplace"')
    assert "distributed mechanism" in one_line_error(result, 1)


# --------------------------------------------------------------------------- real processes


@pytest.mark.slow
def test_a_superlink_and_three_supernodes_train_with_one_charge(tmp_path):
    sets = [a for k, v in {**FED, "silos.timeout": 30.0}.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    began = time.monotonic()
    result = invoke("silos", "fedavg", "--config", TINY, "--workdir", tmp_path / "run", "--silos", 3, *sets)
    took = time.monotonic() - began
    assert result.exit_code == 0, result.output
    assert "across 3 silos: 3 shares in each of 2 rounds" in result.output
    config = with_data_defaults(load_config(TINY, {**FED, "silos.timeout": 30.0}))
    assert [e["kind"] for e in coordinator_entries(config)] == ["fedavg"]
    assert [len(silo_entries(config, i)) for i in range(3)] == [2, 2, 2]  # each SuperNode: a charge a round
    record = json.loads((tmp_path / "run" / rundir.FEDAVG_JSON).read_text())
    assert record["silos"]["present"] == 3 and record["accuracy"] > 0.3
    print(f"pate silos fedavg --silos 3, 2 rounds (SuperLink + 3 SuperNodes): {took:.1f} s")


@pytest.mark.slow
def test_a_killed_supernode_stops_the_run_with_nothing_written_or_charged(tmp_path, monkeypatch):
    _, paths = _configs(tmp_path, **{"silos.timeout": 20.0})
    error, config, took = run_with_a_silo_killed(tmp_path, monkeypatch, paths[0], fs.run)
    assert "\n" not in str(error) and "nothing was released or charged by the coordinator" in str(error)
    assert not (tmp_path / "run" / rundir.FEDAVG_JSON).exists() and coordinator_entries(config) == []
    assert silo_entries(config, 2) == []  # killed before its input was asked: nothing charged
    print(f"a killed SuperNode stopped the run in {took:.1f} s")
