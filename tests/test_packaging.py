"""The package as a user installs it, not as the editable checkout sees it: a wheel holds every
package of pate/ and analysis/ (found, not listed by hand), the root `cli` module and the bundled
configs; installed from that wheel, pate runs a bundled config from another folder."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True, text=True,
                   env={**os.environ, "PIP_NO_INDEX": "1"})
    (path,) = out.glob("pate_jax-*.whl")
    return path


def _packages() -> set:
    """Every folder with an ``__init__.py`` under pate/ and analysis/, as a wheel path."""
    return {str(p.parent.relative_to(ROOT)) for top in ("pate", "analysis") for p in (ROOT / top).rglob("__init__.py")}


def test_the_wheel_holds_every_package_and_the_bundled_configs(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    packages = _packages()
    assert {"pate/store", "pate/steps", "pate/release", "analysis"} <= packages
    missing = [p for p in sorted(packages) if f"{p}/__init__.py" not in names]
    assert missing == []
    modules = {str(p.relative_to(ROOT)) for top in ("pate", "analysis") for p in (ROOT / top).rglob("*.py")}
    assert modules - names == set()
    assert "cli.py" in names
    bundled = {f"pate/config/presets/{p.name}" for p in (ROOT / "pate" / "config" / "presets").glob("*.toml")}
    assert "pate/config/presets/tiny.toml" in bundled and bundled <= names
    assert "License-Expression: Apache-2.0" in metadata


def test_a_bundled_config_by_name_and_its_refusal(tmp_path, monkeypatch):
    from analysis.core.errors import PateError
    from pate.config import load_config, presets

    monkeypatch.chdir(tmp_path)  # no configs/ here
    assert {"tiny", "quickstart", "fashion_mnist"} <= set(presets())
    assert load_config("tiny") == load_config("tiny.toml") == load_config(ROOT / "configs" / "tiny.toml")
    (tmp_path / "tiny.toml").write_text("[teachers]\nnum_teachers = 3\n")
    assert load_config("tiny.toml").teachers.num_teachers == 3  # a file of that name wins
    with pytest.raises(PateError, match="not found; give a file, or one of the bundled configs by name: .*tiny"):
        load_config("no-such-config")


@pytest.mark.slow
def test_an_installed_wheel_runs_a_bundled_config_from_another_folder(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "PATE_LEDGER_DIR": str(tmp_path / "ledger")}
    code = ("import sys, pate, cli; assert pate.__file__.startswith(sys.argv[1]), pate.__file__; "
            "sys.exit(cli.main(['run', '--config', 'tiny', '--workdir', 'run', '--no-progress']))")
    done = subprocess.run([sys.executable, "-c", code, str(site)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (elsewhere / "run" / "release.json").exists()
