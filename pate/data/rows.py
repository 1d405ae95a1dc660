"""Private records read by index, whatever the format: the runs of wanted rows of a file of
fixed-size rows (a raw file seeks to each; a gzip file or a compressed zip member decompresses what
it skips, as a stream), `ROW_CHUNK` rows at a time."""

from __future__ import annotations

import numpy as np

from analysis.core.errors import PateError

#: Rows read at once when private records are streamed (a gzip file or a compressed npz member
#: decompressed this many rows at a time; raw files seek to each run of wanted rows).
ROW_CHUNK = 4096


def check_rows(wanted: np.ndarray, total: int, what: str) -> None:
    """Refuses rows (sorted, unique) outside ``[0, total)`` of ``what``: a caller's bug."""
    if wanted.size and (wanted[0] < 0 or wanted[-1] >= total):
        raise PateError(f"internal error: private rows {int(wanted[0])}..{int(wanted[-1])} asked of {what}, "
                        f"which has {total}")


def read_runs(f, data_start: int, row_bytes: int, wanted: np.ndarray, chunk: int = ROW_CHUNK) -> bytes:
    """The bytes of rows `wanted` (sorted, unique) of a file of rows of `row_bytes` from
    `data_start`, in order: each run of wanted rows within `chunk` rows is read in one piece
    (a seek forward and a read; a gzip file or compressed zip member decompresses what it
    skips, as a stream). Raises EOFError when the file ends before a row."""
    out = bytearray()
    i = 0
    while i < wanted.size:
        first = int(wanted[i])
        j = int(np.searchsorted(wanted, first + chunk))
        last = int(wanted[j - 1])
        f.seek(data_start + first * row_bytes)
        need = (last - first + 1) * row_bytes
        piece = f.read(need)
        if len(piece) != need:
            raise EOFError(f"the file ends before row {last}")
        if j - i == last - first + 1:
            out += piece
        else:
            block = np.frombuffer(piece, np.uint8).reshape(last - first + 1, row_bytes)
            out += block[wanted[i:j] - first].tobytes()
        i = j
    return bytes(out)
