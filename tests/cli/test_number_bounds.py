"""Bounds on every number a user types (issue 44): a huge eps, a learning rate of 1e300, eps = 1e-6,
a deeply nested TOML array and a bad `pate.load_config` argument each get one line naming the file
and key (or the option), exit 2 for a bad option and 1 otherwise, and `pate plan --config` refuses
what the command would refuse. Nothing here trains: every refusal comes before any data is read."""

from __future__ import annotations

import warnings

import pytest

import pate
from analysis.core.errors import PateError

from conftest import TINY, invoke, one_line_error


@pytest.mark.parametrize("command", ["synth", "fedavg", "dpsgd"])
def test_a_huge_eps_option_is_a_usage_error_naming_the_option(tmp_path, command):
    result = invoke(command, "--config", TINY, "--workdir", tmp_path / "run", "--eps", "1e300", "--no-progress")
    line = one_line_error(result, 2)
    assert "--eps" in line and "at most 1000" in line, line
    assert not (tmp_path / "run").exists()


def _config_with(tmp_path, section: str, text: str):
    """The tiny config as a file with one key of ``section`` set by ``text`` ("key = value")."""
    import tomllib

    import tomli_w

    raw = tomllib.loads(TINY.read_text())
    raw.setdefault(section, {}).update(tomllib.loads(text))
    if section == "fine_grained":
        raw["aggregation"]["mechanism"] = "fine-grained"
    path = tmp_path / "bad.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


@pytest.mark.parametrize("section, text, key, needle", [
    ("synth", "eps = 1e300", "synth.eps", "at most 1000"),
    ("fedavg", "eps = 1e300", "fedavg.eps", "at most 1000"),
    ("dpsgd", "eps = 1e300", "dpsgd.eps", "at most 1000"),
    ("fine_grained", "eps = 1e300", "fine_grained.eps", "at most 1000"),
    ("fine_grained", "eps = 1e-6", "fine_grained.eps", "more than 1e-06"),
    ("fedavg", "learning_rate = 1e300", "fedavg.learning_rate", "at most 1e+06"),
    ("fedavg", "rho = 1e300", "fedavg.rho", "at most 1e+06"),
    ("synth", "merf_learning_rate = 1e300", "synth.merf_learning_rate", "at most 1e+06"),
    ("synth", "learning_rate = 1e300", "synth.learning_rate", "at most 1e+06"),
    ("dpsgd", "cnn_learning_rate = 1e300", "dpsgd.cnn_learning_rate", "at most 1e+06"),
])
def test_a_config_number_out_of_bounds_is_refused_naming_file_and_key_by_the_command_and_plan(
        tmp_path, section, text, key, needle):
    config = _config_with(tmp_path, section, text)
    command = {"fine_grained": "run"}.get(section, section)
    for args in ([command, "--config", config, "--workdir", tmp_path / "run"], ["plan", "--config", config]):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            result = invoke(*args)
        line = one_line_error(result, 1)
        assert str(config) in line and key in line and needle in line, line
        assert "internal error" not in line and "RuntimeWarning" not in result.output
    assert not (tmp_path / "run").exists()


def test_the_fine_grained_eps_floor_names_what_it_is():
    line = one_line_error(invoke("plan", "--config", TINY, "--set", 'aggregation.mechanism="fine-grained"',
                                 "--set", "fine_grained.eps=1e-6"), 1)
    assert "fine_grained.eps" in line and "at least 1e-6 as a float" not in line, line


def test_a_deeply_nested_toml_array_is_one_line_naming_the_file(tmp_path):
    config = tmp_path / "deep.toml"
    config.write_text("[data]\nname = " + "[" * 5000 + "]" * 5000 + "\n")
    for args in (["plan", "--config", config], ["run", "--config", config, "--workdir", tmp_path / "run"]):
        line = one_line_error(invoke(*args), 1)
        assert str(config) in line and "internal error" not in line and "nested" in line, line
    # in a --set option: a bad option (exit 2)
    line = one_line_error(invoke("plan", "--config", TINY, "--set", "data.name=" + "[" * 5000 + "]" * 5000), 2)
    assert "internal error" not in line and "nested" in line, line


def test_load_config_refuses_what_is_not_a_mapping_of_overrides_in_one_line():
    with pytest.raises(PateError, match="overrides must be a mapping"):
        pate.load_config("tiny", "x")
    with pytest.raises(PateError, match="config path"):
        pate.load_config(5)
    assert pate.load_config("tiny", {"teachers.epochs": 2}).teachers.epochs == 2


@pytest.mark.parametrize("mechanism", ["permute-and-flip", "exponential"])
def test_an_exact_pure_argmax_bounds_gamma_in_one_short_line(mechanism):
    """Permute-and-flip and the exponential mechanism took any gamma: 1e300 printed a 300-digit
    integer once the teachers had voted, and `audit` exited 0 (issue 52). Their records refuse a
    gamma past `MAX_EXACT_GAMMA` where they are made, so every command stops before any work."""
    from analysis.mechanisms.record import MAX_EXACT_GAMMA

    line = one_line_error(invoke("audit", "--config", TINY, "--mechanism", mechanism, "--gamma", "1e300",
                                 "--trials", 100), 1)
    assert f"at most {MAX_EXACT_GAMMA:g}" in line and len(line) < 250
    assert invoke("audit", "--config", TINY, "--mechanism", mechanism, "--gamma", MAX_EXACT_GAMMA,
                  "--trials", 100).exit_code == 0


@pytest.mark.parametrize("mechanism", ["permute-and-flip", "exponential"])
def test_every_entry_point_refuses_an_unbounded_gamma_before_any_work_in_one_short_line(tmp_path, mechanism):
    """Each command that takes a pure argmax's gamma stops where the record is made, before any
    vote, data or write: `label` (teachers' and --votes), `run`, `plan`, `analyze --votes` and
    `audit`. `run` and `plan` wrapped the record's line in a second (a 330-character line)."""
    import numpy as np

    votes = tmp_path / "votes.npz"
    np.savez(votes, votes=np.array([[5, 1, 0], [3, 3, 0]] * 10))
    gamma = ("--gamma", "1e300")
    sets = ("--set", f'aggregation.mechanism="{mechanism}"', "--set", "aggregation.gamma=1e300")
    for args, code in ((("label", "--workdir", tmp_path / "a", "--config", TINY, "--mechanism", mechanism, *gamma), 1),
                       (("label", "--votes", votes, "--num-classes", 3, "--workdir", tmp_path / "b", "--ledger", "x",
                         "--mechanism", mechanism, *gamma), 1),
                       (("run", "--config", TINY, "--workdir", tmp_path / "c", "--no-progress", *sets), 1),
                       (("plan", "--config", TINY, *sets), 1),
                       (("analyze", "--votes", votes, "--mechanism", mechanism, *gamma), 2)):
        line = one_line_error(invoke(*args), code)
        assert f"{mechanism}: gamma = 1e+300 is past 1000" in line and len(line) < 250, (args[0], line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["votes.npz"]
