"""The progress bar of a training loop (rich, on stderr): what is counted, done of
total, named fields such as the loss, elapsed time and ETA. One class serves the
teachers (epochs), the student and DP-SGD (steps)."""

from __future__ import annotations

from typing import Sequence


class Progress:
    """A context manager; `update(done, **fields)` moves the bar. With `show` False it
    draws nothing, so loops call it unconditionally.

    Args:
      label: what is counted ("epoch", "student step").
      total: how many there are.
      fields: names of the values shown after the bar (each as "name value").
      start: how many were done before (a resumed run).
      show: draw the bar at all.
    """

    def __init__(self, label: str, total: int, fields: Sequence[str] = (), *, start: int = 0,
                 show: bool = True):
        self._bar = None
        if not show:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        columns = [TextColumn(label), MofNCompleteColumn(), BarColumn()]
        columns += [TextColumn(f"{name} {{task.fields[{name}]}}") for name in fields]
        columns += [TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
        self._bar = Progress(*columns, console=Console(stderr=True), transient=False)
        self._task = self._bar.add_task(label, total=total, completed=start,
                                        **{name: "-" for name in fields})

    def __enter__(self) -> "Progress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, done: int, **fields: str) -> None:
        """Shows `done` of the total and the given fields (already formatted)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done, **fields)
