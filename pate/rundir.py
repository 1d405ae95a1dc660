"""The run directory: fixed artifact names, atomic writes, metadata, and the rules for
overwriting and resuming.

Every command reads and writes one directory (`--workdir`). Files are written to a
temporary file in the same directory and renamed into place, so a reader never sees a
half-written artifact. Every JSON artifact carries a `meta` object with the config
hash and the package version.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from analysis.errors import PateError
from pate.config import Config, config_diff, config_hash, config_to_toml, load_config

CONFIG_TOML = "config.toml"
TEACHERS_DIR = "teachers"
TEACHERS_JSON = "teachers.json"
VOTES_NPZ = "votes.npz"
LABELS_NPZ = "labels.npz"
STUDENT_DIR = "student"
STUDENT_JSON = "student.json"
PRIVACY_JSON = "privacy.json"
PRIVACY_PNG = "privacy.png"
DPSGD_DIR = "dpsgd"
DPSGD_JSON = "dpsgd.json"
#: Cached ScatterNet features of the private set (private, like the data).
DPSGD_FEATURES_DIR = "dpsgd-features"

#: The artifacts each command produces (what `--overwrite` replaces).
TEACHER_ARTIFACTS = (TEACHERS_DIR, TEACHERS_JSON)
LABEL_ARTIFACTS = (VOTES_NPZ, LABELS_NPZ)
STUDENT_ARTIFACTS = (STUDENT_DIR, STUDENT_JSON)
ANALYSIS_ARTIFACTS = (PRIVACY_JSON, PRIVACY_PNG)
DPSGD_ARTIFACTS = (DPSGD_DIR, DPSGD_JSON)

_META_KEY = "meta"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file


def _version() -> str:
    from pate import __version__

    return __version__


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in the same directory.

    The temporary file is flushed, synced and renamed over `path` (`os.replace`), so
    `path` holds either its old content or all of `data`, never a part.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), _FILE_MODE)  # mkstemp makes 0600; match a plain open()
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def metadata(config: Config | None) -> dict[str, Any]:
    """The `meta` object of an artifact: config hash, package version, time written."""
    return {
        "config_hash": config_hash(config) if config is not None else None,
        "pate_version": _version(),
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None  # JSON has no NaN/inf
    return obj


def write_json(path: str | Path, payload: Mapping[str, Any], config: Config | None) -> None:
    """Writes `payload` plus a `meta` object (see `metadata`) as JSON, atomically.

    numpy arrays and scalars become lists and numbers; NaN and infinities become null.
    """
    doc = {_META_KEY: metadata(config), **_jsonable(payload)}
    atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")


def read_json(path: str | Path) -> dict[str, Any]:
    """Reads a JSON artifact. Raises PateError when missing or unreadable."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except (OSError, ValueError) as err:
        raise PateError(f"{path} is not readable JSON ({err})") from None


def write_npz(path: str | Path, arrays: Mapping[str, np.ndarray],
              config: Config | None = None) -> None:
    """Writes arrays to an .npz atomically; with a config, adds a `meta` JSON string.

    The `meta` entry is a 0-d unicode array, readable with `allow_pickle=False`.
    """
    if _META_KEY in arrays:
        raise ValueError(f"array name {_META_KEY!r} is reserved for metadata")
    buf = io.BytesIO()
    extra = {} if config is None else {_META_KEY: np.array(json.dumps(metadata(config)))}
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()}, **extra)
    atomic_write_bytes(path, buf.getvalue())


def read_npz(path: str | Path, required: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Reads an .npz (no pickles) into a dict; `meta`, if present, is decoded to a dict.

    Raises:
      PateError: the file is missing, unreadable, or lacks a `required` array.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            out: dict[str, Any] = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except Exception as err:  # zipfile/ValueError/OSError for a damaged file
        raise PateError(f"{path} is not a readable .npz ({err})") from None
    missing = [k for k in required if k not in out]
    if missing:
        raise PateError(f"{path} lacks {', '.join(missing)}")
    if _META_KEY in out:
        out[_META_KEY] = json.loads(str(out[_META_KEY]))
    return out


class RunDir:
    """One run directory and its artifacts.

    Args:
      path: the directory (created on the first write).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def exists(self, name: str) -> bool:
        return (self.path / name).exists()

    def write_config(self, config: Config) -> None:
        """Writes the resolved config as `config.toml`."""
        atomic_write_text(self.path / CONFIG_TOML, config_to_toml(config))

    def read_config(self) -> Config:
        """Reads `config.toml` back."""
        if not self.exists(CONFIG_TOML):
            raise PateError(f"{self.path / CONFIG_TOML} not found: is {self.path} a run directory?")
        return load_config(self.path / CONFIG_TOML)

    def write_json(self, name: str, payload: Mapping[str, Any], config: Config | None) -> None:
        write_json(self.path / name, payload, config)

    def read_json(self, name: str) -> dict[str, Any]:
        return read_json(self.path / name)

    def write_npz(self, name: str, arrays: Mapping[str, np.ndarray],
                  config: Config | None = None) -> None:
        write_npz(self.path / name, arrays, config)

    def read_npz(self, name: str, required: Iterable[str] = ()) -> dict[str, np.ndarray]:
        return read_npz(self.path / name, required)

    def prepare(self, artifacts: Iterable[str], *, overwrite: bool = False,
                resume: bool = False, command: str = "this command") -> bool:
        """Checks that a command may write `artifacts` here, and clears them if told to.

        Args:
          artifacts: the names the command writes.
          overwrite: delete existing artifacts first.
          resume: keep them (the command continues from them).
          command: the command's name, for messages.

        Returns:
          True when existing artifacts are kept for resuming, False for a fresh start.

        Raises:
          PateError: artifacts exist and neither flag is given; both flags are given;
            `resume` is asked but there is nothing to resume from.
        """
        if overwrite and resume:
            raise PateError("--overwrite and --resume exclude each other; pick one")
        artifacts = tuple(artifacts)
        present = [a for a in artifacts if self.exists(a)]
        if resume:
            if not present:
                raise PateError(f"nothing to resume: {self.path} holds none of "
                                f"{', '.join(artifacts)}; run {command} without --resume")
            return True
        if present and not overwrite:
            raise PateError(f"{self.path} already holds {', '.join(present)}; pass --overwrite "
                            f"to replace them or --resume to continue")
        for name in present:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        self.path.mkdir(parents=True, exist_ok=True)
        return False

    def check_same_config(self, config: Config) -> None:
        """Raises PateError when `config.toml` here differs from `config` (resume)."""
        stored = self.read_config()
        diff = config_diff(stored, config)
        if diff:
            raise PateError(f"cannot resume: {self.path / CONFIG_TOML} differs from this config "
                            f"in {', '.join(diff)}; use the same config or --overwrite")
