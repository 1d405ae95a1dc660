"""The processes of one distributed command (`--distributed`, JAX's multi-controller runtime):
which block of the teacher axis each process owns, the agreement every process reaches before
it goes on (a process that fails stops every process, each with one line), and the exact,
integer sum of the processes' vote counts (the teachers' votes, `sum_counts`; a fine-grained
release's histogram of the private records, `sum_histograms`).

Every process runs the same sequence of collectives (`agree`, `sum_counts`): a process that
fails between two of them tells the others at the next one (`together`), so none waits for
ever on a process that has given up, and every process learns why in the same words.
The collectives are `jax.experimental.multihost_utils.process_allgather` of small int32
arrays (gloo on CPU, NCCL on GPUs): an all-gather moves integers, it never adds them, so the
sum made on the host in int64 is exact whatever the layout.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import sys
from typing import Callable, Mapping

import numpy as np

from analysis.core.errors import PateError

#: The longest failure line an agreement carries (UTF-8 bytes; longer ones are cut).
MESSAGE_BYTES = 480

#: The status words of an agreement: [failed, value, length of the message, message bytes...].
_HEADER = 3


def block(num_rows: int, count: int, index: int) -> range:
    """The rows of a stacked axis of `num_rows` that process `index` of `count` owns: the
    `index`-th of `count` blocks of ``ceil(num_rows / count)`` rows (the last ones shorter or
    empty). The blocks are those of the axis sharded over one device per process, so each
    process reads only its own rows of a checkpoint (`pate.programs.teacher_training`)."""
    per = -(-num_rows // count)
    return range(min(index * per, num_rows), min((index + 1) * per, num_rows))


def status(failure: str | None = None, value: int = 0) -> np.ndarray:
    """One process's word in an agreement: whether it failed (and its line, cut to
    `MESSAGE_BYTES`), and a value (process 0's is the one every process gets)."""
    text = (failure or "").encode("utf-8")[:MESSAGE_BYTES]
    text = text.decode("utf-8", "ignore").encode("utf-8")  # no character cut in two
    out = np.zeros(_HEADER + MESSAGE_BYTES, np.int32)
    out[:_HEADER] = (failure is not None, value, len(text))
    out[_HEADER:_HEADER + len(text)] = np.frombuffer(text, np.uint8)
    return out


#: Whether a collective with the other processes failed here (one of them died): this process
#: then leaves without JAX's shutdown barrier (`leave_quickly_when_lost`).
_LOST = False


def lost() -> bool:
    """Whether this process lost the other processes of its cluster."""
    return _LOST


def leave_quickly_when_lost() -> None:
    """Registers the exit hook of a process that lost its cluster (`initialize_distributed`
    calls it right after JAX's start, so it runs before JAX's own exit hook): JAX's shutdown
    barrier would wait for a dead process until the coordination service's heartbeat timeout
    (100 s) and then abort with a C++ trace; the hook flushes what was printed (the one line)
    and exits with status 1 at once. Nothing is left to do by then: a release is written,
    charged and renamed into place before the last agreement, or not at all."""
    atexit.register(_leave_if_lost)


def _leave_if_lost() -> None:
    if _LOST:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(1)


class Stopped(PateError):
    """Another process failed: this one stops too (its line names the process and why)."""


def decide(words: np.ndarray, index: int, last: bool = False) -> int:
    """What an agreement decides from every process's `status` (rows by process id): process
    0's value when none failed.

    Raises:
      Stopped: another process failed (its line, naming the first that did); this
        process's own failure is its own error and is raised by the caller, not here. Before
        the `last` agreement nothing can have been charged or written (process 0 commits
        between the counts and the last agreement), and the line says so.
    """
    words = np.asarray(words)
    failed = [p for p in range(words.shape[0]) if words[p, 0] and p != index]
    if failed:
        p = failed[0]
        length = int(words[p, 2])
        text = bytes(words[p, _HEADER:_HEADER + length].astype(np.uint8)).decode("utf-8", "replace")
        nothing = "" if last else " (nothing was charged or written)"
        raise Stopped(f"process {p} of {words.shape[0]} failed, so every process stopped{nothing}: {text}")
    return int(words[0, 1])


def exact_sum(counts: np.ndarray, teachers: list[int]) -> np.ndarray:
    """The vote histogram of the whole ensemble from each process's counts (P, n, C): summed
    as integers (int64 on the host, so no sum can wrap), after checking that every row of
    process p counts each of its `teachers[p]` teachers once.

    Raises:
      PateError: a process's counts do not add up to its teachers (an internal error).
    """
    counts = np.asarray(counts)
    if counts.dtype.kind not in "iu":
        raise PateError(f"internal error: vote counts must be integers, got {counts.dtype}")
    counts = counts.astype(np.int64)
    for p, expected in enumerate(teachers):
        rows = counts[p].sum(axis=-1)
        if np.any(rows != expected) or np.any(counts[p] < 0):
            raise PateError(f"internal error: process {p}'s vote rows do not count its {expected} teachers once")
    total = counts.sum(axis=0)
    if total.size and total.max() > np.iinfo(np.int32).max:
        raise PateError("internal error: a vote count does not fit in int32")
    return total.astype(np.int32)


def exact_histogram_sum(counts: np.ndarray, totals: list[int]) -> np.ndarray:
    """A vote histogram of every private record from each process's counts (P, points, C) of
    its own records (a fine-grained release): summed as integers in int64 after checking that
    process p's counts are non-negative and add up to `totals[p]` (its records times their
    votes each). Returns int64 (the release's noise is added to int64 counts).

    Raises:
      PateError: a process's counts do not add up to its records' votes (an internal error).
    """
    counts = np.asarray(counts)
    if counts.dtype.kind not in "iu":
        raise PateError(f"internal error: vote counts must be integers, got {counts.dtype}")
    counts = counts.astype(np.int64)
    for p, expected in enumerate(totals):
        if int(counts[p].sum()) != int(expected) or np.any(counts[p] < 0):
            raise PateError(f"internal error: process {p}'s histogram does not count its {expected} votes once")
    return counts.sum(axis=0)


def _digest31(text: str) -> int:
    """A 31-bit digest of `text` (an agreement word carries int32)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:4], "big") & 0x7FFFFFFF


def facts_word(facts: Mapping[str, str]) -> np.ndarray:
    """One process's word in `Cluster.agree_on`: an agreement word (`status`, not failed) whose value
    is a digest of the facts' names and whose message slots hold one 31-bit digest per fact, in the
    order of their sorted names. The same shape as every agreement word, so a process that failed
    before it (its `together` sends its failure) is heard here as at any agreement."""
    names = sorted(facts)
    if len(names) > MESSAGE_BYTES:
        raise PateError(f"internal error: {len(names)} facts to agree on, at most {MESSAGE_BYTES}")
    word = status(value=_digest31("\0".join(names)))
    word[_HEADER:_HEADER + len(names)] = [_digest31(f"{n}\0{facts[n]}") for n in names]
    return word


def differs(facts: Mapping[str, str], mine: np.ndarray, leader: np.ndarray, index: int) -> str | None:
    """The line of process `index` whose facts (`facts`, its word `mine`) are not process 0's
    (its word `leader`): the first fact that differs, named, with this process's value when it is
    short (a setting; a digest is not shown); None when they agree."""
    names = sorted(facts)
    fix = "give every process the same config, data set and run directory"
    if int(leader[1]) != int(mine[1]):
        return f"process {index} runs another command or release than process 0 (other settings to agree on): {fix}"
    bad = [n for k, n in enumerate(names) if int(leader[_HEADER + k]) != int(mine[_HEADER + k])]
    if not bad:
        return None
    value = str(facts[bad[0]])
    shown = f" ({value})" if len(value) <= 40 else ""
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return f"process {index}'s {bad[0]}{shown} differs from process 0's{more}: {fix}"


def _allgather(x: np.ndarray) -> np.ndarray:
    """Every process's `x` (the same shape on each), stacked by process id."""
    import jax

    if jax.process_count() == 1:
        return np.asarray(x)[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(x), tiled=False))


