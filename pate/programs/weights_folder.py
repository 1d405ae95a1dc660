"""A folder of public weights fitted on the public pool alone (the learned map's encoder,
`pate.programs.learned_map`; the Coates-Ng filters, `pate.programs.coates_ng`): one weights file
and `recipe.json`, which names the weights' sha256. Written all or nothing by `pate features`
(a staged folder renamed into place), never into a ledger folder; loaded by digest: a folder whose
recipe or weights are missing, or whose weights are not the recipe's, is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

from analysis.core.errors import PateError
from pate.store.ledger_home import ledger_folder_of

RECIPE = "recipe.json"


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
