"""Joining the processes of a `--distributed` command: the coordinator's address checked where
it enters (`coordinator_address`), the coordination service bound to that address alone, and a
join that ends within `--join-timeout` seconds in one line whatever the layout (`join`).

JAX's own join (`jax.distributed.initialize`) leaves a broken layout to its C++ runtime: a
missing process is waited for 300 s and then aborted with a C++ trace (rc 134), a process 0 whose
port is taken crashes (rc 139), a second process of the same id aborts the first (rc 134), and
its coordination service (gRPC, no authentication) listens on every interface. Here, before JAX
is asked: process 0 checks that it can bind the address given (`check_bindable`: a port already
bound, by another process 0 too, or an address not of this machine, is one line at once); every
other process waits, up to the timeout, for the coordinator to accept a connection
(`wait_for_coordinator`); and the join itself, with the first agreement of every process, runs
under a watchdog (`Watchdog`) that prints one line and leaves with status 1 when the timeout
passes (JAX's own deadline is set later than it, so JAX never aborts first).
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


def wait_for_coordinator(host: str, port: int, index: int, timeout: float,
                         clock=time.monotonic, pause: float = 0.5) -> None:
    """A process other than 0: waits until the coordinator at host:port accepts a connection.

    Raises:
      PateError: none did within `timeout` seconds (process 0 missing, or another address).
    """
    deadline = clock() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(5.0, deadline - clock()))):
                return
        except OSError:
            if clock() >= deadline:
                raise PateError(f"process {index}: no coordinator answered at {host}:{port} within {timeout:g} s: "
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
    if place is not None and process_id == 0:
        check_bindable(*place)
    elif place is not None and process_id is not None:
        wait_for_coordinator(*place, process_id, timeout)
    left = max(1.0, timeout - (time.monotonic() - started))
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
