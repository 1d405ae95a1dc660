"""Joining a `--distributed` command (`pate.programs.joining`): the coordinator's address
checked where it enters, the coordination service bound to it alone, and every broken layout
(a process missing, a port taken, another process 0, an id out of range) ending in one line,
exit 1 (2 for a bad option), within `--join-timeout`, never JAX's C++ abort or its 300 s wait.
The unit tests need no cluster; two fast tests launch one real process each."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.core.errors import PateError
from conftest import TINY, invoke
from pate.config.coordinator import coordinator_address
from pate.programs import joining

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Reported(threading.Thread):
    """`joining.report_to_coordinator` of one process in a thread: `join()` gives "go" or its line."""

    def __init__(self, port: int, count: int, index: int, timeout: float):
        super().__init__(daemon=True)
        self.args_, self.outcome = (port, count, index, timeout), None

    def run(self):
        port, count, index, timeout = self.args_
        try:
            joining.report_to_coordinator("127.0.0.1", port, count, index, timeout, pause=0.05)
            self.outcome = "go"
        except PateError as err:
            self.outcome = str(err)

    def join(self, timeout=None):
        super().join(timeout if timeout is not None else 30)
        return self.outcome


def _report_in_thread(port: int, count: int, index: int, timeout: float) -> _Reported:
    thread = _Reported(port, count, index, timeout)
    thread.start()
    return thread


@pytest.mark.parametrize("text", [":0", ":", "a b:123", "host:-5", "host:99999", "host:0", "noport", "host:",
                                  "host:12a", "[]:80", "h\tx:80", "host:٣"])
def test_a_bad_coordinator_is_refused(text):
    with pytest.raises(ValueError):
        coordinator_address(text)


@pytest.mark.parametrize("text, place", [("127.0.0.1:12345", ("127.0.0.1", 12345)), ("node-1.x:1", ("node-1.x", 1)),
                                         ("[::1]:65535", ("::1", 65535))])
def test_a_good_coordinator_is_its_host_and_port(text, place):
    assert coordinator_address(text) == place


@pytest.mark.parametrize("text", [":0", ":", "a b:123", "h:-5", "h:99999"])
def test_the_cli_refuses_a_bad_coordinator_in_one_line_before_joining(tmp_path, text):
    # Before: `:0`, `:` and a spaced name hung in JAX's join, `-5` crashed it, 99999 was accepted.
    result = invoke("run", "--config", TINY, "--workdir", tmp_path / "run", "--distributed", "--coordinator", text,
                    "--num-processes", 2, "--process-id", 0)
    assert result.exit_code == 2, result.output
    assert "--coordinator" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_a_process_id_out_of_range_is_a_usage_error(tmp_path):
    result = invoke("run", "--config", TINY, "--workdir", tmp_path / "run", "--distributed",
                    "--coordinator", "127.0.0.1:5", "--num-processes", 2, "--process-id", 2)
    assert result.exit_code == 2
    assert "--process-id 2 is not one of the 2 processes (0 to 1)" in result.output
    assert not (tmp_path / "run").exists()


def test_join_timeout_needs_distributed(tmp_path):
    result = invoke("run", "--config", TINY, "--workdir", tmp_path / "run", "--join-timeout", 5)
    assert result.exit_code == 2 and "need --distributed" in result.output


def test_the_service_binds_the_address_given_not_every_interface(monkeypatch):
    import jax

    from pate.programs import cluster

    seen = {}
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: seen.update(kw))
    monkeypatch.setattr(cluster.Cluster, "__init__", lambda self: None)
    monkeypatch.setattr(cluster.Cluster, "agree", lambda self: 0)
    monkeypatch.setattr(cluster, "leave_quickly_when_lost", lambda: None)
    port = _free_port()
    other = _report_in_thread(port, 2, 1, 5)  # process 1 answers the roll call
    joining.join(f"127.0.0.1:{port}", 2, 0, timeout=5)
    assert other.join() == "go"
    assert seen["coordinator_bind_address"] == f"127.0.0.1:{port}"  # JAX's default: [::]:PORT
    assert seen["initialization_timeout"] > 5  # JAX's deadline (a C++ abort) comes after pate's


def test_the_bind_address_keeps_an_ipv6_host_in_brackets():
    assert joining.bind_address("::1", 80) == "[::1]:80"
    assert joining.bind_address("10.0.0.2", 80) == "10.0.0.2:80"


def test_process_0_refuses_a_port_already_bound():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(PateError, match="already in use .*another process given --process-id 0"):
            joining.check_bindable("127.0.0.1", taken.getsockname()[1])


def test_process_0_refuses_an_address_not_of_this_machine():
    with pytest.raises(PateError, match="not an address of this machine"):
        joining.check_bindable("192.0.2.1", 23999)  # TEST-NET-1: no host has it


def test_another_process_waits_for_the_coordinator_then_stops_in_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    start = time.monotonic()
    with pytest.raises(PateError, match=f"process 1: no coordinator answered at 127.0.0.1:{port} within 0.5 s"):
        joining.wait_for_coordinator("127.0.0.1", port, 1, 0.5, pause=0.05)
    assert time.monotonic() - start < 5


def test_another_process_goes_on_once_the_coordinator_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        joining.wait_for_coordinator("127.0.0.1", s.getsockname()[1], 1, 2)


def test_the_watchdog_ends_the_process_with_one_line(capsys):
    left = []
    with joining.Watchdog(0.05, "the cluster did not form", leave=left.append):
        time.sleep(0.5)
    assert left == [1]
    assert capsys.readouterr().err == "pate: the cluster did not form\n"


def test_a_cancelled_watchdog_does_nothing():
    left = []
    with joining.Watchdog(0.2, "x", leave=left.append):
        pass
    time.sleep(0.4)
    assert left == []




def _launch(tmp_path, process_id: int, port: int, timeout: int = 3, count: int = 2):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "run", "--config", str(TINY), "--workdir", str(tmp_path / "run"),
         "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", str(count), "--process-id",
         str(process_id), "--join-timeout", str(timeout), "--no-progress"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ended(proc, limit: float = 60):
    out, err = proc.communicate(timeout=limit)
    return proc.returncode, (out + err).strip().splitlines()


def test_process_0_alone_stops_in_one_line_within_the_join_timeout(tmp_path):
    # Before: JAX waited 300 s, then aborted with a C++ trace (rc 134).
    start = time.monotonic()
    rc, lines = _ended(_launch(tmp_path, 0, _free_port()))
    assert rc == 1, lines
    assert lines[-1].startswith("pate: the cluster did not form within 3 s: process 0 of 2 waited at 127.0.0.1:")
    assert not any("Check failure" in line or "Traceback" in line for line in lines)
    assert time.monotonic() - start < 40
    assert not (tmp_path / "run").exists()


def test_process_1_alone_stops_in_one_line_within_the_join_timeout(tmp_path):
    # Before: a silent wait of 300 s, then a C++ abort (rc 134).
    rc, lines = _ended(_launch(tmp_path, 1, _free_port()))
    assert rc == 1, lines
    assert lines[-1].startswith("pate: process 1: no coordinator answered at 127.0.0.1:")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_second_process_0_is_refused_at_once_and_the_first_two_join(tmp_path):
    # Before: the second process 0's registration aborted the first (C++ abort, rc 134) and
    # itself waited 300 s.
    port = _free_port()
    first, other = _launch(tmp_path, 0, port, 60), _launch(tmp_path, 1, port, 60)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # process 0 listens
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        rc, lines = _ended(_launch(tmp_path / "b", 0, port, 60))
        assert rc == 1
        assert lines[-1].startswith(f"pate: process 0 cannot run the coordinator at 127.0.0.1:{port}: the port is "
                                    "already in use")
        assert first.poll() is None  # the first process 0 goes on
    finally:
        for proc in (first, other):
            proc.kill()
            proc.communicate()



# --------------------------------------------------------------------------- the roll call


def test_the_roll_call_lets_every_process_go_once_all_have_come():
    port = _free_port()
    others = [_report_in_thread(port, 4, i, 10) for i in (3, 1, 2)]
    joining.roll_call("127.0.0.1", port, 4, 10)
    assert [o.join() for o in others] == ["go"] * 3
    with socket.socket() as probe:  # the listener is closed before the answer: the port is JAX's to bind
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_second_process_of_one_id_stops_every_process_before_jax_in_one_line():
    """Two live processes given --process-id 1: JAX took the second for a restart of the first and
    aborted the first in C++ (rc 134, issue 52). The roll call names the id to every process."""
    port = _free_port()
    first = _report_in_thread(port, 3, 1, 10)
    time.sleep(0.3)
    second = _report_in_thread(port, 3, 1, 10)
    with pytest.raises(PateError, match=r"two processes were given --process-id 1 \(from 127.0.0.1:\d+ and "
                                        r"127.0.0.1:\d+\): give each process its own --process-id") as err:
        joining.roll_call("127.0.0.1", port, 3, 10)
    assert first.join() == second.join() == str(err.value)


def test_a_process_that_left_before_the_roll_call_ended_is_replaced_by_its_restart():
    port = _free_port()
    outcome: list = []
    server = threading.Thread(target=lambda: outcome.append(joining.roll_call("127.0.0.1", port, 3, 10)), daemon=True)
    server.start()
    gone, deadline = None, time.monotonic() + 10
    while gone is None and time.monotonic() < deadline:
        try:
            gone = socket.create_connection(("127.0.0.1", port), timeout=1)
        except OSError:
            time.sleep(0.05)
    gone.sendall(f"{joining.HELLO} 3 1\n".encode())
    time.sleep(0.3)
    gone.close()  # process 1 killed while it waited
    again, two = _report_in_thread(port, 3, 1, 10), _report_in_thread(port, 3, 2, 10)
    assert again.join() == two.join() == "go"
    server.join(10)
    assert outcome == [None]


def test_another_process_count_and_a_missing_process_stop_those_that_came():
    port = _free_port()
    other = _report_in_thread(port, 4, 1, 10)
    with pytest.raises(PateError, match="process 1 was given --num-processes 4 but process 0 3"):
        joining.roll_call("127.0.0.1", port, 3, 10)
    assert "was given --num-processes 4" in other.join()
    port = _free_port()
    came = _report_in_thread(port, 3, 2, 10)
    with pytest.raises(PateError, match=r"^the cluster did not form within 1 s: process 0 of 3 waited at "
                                        rf"127.0.0.1:{port} for the others, and process 1 never came"):
        joining.roll_call("127.0.0.1", port, 3, 1)
    assert came.join().startswith("the cluster did not form within 1 s")


def test_a_probe_that_says_nothing_is_ignored():
    port = _free_port()
    others = []

    def probe_then_report():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    probe.sendall(b"GET / HTTP/1.1\r\n\r\n")
                    break
            time.sleep(0.05)
        others.append(_report_in_thread(port, 2, 1, 10))

    prober = threading.Thread(target=probe_then_report, daemon=True)
    prober.start()
    joining.roll_call("127.0.0.1", port, 2, 10)
    prober.join(10)
    assert others[0].join() == "go"


def test_a_process_that_comes_after_the_roll_call_stops_without_joining():
    """What answers once the cluster formed is JAX's service, not the roll call: the late process
    (a second --process-id 1, say) stops in one line and never registers with JAX, so the first
    process of its id goes on."""
    with socket.socket() as service:  # stands for JAX's gRPC service: it answers bytes of its own
        service.bind(("127.0.0.1", 0))
        service.listen()
        port = service.getsockname()[1]

        def answer():
            conn, _ = service.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00")

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(PateError, match=f"process 1: what listens at 127.0.0.1:{port} is not process 0's roll "
                                            "call .*this process did not join"):
            joining.report_to_coordinator("127.0.0.1", port, 2, 1, 5)


@pytest.mark.slow
def test_two_processes_of_one_id_stop_every_process_in_one_line_never_a_cxx_abort(tmp_path):
    """Three real processes, ids 0, 1, 1: each ends with status 1 and the roll call's one line, within
    the join timeout, none by JAX's C++ abort (rc 134, issue 52), nothing written."""
    port = _free_port()
    procs = [_launch(tmp_path, 0, port, 60, count=3)]
    procs += [_launch(tmp_path, 1, port, 60, count=3) for _ in range(2)]
    ended = [_ended(proc, 120) for proc in procs]
    for rc, lines in ended:
        assert rc == 1, lines
        assert lines[-1].startswith("pate: two processes were given --process-id 1 (from 127.0.0.1:"), lines
        assert not any("Check failure" in line for line in lines)
    assert not (tmp_path / "run").exists()
