"""A folder of public weights fitted on the public pool alone (the learned map's encoder,
`pate.programs.learned_map`; the Coates-Ng filters, `pate.programs.coates_ng`): one weights file
and `recipe.json`, which names the weights' sha256. Written all or nothing by `pate features`
(a staged folder renamed into place), never into a ledger folder; loaded by digest: a folder whose
recipe or weights are missing, or whose weights are not the recipe's, is refused in one line.
What the digest cannot say (a folder re-signed by hand: NaN or 3e38 weights, missing keys, shapes
or a recipe that do not fit together) each map checks when it loads the folder, with `arrays`,
`check_values` and `Damaged`, before any data is read.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from pate.store.ledger_home import ledger_folder_of

RECIPE = "recipe.json"

#: The largest number a map's rows may reach (float32 ends at 3.4e38): a folder whose weights could
#: map an input past it is refused when loaded (each map bounds its own outputs), so no row of a
#: public map is inf, or NaN after an inf.
MAX_REACH = 1e30


class Damaged(ValueError):
    """What is wrong with a folder whose digest is right (raised by a map's checks, reported by
    `refuse` in one line naming the folder)."""


def refuse(key: str, folder: str, err: Exception, remake: str) -> PateError:
    """The one line of a damaged folder: the config key and folder, what is wrong, how to remake it."""
    return PateError(f"{key} = {folder!r}: {err}; {remake}")


def arrays(raw: bytes, weights_file: str) -> dict[str, np.ndarray]:
    """The arrays of a weights file's bytes (an .npz, no pickles).

    Raises:
      Damaged: not an .npz numpy reads without pickles.
    """
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as f:
            return {k: np.asarray(f[k]) for k in f.files}
    except Exception as err:  # noqa: BLE001 - a zip, an npy header or a pickle numpy refuses, each its own type
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise Damaged(f"{weights_file} is not an .npz of arrays ({first})") from None


def check_values(weights_file: str, named: dict[str, np.ndarray]) -> None:
    """Every array of `named` holds finite floating-point numbers.

    Raises:
      Damaged: naming the first array that does not.
    """
    for name, value in named.items():
        if value.dtype.kind != "f":
            raise Damaged(f"{weights_file}'s {name} holds {value.dtype} values, not floating-point weights")
        if not np.isfinite(value).all():
            raise Damaged(f"{weights_file}'s {name} holds NaN or inf")


def positive_ints(value, what: str, count: int | None = None) -> tuple[int, ...]:
    """`value` as a tuple of positive integers (a recipe's list), of `count` entries when given.

    Raises:
      Damaged: naming `what`.
    """
    if not isinstance(value, list) or not value or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                       for v in value):
        raise Damaged(f"{RECIPE}'s {what} must be a list of positive integers, got {json.dumps(value)[:80]}")
    if count is not None and len(value) != count:
        raise Damaged(f"{RECIPE}'s {what} must have {count} entries, got {json.dumps(value)[:80]}")
    return tuple(value)


def check_out(out: Path, files: tuple[str, ...], *, overwrite: bool = False, config=None) -> None:
    """May `pate features` write `files` into `out`? A new or empty folder, yes; with `overwrite`,
    one holding those files and nothing else (plain files); never a folder inside a ledger folder
    (`pate.store.ledger_home.ledger_folder_of`).

    Raises:
      PateError: in one line, naming what is there.
    """
    ledgers = ledger_folder_of(out, config)
    if ledgers is not None:
        raise PateError(f"--out {out} is inside the ledger folder {ledgers}: no command writes there but the ledger "
                        "itself; name another folder")
    if out.is_symlink():
        raise PateError(f"--out {out} is a symbolic link (pate never writes through a link); name the folder itself")
    if not out.exists():
        return
    if not out.is_dir():
        raise PateError(f"{out} is a file; --out names the folder to write the weights into")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    if not overwrite:
        raise PateError(f"{out} is not empty; pass --overwrite to replace it, or name another folder")
    foreign = [n for n in entries if n not in files or (out / n).is_symlink() or not (out / n).is_file()]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise PateError(f"--overwrite replaces only what `pate features` wrote ({', '.join(files)}); {out} "
                        f"also holds {shown}: name another folder, or empty it yourself")


def write(out: Path, weights_file: str, raw: bytes, doc: dict) -> None:
    """Writes `raw` as `weights_file` and `doc` as `recipe.json` into `out`, all or nothing (a
    staged folder renamed into place, an older folder moved aside then removed). The caller has
    checked `out` (`check_out`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        (stage / weights_file).write_bytes(raw)
        (stage / RECIPE).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
        if out.exists():
            old = out.with_name(f".{out.name}.old-{time.time_ns()}")
            out.rename(old)
            stage.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            stage.rename(out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def read_named(folder: str, key: str, weights_file: str, map_name: str, made_by: str,
               remake: str) -> tuple[dict, str, bytes]:
    """`read`, refusing first, in one line, an empty `key` for the map `map_name` (`made_by`: the
    command whose folder it should name)."""
    if not folder:
        raise PateError(f"features.map names \"{map_name}\" but {key} is empty; set it to the folder "
                        f"{made_by} wrote")
    return read(folder, key, weights_file, remake)


def read(folder: str, key: str, weights_file: str, remake: str) -> tuple[dict, str, bytes]:
    """The recipe document, the weights' sha256 and the weights' bytes of `folder` (named by the
    config's `key`), the weights checked against the recipe's digest; `remake`: how to make it.

    Raises:
      PateError: in one line, the folder, its recipe or its weights missing or unreadable, or the
        weights not the recipe's.
    """
    d = Path(folder)
    try:
        doc = json.loads((d / RECIPE).read_text())
        raw = (d / weights_file).read_bytes()
    except FileNotFoundError as err:
        raise PateError(f"{key} = {folder!r}: {Path(err.filename).name} not found; {remake}") from None
    except (OSError, ValueError) as err:
        raise PateError(f"{key} = {folder!r}: cannot read the weights ({err}); {remake}") from None
    expected = doc.get("weights", {}).get("sha256") if isinstance(doc, dict) and isinstance(doc.get("weights"), dict) \
        else None
    digest = hashlib.sha256(raw).hexdigest()
    if expected != digest:
        raise PateError(f"{key} = {folder!r}: {weights_file} (sha256 {digest[:12]}) is not the weights its {RECIPE} "
                        f"names ({str(expected)[:12]}); {remake}")
    return doc, digest, raw
