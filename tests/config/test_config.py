"""Config loading: sections, types, validation messages, overrides, TOML round trip, hash."""

from __future__ import annotations

import dataclasses

import pytest

from analysis.core.errors import PateError
from pate.config import (Config, DataConfig, TeachersConfig, config_diff, config_from_dict,
                         config_hash, config_to_toml, load_config, parse_override, sections)

from conftest import CONFIGS, TINY


def write(tmp_path, text, name="run.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert isinstance(config, Config)


def test_shipped_config_names():
    names = {p.name for p in CONFIGS.glob("*.toml")}
    assert {"fashion_mnist.toml", "mnist.toml", "svhn.toml", "quickstart.toml",
            "tiny.toml"} <= names


def test_missing_sections_and_keys_take_defaults(tmp_path):
    config = load_config(write(tmp_path, "[teachers]\nepochs = 3\n"))
    assert config.teachers.epochs == 3
    assert config.teachers.num_teachers == TeachersConfig().num_teachers
    assert config.data == DataConfig()


def test_sections_registry_follows_config_fields():
    from pate.config import AggregationConfig, DpsgdConfig, FeaturesConfig, FineGrainedConfig, PrivacyConfig
    from pate.config import StudentConfig
    from pate.config.baseline_sections import FedavgConfig
    from pate.config.round_sections import RoundsConfig
    from pate.config.baseline_sections import SynthConfig
    from pate.config.silo_sections import SilosConfig

    assert sections() == {"data": DataConfig, "teachers": TeachersConfig, "aggregation": AggregationConfig,
                          "fine_grained": FineGrainedConfig, "features": FeaturesConfig,
                          "privacy": PrivacyConfig, "student": StudentConfig, "rounds": RoundsConfig,
                          "dpsgd": DpsgdConfig, "fedavg": FedavgConfig, "synth": SynthConfig,
                          "silos": SilosConfig}


def test_types_are_coerced(tmp_path):
    config = load_config(write(tmp_path, "[teachers]\nlearning_rate = 1\nconv_features = [3, 5]\n"))
    assert config.teachers.learning_rate == 1.0 and isinstance(config.teachers.learning_rate, float)
    assert config.teachers.conv_features == (3, 5)


def test_unknown_key_names_key_and_file(tmp_path):
    path = write(tmp_path, "[teachers]\nepochz = 3\n")
    with pytest.raises(PateError) as err:
        load_config(path)
    assert "teachers.epochz" in str(err.value) and str(path) in str(err.value)
    assert "epochs" in str(err.value)  # lists the known keys


def test_unknown_section(tmp_path):
    with pytest.raises(PateError, match=r"unknown section \[student_typo\]"):
        load_config(write(tmp_path, "[student_typo]\nx = 1\n"))


@pytest.mark.parametrize("line, key, expected", [
    ('epochs = "5"', "teachers.epochs", "an integer"),
    ("epochs = 5.0", "teachers.epochs", "an integer"),
    ("epochs = true", "teachers.epochs", "an integer"),
    ('learning_rate = "fast"', "teachers.learning_rate", "a number"),
    ("augment_flip = 1", "teachers.augment_flip", "true or false"),
    ('conv_features = ["a"]', "teachers.conv_features", "a list of integers"),
    ("conv_features = 16", "teachers.conv_features", "a list of integers"),
    ('model = "resnet"', "teachers.model", "one of 'cnn', 'mlp'"),
])
def test_wrong_type_names_key(tmp_path, line, key, expected):
    path = write(tmp_path, f"[teachers]\n{line}\n")
    with pytest.raises(PateError) as err:
        load_config(path)
    message = str(err.value)
    assert key in message and expected in message and str(path) in message


@pytest.mark.parametrize("text, key", [
    ("[teachers]\nepochs = 0\n", "teachers.epochs"),
    ("[teachers]\nnum_teachers = -1\n", "teachers.num_teachers"),
    ("[teachers]\nlabel_smoothing = 1.5\n", "teachers.label_smoothing"),
    ("[data]\nsynthetic_shape = [8, 8]\n", "data.synthetic_shape"),
    ('[data]\nname = "npz"\n', "data.path"),
])
def test_invalid_values_name_key(tmp_path, text, key):
    with pytest.raises(PateError, match=key.replace(".", r"\.")):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("section", ["teachers", "student"])
@pytest.mark.parametrize("line, key", [
    ("conv_kernels = [0]", "conv_kernels"), ("conv_strides = [0]", "conv_strides"),
    ("conv_kernels = [3, 3]", "conv_kernels"), ("conv_features = [0]", "conv_features"),
    ("hidden = [0]", "hidden"), ("dropout = 1.0", "dropout"), ("gabor_orientations = -1", "gabor_orientations"),
    ("momentum = 1.0", "momentum"), ("augment_shift = -1", "augment_shift"),
])
def test_model_keys_checked_alike_in_both_sections(tmp_path, section, line, key):
    """[teachers] and [student] share their model keys, and one rule checks both: e.g.
    student.conv_kernels = [0] is refused in one line naming the key, as for the teachers."""
    keys = {"conv_features": "[4]", "conv_kernels": "[3]", "conv_strides": "[2]"}  # one valid layer
    keys[line.split(" = ")[0]] = line.split(" = ")[1]
    text = "".join(f"{k} = {v}\n" for k, v in keys.items())
    path = write(tmp_path, f"[{section}]\n{text}")
    with pytest.raises(PateError) as err:
        load_config(path)
    message = str(err.value)
    assert f"{section}.{key}" in message and str(path) in message and "\n" not in message


def test_student_zero_kernel_is_refused(tmp_path):
    path = write(tmp_path, "[student]\nconv_kernels = [0]\n")
    with pytest.raises(PateError, match=r"student\.conv_kernels must be positive, got \[0\]"):
        load_config(path)


def test_section_must_be_a_table(tmp_path):
    with pytest.raises(PateError, match=r"\[teachers\] must be a table"):
        load_config(write(tmp_path, "teachers = 3\n"))


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(PateError, match="not found"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(PateError, match="not valid TOML"):
        load_config(write(tmp_path, "[teachers\nepochs = 1\n"))


def test_overrides_apply_and_validate():
    config = load_config(TINY, {"teachers.num_teachers": 3, "data.public_size": 10})
    assert config.teachers.num_teachers == 3 and config.data.public_size == 10
    with pytest.raises(PateError, match="teachers.epochs must be an integer"):
        load_config(TINY, {"teachers.epochs": "many"})
    with pytest.raises(PateError, match="teachers.bogus"):
        load_config(TINY, {"teachers.bogus": 1})


def test_parse_override():
    assert parse_override("teachers.epochs=5") == ("teachers.epochs", 5)
    assert parse_override("teachers.conv_features=[4, 8]") == ("teachers.conv_features", [4, 8])
    assert parse_override("data.name=mnist") == ("data.name", "mnist")
    assert parse_override('data.name="svhn"') == ("data.name", "svhn")
    with pytest.raises(PateError, match="section.key=value"):
        parse_override("epochs5")


def test_toml_round_trip_and_hash(tiny_config, tmp_path):
    text = config_to_toml(tiny_config)
    again = load_config(write(tmp_path, text))
    assert again == tiny_config
    assert config_hash(again) == config_hash(tiny_config)
    assert len(config_hash(tiny_config)) == 16


def test_hash_ignores_file_order_and_defaults(tmp_path):
    a = load_config(write(tmp_path, "[teachers]\nepochs = 3\nseed = 1\n", "a.toml"))
    b = load_config(write(tmp_path, "[teachers]\nseed = 1\nepochs = 3\n[data]\n"
                                    'name = "fashion_mnist"\n', "b.toml"))
    assert config_hash(a) == config_hash(b)


def test_hash_and_diff_see_every_key(tiny_config):
    changed = dataclasses.replace(tiny_config, teachers=dataclasses.replace(
        tiny_config.teachers, seed=tiny_config.teachers.seed + 1))
    assert config_hash(changed) != config_hash(tiny_config)
    assert config_diff(tiny_config, changed) == ["teachers.seed"]


def test_config_from_dict_source_in_message():
    with pytest.raises(PateError, match="^somewhere: unknown key data.colour"):
        config_from_dict({"data": {"colour": "red"}}, source="somewhere")


def test_config_is_frozen(tiny_config):
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny_config.teachers.epochs = 1  # type: ignore[misc]


def test_beta_defaults_are_written_once():
    """One beta per mechanism: the config's defaults are the analysis constants."""
    from analysis.sanitised import gnss
    from analysis.sanitised import lnmax_release
    from pate.config import PrivacyConfig

    assert PrivacyConfig().lnmax_beta == lnmax_release.DEFAULT_BETA
    assert PrivacyConfig().gnss_beta == 0 and gnss.BETA_TIMES_ORDER == 0.1
