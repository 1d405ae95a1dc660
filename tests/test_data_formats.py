"""The data room's registry (`pate.data.formats`): every data set `[data] name` may name is one
format record, looked up by name, whose facts agree with what its loaders read (one contract run
for every record); and no module outside `pate/data/` tests a format's name (read with `ast`)."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
import typing

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import ROOT
from pate import data
from pate.config import DataConfig, config_from_dict
from test_data import write_idx_dir

# --------------------------------------------------------------------------- no name tested outside


def _scanned_files() -> list:
    """pate/ outside its data room, analysis/ and the root cli.py: where a format's name must not be tested."""
    room = ROOT / "pate" / "data"
    files = [p for p in sorted((ROOT / "pate").rglob("*.py")) if room not in p.parents]
    return files + sorted((ROOT / "analysis").rglob("*.py")) + [ROOT / "cli.py"]


def _names_in(node: ast.AST, names) -> list[str]:
    """The format names among ``node``'s string constants, or among a literal tuple, list or set's."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]


def name_tests(source: str, names=data.NAMES) -> list[tuple[int, str]]:
    """``(line, what)`` for each place ``source`` branches on a format's name: a comparison or an
    ``in`` test with one (``name == "npz"``, ``name in ("mnist", "svhn")``), a ``match`` case on
    one, a dict keyed by one (a table of formats' facts), or a literal list of several (a table
    of names)."""
    found, operands = [], set()
    for node in ast.walk(ast.parse(source)):  # breadth first: a comparison before its operands
        if isinstance(node, ast.Compare):
            operands |= {id(operand) for operand in (node.left, *node.comparators)}
            hits = [n for operand in (node.left, *node.comparators) for n in _names_in(operand, names)]
            found += [(node.lineno, f"compares with {n!r}") for n in hits]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, f"matches {n!r}") for n in _names_in(node.value, names)]
        elif isinstance(node, ast.Dict):
            found += [(node.lineno, f"a table keyed by {n!r}") for k in node.keys if k is not None
                      for n in _names_in(k, names)]
        elif (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in operands
              and len(_names_in(node, names)) >= 2):
            found.append((node.lineno, f"lists {', '.join(map(repr, _names_in(node, names)))}"))
    return sorted(set(found))


def test_no_format_name_is_tested_outside_the_data_room():
    """What depends on which data set it is lives in its format record: the config, the
    defaults, plan, audit, the ledger and the CLI ask `pate.data.format_of(name)`."""
    wrong = [f"{path.relative_to(ROOT)}:{line}: {what}"
             for path in _scanned_files() for line, what in name_tests(path.read_text())]
    assert wrong == []


def test_the_scanner_finds_each_kind_of_name_test():
    """A check of the checker: the branches `pate/data.py`, the config and audit held before."""
    source = textwrap.dedent("""
        if cfg.name == "npz":
            pass
        if cfg.name in ("fashion_mnist", "mnist"):
            pass
        _FIXED = {"svhn": 10}
        name: Literal["fashion_mnist", "mnist", "svhn"] = "fashion_mnist"
        match cfg.name:
            case "synthetic":
                pass
        if kind == "npy" or x in ("a", "b"):
            pass
        label = "mnist"
    """)
    assert [line for line, _ in name_tests(source)] == [2, 4, 4, 6, 7, 9]
    assert _scanned_files() and not any("pate/data/" in str(p) for p in _scanned_files())


# --------------------------------------------------------------------------- the registry


def test_the_registry_holds_every_record_once_by_its_name():
    assert data.NAMES == tuple(data.FORMATS) == ("fashion_mnist", "mnist", "svhn", "npz", "synthetic")
    assert all(data.format_of(n) is r and r.name == n for n, r in data.FORMATS.items())
    defined = [v for m in ("idx", "svhn", "npz", "synthetic")
               for v in vars(__import__(f"pate.data.{m}", fromlist=["_"])).values() if isinstance(v, data.DataFormat)]
    assert sorted(r.name for r in defined) == sorted(data.NAMES)  # no record left out of the registry
    assert typing.get_args(typing.get_type_hints(DataConfig)["name"]) == data.NAMES


def test_an_unknown_name_is_one_line_naming_the_known_formats():
    with pytest.raises(PateError) as err:
        data.format_of("cifar10")
    line = str(err.value)
    assert line == ("unknown data set 'cifar10'; data.name must be one of fashion_mnist, mnist, svhn, npz, "
                    "synthetic")
    with pytest.raises(PateError) as err:
        config_from_dict({"data": {"name": "cifar10"}}, "run.toml")
    assert str(err.value) == ("run.toml: data.name must be one of 'fashion_mnist', 'mnist', 'svhn', 'npz', "
                              "'synthetic', got 'cifar10'")
    with pytest.raises(PateError, match="unknown data set 'cifar10'"):  # a section built in Python, not loaded
        data.load_dataset(DataConfig(name="cifar10"))


# --------------------------------------------------------------------------- the contract, for every record


def _svhn_files(folder, train: int = 12, test: int = 8) -> None:
    import scipy.io

    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train), ("test", test)):
        scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8),
                                                         "y": (np.arange(n, dtype=np.uint8) % 10 + 1)[:, None]})


def tiny(name: str, folder) -> DataConfig:
    """A small data set of each format, written under ``folder``: a format added to the registry
    needs one here, and then meets the contract below."""
    rng = np.random.default_rng(2)
    makers = {
        "fashion_mnist": lambda: write_idx_dir(folder, n_train=12, n_test=8),
        "mnist": lambda: write_idx_dir(folder, n_train=12, n_test=8),
        "svhn": lambda: _svhn_files(folder),
        "npz": lambda: np.savez(folder / "rows.npz", x_train=rng.normal(size=(12, 6)), y_train=np.arange(12) % 3,
                                x_test=rng.normal(size=(8, 6)), y_test=np.arange(8) % 3),
        "synthetic": lambda: None,
    }
    assert name in makers, f"no small data set of format {name!r}: add one to tiny()"
    folder.mkdir(parents=True, exist_ok=True)
    makers[name]()
    path = {"npz": str(folder / "rows.npz"), "synthetic": ""}.get(name, str(folder))
    return DataConfig(name=name, path=path, public_size=5, synthetic_train_size=12, synthetic_test_size=8,
                      synthetic_shape=(5, 5, 1), synthetic_classes=3)


@pytest.mark.parametrize("name", data.NAMES)
def test_each_records_facts_are_what_its_loaders_read(tmp_path, name):
    fmt = data.format_of(name)
    cfg = tiny(name, tmp_path / "set")
    full = data.load_dataset(cfg)
    assert full.name == data.dataset_name(cfg) == fmt.dataset_name(cfg)
    assert fmt.classes(cfg) in (None, full.num_classes)
    assert fmt.input_shape(cfg) in (None, full.x_train.shape[1:])
    assert fmt.inputs in ("images", "images or rows")
    assert full.x_train.ndim == 4 or (fmt.inputs == "images or rows" and full.x_train.ndim == 2)
    assert data.train_count(cfg) == full.x_train.shape[0]
    assert all(f.is_file() for f in data.training_files(cfg)) and (data.training_files(cfg) == []) == (name == "synthetic")
    whole = data.split(full, cfg.public_size)
    pool = data.load_public(cfg)
    assert pool.pool_x.tobytes() == whole.pool_x.tobytes() and pool.pool_y.tobytes() == whole.pool_y.tobytes()
    assert pool.train_size == full.x_train.shape[0] and fmt.classes(cfg) in (None, pool.num_classes)
    assert data.load_pool(cfg, cfg.public_size).tobytes() == whole.pool_x.tobytes()
    rows = np.array([7, 0, 7, 11, 3])
    x, y = data.load_train_rows(cfg, rows)
    assert x.tobytes() == full.x_train[rows].tobytes() and y.tobytes() == full.y_train[rows].tobytes()
    cut = data.split_rows(cfg, cfg.public_size, rows)
    assert cut.train_x.tobytes() == x.tobytes() and cut.eval_x.tobytes() == whole.eval_x.tobytes()
    assert cut.num_classes == full.num_classes
    assert isinstance(data.legacy_identity(cfg), str) and data.train_ids(cfg) is None


@pytest.mark.parametrize("name", data.NAMES)
def test_each_record_says_what_data_path_names_and_how_to_get_missing_files(tmp_path, name):
    fmt = data.format_of(name)
    try:
        config_from_dict({"data": {"name": name}}, "run.toml")
        refused = ""
    except PateError as err:
        refused = str(err)
    assert bool(refused) == fmt.needs_path
    if fmt.needs_path:
        assert refused == f'run.toml: data.path must name {fmt.path_names} when data.name = "{name}"'
    if name == "synthetic":  # generated: no file to miss, its ledger named by its parameters
        cfg = tiny(name, tmp_path)
        assert data.legacy_identity(cfg) != data.legacy_identity(dataclasses.replace(cfg, synthetic_seed=1))
        return
    (tmp_path / "empty").mkdir()
    missing = DataConfig(name=name, path=str(tmp_path / "empty" / ("none.npz" if fmt.needs_path else "")))
    with pytest.raises(PateError) as err:
        data.load_dataset(missing)
    assert fmt.how_to_get and fmt.how_to_get in str(err.value) and "\n" not in str(err.value)
    assert str(tmp_path / "empty") in data.legacy_identity(missing)  # an older pate named the ledger by the place
