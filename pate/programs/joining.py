"""Joining the processes of a `--distributed` command: the coordinator's address checked where
it enters (`coordinator_address`), the coordination service bound to that address alone, and a
join that ends within `--join-timeout` seconds in one line whatever the layout (`join`).

JAX's own join (`jax.distributed.initialize`) leaves a broken layout to its C++ runtime: a
missing process is waited for 300 s and then aborted with a C++ trace (rc 134), a process 0 whose
port is taken crashes (rc 139), a second process of the same id aborts the first (rc 134: JAX
takes the newer one for a restart of the first), and its coordination service (gRPC, no
authentication) listens on every interface. Here, before JAX is asked: process 0 checks that it
can bind the address given (`check_bindable`: a port already bound, by another process 0 too, or
an address not of this machine, is one line at once), then takes a roll call on that address
(`roll_call`): every other process says its id and `--num-processes` (`report_to_coordinator`,
waiting up to the timeout for process 0 to listen), and only when each id 1..P-1 has come, once,
does process 0 close its listener and answer "go"; a second live process of one id, another
process count, or an id that never comes stops every process that came with one line naming it,
before any of them reaches JAX. Then the others wait for JAX's service on the same address
(`wait_for_coordinator`), and the join itself, with the first agreement of every process, runs
under a watchdog (`Watchdog`) that prints one line and leaves with status 1 when the timeout
passes (JAX's own deadline is set later than it, so JAX never aborts first). A process that comes
after the roll call finds JAX's service, not process 0's answer, and stops in one line without
registering: the cluster that formed goes on. (Where JAX finds the layout itself, a cluster
manager's, there is no roll call: its ids are the manager's.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import threading
import time

from analysis.core.errors import PateError
from pate.config.coordinator import coordinator_address

#: Seconds a process waits for the others to join (`--join-timeout`; JAX's own is 300 s).
DEFAULT_JOIN_TIMEOUT = 60

#: The longest `--join-timeout` (an hour: a cluster manager starting processes slowly).
MAX_JOIN_TIMEOUT = 3600

#: JAX's own deadline comes this much later than pate's (its expiry is a C++ abort).
_JAX_GRACE = 30


def bind_address(host: str, port: int) -> str:
    """The address the coordination service listens on: the one given, not every interface."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_bindable(host: str, port: int) -> None:
    """Process 0: the coordinator's address is one of this machine's and its port is free.

    Raises:
      PateError: the port is taken (another program, or another process given --process-id 0),
        or the host is not an address of this machine, or cannot be resolved.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise PateError(f"--coordinator {host}:{port}: cannot resolve {host!r} ({err.strerror or err})") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: a closed port in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise PateError(f"process 0 cannot run the coordinator at {host}:{port}: the port is already in use "
                                "(another program, or another process given --process-id 0); pick a free port "
                                "for --coordinator on every process") from None
            if err.errno == errno.EADDRNOTAVAIL:
                raise PateError(f"process 0 cannot run the coordinator at {host}:{port}: {host} is not an address "
                                "of this machine (process 0 runs the coordinator: --coordinator names its host)") from None
            raise PateError(f"process 0 cannot run the coordinator at {host}:{port} ({err.strerror or err})") from None


#: The first words of a process's line in the roll call (`roll_call`) and the protocol's version.
HELLO = "pate-join 1"

#: The longest line of the roll call, and how long process 0 waits for one connection's line.
_LINE = 256
_LINE_WAIT = 5.0

#: Seconds the join itself (JAX's) is given at least once the roll call is complete: every process
#: is known to be there, and the watchdog still ends a join that stalls.
_AFTER_ROLL_CALL = 30.0


def _read_line(conn: socket.socket, seconds: float) -> str | None:
    """One line from `conn` (without its newline) within `seconds`; None on a timeout, an end,
    more than `_LINE` bytes or bytes that are no text."""
    data = b""
    conn.settimeout(max(0.05, seconds))
    try:
        while b"\n" not in data and len(data) <= _LINE:
            chunk = conn.recv(_LINE)
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    line, _, _ = data.partition(b"\n")
    try:
        return line.decode("ascii") if b"\n" in data else None
    except UnicodeDecodeError:
        return None


def _alive(conn: socket.socket) -> bool:
    """Whether the process at the other end of `conn` still holds it open."""
    try:
        conn.setblocking(False)
        return conn.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        conn.setblocking(True)


def _tell(conns, line: str) -> None:
    """Sends `line` to every connection of `conns` that still listens (the others are gone)."""
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.settimeout(1.0)
            conn.sendall(line.encode("utf-8", "replace")[:_LINE * 4] + b"\n")


def _ids(ids) -> str:
    ids = sorted(ids)
    shown = ", ".join(str(i) for i in ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
    return f"process{'es' if len(ids) > 1 else ''} {shown}"


def roll_call(host: str, port: int, num_processes: int, timeout: float, clock=time.monotonic) -> None:
    """Process 0, before JAX's coordination service starts: listens on host:port (the address
    given, as JAX's service will) and reads each connecting process's line ``HELLO P ID`` until
    every id 1..P-1 has come once; then closes the listener and answers ``go`` to each, so none
    of them reaches JAX before all are here. A line that is no hello (a port scan, a probe) is
    dropped. A second hello of an id whose first process still holds its connection, a process
    given another ``--num-processes``, an id out of range, or ids that have not come within
    `timeout` seconds: every process that came is answered ``no LINE`` and this one raises it.

    Raises:
      PateError: that line (the address cannot be bound: `check_bindable`'s).
    """
    deadline = clock() + timeout
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    server = socket.socket(family, kind, proto)
    came: dict[int, tuple[socket.socket, str]] = {}
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(address)
        except OSError:
            check_bindable(host, port)  # its line: the port taken, or not this machine's address
            raise
        server.listen(num_processes + 16)
        while True:
            if len(came) == num_processes - 1:  # every id came: those that left since (killed) come again
                for index in [i for i, (conn, _) in came.items() if not _alive(conn)]:
                    came.pop(index)[0].close()
                if len(came) == num_processes - 1:
                    break
            left = deadline - clock()
            if left <= 0:
                missing = set(range(1, num_processes)) - set(came)
                raise PateError(f"the cluster did not form within {timeout:g} s: process 0 of {num_processes} waited "
                                f"at {where} for the others, and {_ids(missing)} never came; start every process "
                                "with the same --coordinator and --num-processes, each its own --process-id, or "
                                "raise --join-timeout")
            server.settimeout(min(left, 0.5))
            try:
                conn, peer = server.accept()
            except (socket.timeout, InterruptedError):
                continue
            words = (_read_line(conn, min(left, _LINE_WAIT)) or "").split()
            if words[:2] != HELLO.split() or len(words) != 4 or not all(w.isdigit() for w in words[2:]):
                conn.close()  # not a pate process
                continue
            count, index = int(words[2]), int(words[3])
            came_from = f"{peer[0]}:{peer[1]}"
            line = None
            if count != num_processes:
                line = (f"process {index} was given --num-processes {count} but process 0 {num_processes}: give "
                        "every process the same --num-processes")
            elif not 1 <= index < num_processes:
                line = f"a process said --process-id {index}, which is not one of 1 to {num_processes - 1}"
            elif index in came and _alive(came[index][0]):
                line = (f"two processes were given --process-id {index} (from {came[index][1]} and {came_from}): give "
                        "each process its own --process-id, 0 to --num-processes - 1")
            if line is not None:  # this one is told here, those that came below
                _tell([conn], f"no {line}")
                conn.close()
                raise PateError(line)
            if index in came:  # its first process is gone (killed, or started again): the new one counts
                came[index][0].close()
            came[index] = (conn, came_from)
        server.close()  # before the answer: a process that comes now finds JAX's service, or nothing
        _tell([c for c, _ in came.values()], "go")
    except PateError as err:
        _tell([c for c, _ in came.values()], f"no {err}")
        raise
    finally:
        server.close()
        for conn, _ in came.values():
            conn.close()


def report_to_coordinator(host: str, port: int, num_processes: int, index: int, timeout: float,
                          clock=time.monotonic, pause: float = 0.5) -> None:
    """A process other than 0: says its id and process count to process 0's roll call
    (`roll_call`), connecting until process 0 listens, and waits for its answer.

    Raises:
      PateError: no coordinator listened within `timeout` seconds; process 0 answered ``no``
        (its line: an id given twice, another process count, a process missing); or what answered
        is not process 0's roll call (the cluster formed without this process, or another program
        holds the port), so this process stops without joining.
    """
    deadline = clock() + timeout
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    conn = _connect(host, port, index, deadline, timeout, clock, pause)
    with conn:
        try:
            conn.sendall(f"{HELLO} {num_processes} {index}\n".encode())
        except OSError:
            pass  # what answers (or not) says what happened
        answer = _read_line(conn, deadline - clock())
    if answer == "go":
        return
    if answer is not None and answer.startswith("no "):
        raise PateError(answer[3:])
    if answer is None and clock() >= deadline:
        raise PateError(f"process {index}: process 0 at {where} did not call the roll of all {num_processes} "
                        f"processes within {timeout:g} s; start them all, or raise --join-timeout")
    raise PateError(f"process {index}: what listens at {where} is not process 0's roll call (the cluster formed "
                    "without this process, or another program holds the port); this process did not join: start "
                    "every process of the cluster together, each its own --process-id")


def wait_for_coordinator(host: str, port: int, index: int, timeout: float,
                         clock=time.monotonic, pause: float = 0.5) -> None:
    """A process other than 0: waits until the coordinator at host:port accepts a connection.

    Raises:
      PateError: none did within `timeout` seconds (process 0 missing, or another address).
    """
    _connect(host, port, index, clock() + timeout, timeout, clock, pause).close()


def _connect(host: str, port: int, index: int, deadline: float, timeout: float, clock, pause: float) -> socket.socket:
    """A connection to the coordinator at host:port, tried every `pause` seconds until `deadline`.

    Raises:
      PateError: none was accepted by then (process 0 missing, or another address).
    """
    while True:
        try:
            return socket.create_connection((host, port), timeout=max(0.1, min(5.0, deadline - clock())))
        except OSError:
            if clock() >= deadline:
                where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
                raise PateError(f"process {index}: no coordinator answered at {where} within {timeout:g} s: "
                                "start process 0 (--process-id 0) with the same --coordinator, or raise "
                                "--join-timeout") from None
            time.sleep(pause)


class Watchdog:
    """Ends this process with one line (`pate: ...` on stderr) and status 1 when `seconds` pass
    before `cancel`: JAX's join blocks in C++ with the GIL released, so a timer thread runs."""

    def __init__(self, seconds: float, line: str, leave=os._exit):
        self._line, self._leave = line, leave
        self._timer = threading.Timer(seconds, self._bite)
        self._timer.daemon = True

    def _bite(self) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            print(f"pate: {self._line}", file=sys.stderr, flush=True)
        self._leave(1)

    def __enter__(self) -> "Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