class Cluster:
    """This process's place in a distributed command: `index` of `count` (one process: 0 of 1,
    and every collective is the identity).

    Args:
      index, count: default: `jax.process_index()`, `jax.process_count()`.
      gather: the all-gather (tests pass their own).
    """

    def __init__(self, index: int | None = None, count: int | None = None,
                 gather: Callable[[np.ndarray], np.ndarray] = _allgather):
        if index is None or count is None:
            import jax

            index, count = jax.process_index(), jax.process_count()
        self.index, self.count, self._gather = index, count, gather
        self._stopped = False  # an agreement stopped this process (the others know)

    @property
    def leader(self) -> bool:
        """Process 0: holds the run's lock, draws the noise, charges the ledger, writes."""
        return self.index == 0

    def rows(self, num_rows: int) -> range:
        """This process's block of a stacked axis of `num_rows` (`block`)."""
        return block(num_rows, self.count, self.index)

    def agree(self, value: int = 0, failure: str | None = None, last: bool = False) -> int:
        """Waits for every process; returns process 0's `value` when none failed (`last`: the
        agreement that ends `together`).

        Raises:
          Stopped: another process failed (this one says which and why).
        """
        words = self._collective(status(failure, value))
        try:
            return decide(words, self.index, last)
        except Stopped:
            self._stopped = True
            raise

    def agree_on(self, facts: Mapping[str, str]) -> None:
        """Every process has process 0's `facts` (name -> value: the data set's digest, a
        checkpoint's, every setting of the command; `pate.programs.agreement.facts`), compared by
        31-bit digests in one agreement word (`facts_word`), then a second agreement: a process
        whose facts differ says so there, naming the first that differs, and every process stops
        with that line. Called by every process at the same point, before anything is read or
        drawn; works inside `together` and outside it (it tells the others itself).

        Raises:
          PateError: this process's facts differ from process 0's (its line).
          Stopped: another process failed, or its facts differ.
        """
        if self.count == 1:
            return
        mine = facts_word(facts)
        words = self._collective(mine)
        try:
            decide(words, self.index)
        except Stopped:
            self._stopped = True
            raise
        line = None if self.leader else differs(facts, mine, words[0], self.index)
        if line is not None:
            with contextlib.suppress(PateError):  # another process's failure there: this one's line is its own
                self.agree(failure=line)
            self._stopped = True  # the others know: `together` tells them nothing more
            raise PateError(line)
        self.agree()

    def sum_counts(self, counts: np.ndarray, num_teachers: int) -> np.ndarray:
        """The vote histogram of all `num_teachers` teachers from this process's int32 counts
        (n, C) of its own (`rows`): once every process has counted (an `agree`: one that
        failed stops them all), gathered from every process and summed exactly (`exact_sum`).
        Every process calls it at the same point.

        Raises:
          Stopped: another process failed before it counted.
        """
        teachers = [len(block(num_teachers, self.count, p)) for p in range(self.count)]
        return exact_sum(self._when_all_came(counts, np.int32), teachers)

    def sum_histograms(self, counts: np.ndarray, totals: list[int]) -> np.ndarray:
        """The (points, classes) vote histogram of every private record from this process's
        int64 counts of its own records: once every process has counted (an `agree`), sent as
        int32 (each cell counts at most this process's records), gathered from every process
        and summed exactly in int64 (`exact_histogram_sum`; `totals[p]`: process p's votes).
        Every process calls it at the same point.

        Raises:
          Stopped: another process failed before it counted.
        """
        counts = np.asarray(counts)
        if counts.dtype.kind not in "iu" or (counts.size and counts.max() > np.iinfo(np.int32).max):
            raise PateError("internal error: a process's vote counts do not fit in int32")
        return exact_histogram_sum(self._when_all_came(counts.astype(np.int32), np.int32), totals)

    def own_records(self, data, public_size: int):
        """This process's view of a data set (`[data]` section `data`): the splits
        (`pate.data.split_rows`) whose private train split is its own slice alone (`rows` of the
        train split: records ``[p ceil(N/P), (p + 1) ceil(N/P))``), the slice's first record
        number, and N (from a file header, `pate.data.train_count`). Only the slice's records are
        read and held (an SVHN .mat is read whole by scipy, its other images dropped unconverted)."""
        from pate.data import split_rows, train_count

        total = train_count(data)
        rows = self.rows(total)
        return split_rows(data, public_size, np.arange(rows.start, rows.stop)), rows.start, total

    def sum_floats(self, values: np.ndarray) -> np.ndarray:
        """The float32 sum over every process of its `values` (the same shape on each; DP-SGD's
        clipped gradient sums, process 0's with the noise): once every process has come (an
        `agree`: one that failed stops them all), gathered and added on the host in float64 in
        process order, then rounded to float32. Every process gets the same bits; unlike the
        vote counts the sum is not one process's own sum of the same terms bit for bit (float
        addition is not associative: the terms are grouped by process). Every process calls
        it at the same point.

        Raises:
          Stopped: another process failed before it came.
        """
        return self._when_all_came(values, np.float32).astype(np.float64).sum(axis=0).astype(np.float32)

    def share_floats(self, values: np.ndarray) -> np.ndarray:
        """Process 0's float32 `values` on every process, bit for bit (`share` of their bits:
        DP-SGD's initial parameters and the public scale of its map's rows). Every process calls
        it at the same point, the others with an array of the same shape."""
        values = np.ascontiguousarray(values, np.float32)
        return self.share(values.view(np.int32)).view(np.float32)

    def share(self, values: np.ndarray) -> np.ndarray:
        """Process 0's int32 `values` on every process (the others pass an array of the same
        shape, which an `agree` has told them: round 2's queries, chosen by process 0 from its
        student). Every process calls it at the same point.

        Raises:
          PateError: the values are not integers that fit in int32 (an internal error), or the
            other processes were lost.
        """
        values = np.asarray(values)
        if values.dtype.kind not in "iu" or (values.size and (values.min() < np.iinfo(np.int32).min
                                                              or values.max() > np.iinfo(np.int32).max)):
            raise PateError("internal error: shared values travel as int32")
        return np.asarray(self._collective(values.astype(np.int32))[0])

    def _when_all_came(self, values: np.ndarray, dtype) -> np.ndarray:
        """Every process's `values` (the same shape on each, travelling as `dtype`), by process id,
        once every process has come (an `agree`: one that failed stops them all)."""
        values = np.asarray(values)
        if values.dtype != dtype:
            raise PateError(f"internal error: these values travel as {np.dtype(dtype).name}, got {values.dtype}")
        self.agree()
        return self._collective(values)

    def _collective(self, x: np.ndarray) -> np.ndarray:
        """`gather`, where a process that died (killed, its host lost) ends in one line."""
        try:
            return self._gather(x)
        except Exception as err:  # noqa: BLE001 - gloo, NCCL and the coordination service raise several types
            self.abandon()
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
            raise PateError(f"lost the other processes of the cluster ({first}); see their output, then start "
                            "them all again") from None

    def dissolve(self) -> None:
        """Every process leaves JAX's cluster together (`jax.distributed.shutdown`: a barrier of
        all of them, reached at once when they call it at the same point): then a process may
        exit while another goes on alone (`pate run --distributed`: process 0 trains the
        student), with no shutdown barrier left to wait for it at exit (which would time out,
        300 s, and abort both). JAX's backends are then made again for this process alone
        (`jax.extend.backend.clear_backends`: arrays and compiled programs of the cluster are
        gone, so no step may hold one across it): `jax.process_count()` is 1 afterwards.

        Raises:
          PateError: the others could not be reached (this process then leaves as `abandon` says).
        """
        if self.count == 1:
            return
        import jax

        from jax.extend import backend

        try:
            jax.distributed.shutdown()
        except Exception as err:  # noqa: BLE001 - the coordination service raises several types
            self.abandon()
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
            raise PateError(f"lost the other processes of the cluster as they left it ({first})") from None
        # The backend made for the cluster still counts every process (orbax would wait for the
        # others at each checkpoint): the next computation makes a backend of this process alone.
        backend.clear_backends()
        # Orbax keeps the signalling client of the cluster it first saw (an lru_cache): forgotten,
        # it picks the one-process client at the next checkpoint. Tested with real processes
        # (tests/steps/test_run_distributed.py): an orbax that moves it fails there, loudly.
        with contextlib.suppress(ImportError, AttributeError):
            from orbax.checkpoint._src.futures import signaling_client

            signaling_client.get_signaling_client.cache_clear()
        self.index, self.count = 0, 1

    def abandon(self) -> None:
        """A collective failed (here or in a library's, such as orbax's restore): the cluster's
        sequence of collectives is broken, so this process tells no one and, at exit, leaves
        without JAX's shutdown barrier (`leave_quickly_when_lost`)."""
        global _LOST
        self._stopped, _LOST = True, True

    @contextlib.contextmanager
    def together(self):
        """The block every process runs: a failure here is told to the others at the next
        agreement (they stop with one line naming this process and its line), and a block
        that ends well waits for the others to end well too (the last agreement, after the
        block: a process 0 that fails there may have committed, so that line claims nothing)."""
        try:
            yield self
        except BaseException as err:
            if not self._stopped and self.count > 1:
                line = " ".join(str(err).split()) or type(err).__name__
                with contextlib.suppress(Exception):
                    self.agree(failure=line)
            raise
        self.agree(last=True)
