"""The data decides the defaults (issue 53): the keys a config file did not write are resolved
from the data's public facts (`pate.config.data_defaults`); every key it wrote wins."""

from __future__ import annotations

import pytest

from pate.config import Config, config_file_text, config_hash, load_config
from pate.config.data_defaults import MIN_TEACHER_STEPS, DataFacts, describe, resolve

ROWS_16 = DataFacts((16,), pool_size=150, train_size=1000, num_classes=10)
IMAGES = DataFacts((28, 28, 1), pool_size=9000, train_size=60000, num_classes=10)


def _only_data(tmp_path, extra: str = "") -> Config:
    path = tmp_path / "c.toml"
    path.write_text(f'[data]\nname = "npz"\npath = "e.npz"\npublic_size = 150\n{extra}')
    return load_config(path)


def test_a_config_knows_which_keys_its_file_left_out(tmp_path):
    config = _only_data(tmp_path, "[teachers]\nmodel = \"mlp\"\n")
    assert "teachers.model" not in config.defaulted and "data.public_size" not in config.defaulted
    assert {"student.model", "features.map", "fine_grained.pca"} <= config.defaulted
    overridden = load_config(tmp_path / "c.toml", {"features.map": "none"})
    assert "features.map" not in overridden.defaulted
    # not a section: never written, hashed or compared
    assert "defaulted" not in config_file_text(config) and config == Config(data=config.data, teachers=config.teachers)
    assert load_config("tiny").defaulted and Config().defaulted == frozenset()


def test_rows_get_row_models_no_image_map_and_a_pca_within_their_width(tmp_path):
    resolved, chosen = resolve(_only_data(tmp_path), ROWS_16)
    assert (resolved.teachers.model, resolved.student.model, resolved.student.hidden) == ("linear", "mlp", (256,))
    assert (resolved.dpsgd.model, resolved.features.map) == ("linear", "none")
    assert resolved.student.augment_shift == 0 and resolved.student.cutout == 0
    assert resolved.fine_grained.pca == 16
    # smoothing and k follow the pool: a 150-point pool gets 15, not 40 (a quarter of it)
    assert resolved.fine_grained.smoothing == 15 and resolved.fine_grained.votes_per_record == 1
    line = describe(ROWS_16, chosen)
    assert line.startswith("defaults for rows of 16 features, a pool of 150, 1000 training records: ")
    assert 'teachers.model = "linear"' in line and "fine_grained.pca = 16" in line and "\n" not in line
    assert resolve(resolved, ROWS_16) == (resolved, {})  # resolved once: nothing left to decide


def test_every_key_the_file_wrote_wins(tmp_path):
    config = _only_data(tmp_path, "[teachers]\nmodel = \"mlp\"\nhidden = [8]\nepochs = 3\n"
                                  "[fine_grained]\npca = 128\nsmoothing = 40\n[features]\nmap = \"scattering\"\n")
    resolved, chosen = resolve(config, ROWS_16)
    assert (resolved.teachers.model, resolved.teachers.hidden, resolved.teachers.epochs) == ("mlp", (8,), 3)
    assert (resolved.fine_grained.pca, resolved.fine_grained.smoothing, resolved.features.map) == (128, 40, "scattering")
    assert not {"teachers.model", "teachers.epochs", "fine_grained.pca", "features.map"} & set(chosen)
    # a config built in Python chose every value itself
    assert resolve(Config(), ROWS_16) == (Config(), {})


def test_images_keep_the_image_defaults(tmp_path):
    config = _image_config(tmp_path)
    resolved, chosen = resolve(config, IMAGES)
    assert resolved.teachers.model == "cnn" and resolved.features.map == "scattering"
    assert resolved.fine_grained.smoothing == 40 and resolved.fine_grained.pca == 128  # the 9000-point pool's
    assert chosen == {} and config_hash(resolved) == config_hash(config)


def _image_config(tmp_path) -> Config:
    path = tmp_path / "i.toml"
    path.write_text('[data]\nname = "fashion_mnist"\n')
    return load_config(path)


@pytest.mark.parametrize("train, teachers", [(1000, 50), (400, 20), (60000, 250)])
def test_each_teacher_takes_at_least_the_minimum_of_steps(tmp_path, train, teachers):
    """Epochs count passes over a shard: 20-record shards at the default 60 epochs took 60 steps
    (batch 20) where the default job's 240-record shards take 600."""
    config = load_config(_image_path(tmp_path), {"teachers.num_teachers": teachers})
    resolved, _ = resolve(config, DataFacts((8, 8, 1), 100, train, 4))
    t = resolved.teachers
    shard = train // teachers
    assert t.batch_size == min(24, shard) and t.epochs >= 60
    assert t.epochs * (shard // t.batch_size) >= MIN_TEACHER_STEPS
    assert t.epochs // t.checkpoint_every <= 12  # about as many checkpoints as the default job
    if (train, teachers) == (60000, 250):
        assert (t.epochs, t.batch_size, t.checkpoint_every) == (60, 24, 5)  # the default job is unchanged


def _image_path(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[data]\nname = "synthetic"\npublic_size = 100\n')
    return path


@pytest.mark.parametrize("train, classes, teachers", [(1000, 10, 10), (300, 2, 15), (60000, 10, 250),
                                                      (50, 10, 2), (24000, 10, 240)])
def test_the_number_of_teachers_follows_the_training_split(tmp_path, train, classes, teachers):
    """Left out, `teachers.num_teachers` gives each shard about 10 records of each class, between 2
    and the default 250 (the default job's 60000 records keep 250); the shard then sizes the batch
    and the epochs as before; a written number wins."""
    facts = DataFacts((16,), pool_size=150, train_size=train, num_classes=classes)
    resolved, chosen = resolve(_only_data(tmp_path), facts)
    assert resolved.teachers.num_teachers == teachers
    assert ("teachers.num_teachers" in chosen) == (teachers != 250)
    shard = train // teachers
    assert resolved.teachers.batch_size == min(24, shard)
    if teachers != 250:
        assert f"teachers.num_teachers = {teachers}" in describe(facts, chosen)
    written, _ = resolve(_only_data(tmp_path, "[teachers]\nnum_teachers = 7\n"), facts)
    assert written.teachers.num_teachers == 7


def test_a_config_that_names_only_data_says_how_many_teachers_the_data_chose(tmp_path):
    """`pate plan --config` of a config naming only `[data]` (rows of 16 features, 480 training
    records, 4 classes) prints the teachers the data chose: 480 // 40 = 12."""
    from conftest import invoke, write_embeddings

    path = write_embeddings(tmp_path / "e.npz", train=480, test=300)
    config = tmp_path / "c.toml"
    config.write_text(f'[data]\nname = "npz"\npath = "{path}"\npublic_size = 150\n')
    result = invoke("plan", "--config", config, "--set", 'aggregation.mechanism="fine-grained"')
    assert result.exit_code == 0, result.output
    assert "teachers.num_teachers = 12" in result.output