def join(coordinator: str | None, num_processes: int | None, process_id: int | None,
         timeout: float = DEFAULT_JOIN_TIMEOUT) -> None:
    """`jax.distributed.initialize(...)` and the first agreement of every process, ending in one
    line within `timeout` seconds when the cluster does not form (see the module's docstring).

    Arguments left as None are found by JAX (`$JAX_COORDINATOR_ADDRESS`, SLURM, ...); the
    address checks need the coordinator and this process's id, the watchdog nothing.

    Raises:
      PateError: a bad `$JAX_COORDINATOR_ADDRESS`, a port taken, no coordinator, JAX's refusal.
    """
    import jax

    from pate.programs.cluster import Cluster, leave_quickly_when_lost

    given = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS") or None
    place = None
    if given is not None:
        try:
            place = coordinator_address(given)
        except ValueError as err:
            raise PateError(f"the coordinator's address {err}") from None
    started = time.monotonic()
    least = 1.0
    if place is not None and process_id is not None and num_processes is not None:  # the layout is pate's
        if process_id == 0:
            check_bindable(*place)
            roll_call(*place, num_processes, timeout)
        else:
            report_to_coordinator(*place, num_processes, process_id, timeout)
            wait_for_coordinator(*place, process_id, max(_AFTER_ROLL_CALL, timeout - (time.monotonic() - started)))
        least = _AFTER_ROLL_CALL  # every process came: JAX's join is quick, yet given time
    elif place is not None and process_id == 0:
        check_bindable(*place)
    elif place is not None and process_id is not None:
        wait_for_coordinator(*place, process_id, timeout)
    left = max(least, timeout - (time.monotonic() - started))
    me = "this process" if process_id is None else f"process {process_id}"
    of = "" if num_processes is None else f" of {num_processes}"
    where = "" if place is None else f" at {given}"
    line = (f"the cluster did not form within {timeout:g} s: {me}{of} waited{where} for the others (one missing or "
            "killed, or two given the same --process-id); start every process with the same --coordinator and "
            "--num-processes, each its own --process-id, or raise --join-timeout")
    extra = {} if place is None else {"coordinator_bind_address": bind_address(*place)}
    with Watchdog(left, line):
        try:
            jax.distributed.initialize(coordinator_address=given, num_processes=num_processes,
                                       process_id=process_id, initialization_timeout=int(left) + _JAX_GRACE,
                                       **extra)
        except Exception as err:  # noqa: BLE001 - JAX raises several types here
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300].rstrip(".")
            raise PateError(f"jax.distributed.initialize() failed: {first}. Pass --coordinator HOST:PORT, "
                            "--num-processes and --process-id (or run under a cluster manager JAX detects, such "
                            "as SLURM) on every host") from None
        leave_quickly_when_lost()
        # Gloo forms its communication context at the first collective and waits only 30 s there
        # for the other processes ("Gloo context initialization failed: DEADLINE_EXCEEDED"), where
        # a later collective waits for minutes (measured: 120 and 200 s): a process 0 that reads,
        # checks and charges for longer than the others before its first agreement would lose
        # them. So every process makes that first collective now, as it joins, when all are here.
        Cluster().agree()
