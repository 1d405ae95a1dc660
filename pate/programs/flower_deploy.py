"""The Flower deployment `pate silos run` drives (Flower 1.42: one HTTP port per SuperLink for its
Fleet, Control and Runtime APIs): the Flower App it submits, the SuperLink connection `flwr run`
reads, a local SuperLink and SuperNodes on 127.0.0.1, and the submission itself.

The Flower App is a folder holding one pyproject.toml whose components are pate's own ServerApp
and ClientApp (`pate.steps.label_silos`, `pate.baselines.fedavg_silos`): no code travels in it, every party runs the pate it has
installed. Each SuperNode is started with its silo's node config (``pate_config``: its own config
file, whose `[data]` holds its own records; ``silo``: its index; ``slice``: true when the records
are the silo's slice of that config's train split, the local deployment). Flower's own
processes (the SuperLink's ``flwr-serverapp``, the SuperNodes' ``flwr-clientapp``) are found
beside this Python (`tool`), so they run the same installation.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from analysis.core.errors import PateError

#: The components the submitted Flower App names (`pate.steps.label_silos`).
SERVER_APP = "pate.steps.label_silos:server_app"
CLIENT_APP = "pate.steps.label_silos:client_app"

_APP = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "pate-silos"
version = "1.0.0"
description = "pate: a run across silos (pate silos)"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "pate"

[tool.flwr.app.components]
serverapp = "{server}"
clientapp = "{client}"

[tool.flwr.app.config]
pate_config = ""
workdir = ""
outcome = ""
overwrite = false
"""


def write_app(folder: Path, server: str = SERVER_APP, client: str = CLIENT_APP) -> Path:
    """The Flower App folder `flwr run` submits (module docstring), naming the ServerApp `server`
    and the ClientApp `client` (``module:attribute``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(_APP.format(server=server, client=client), encoding="utf-8")
    return folder


def _toml_string(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_connection(home: Path, address: str, root_certificates: str = "") -> None:
    """``FLWR_HOME/config.toml``: the SuperLink connection ``pate`` that `flwr run` uses (TLS
    verified by `root_certificates`, or none where it is "")."""
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", 'default = "pate"', "", "[superlink.pate]", f"address = {_toml_string(address)}"]
    if root_certificates:
        lines.append(f"root-certificates = {_toml_string(str(Path(root_certificates).expanduser().resolve()))}")
    else:
        lines.append("insecure = true")
    (home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def tool(name: str) -> str:
    """Flower's command `name` beside this Python (the same installation), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise PateError(f"Flower's {name} is not installed beside {sys.executable}: pip install 'pate-jax[silos]' "
                        "(Flower needs Python >= 3.11)")
    return found


def environment(home: Path) -> dict:
    """The environment of Flower's processes: this one, with ``FLWR_HOME`` and this Python's
    folder first on PATH (the SuperLink and SuperNodes start ``flwr-serverapp`` and
    ``flwr-clientapp`` by name)."""
    env = dict(os.environ)
    env["FLWR_HOME"] = str(home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def node_config(config_path: str | Path, silo: int, sliced: bool) -> str:
    """A SuperNode's ``--node-config`` for silo `silo` (module docstring)."""
    return (f"pate_config={_toml_string(str(Path(config_path).resolve()))} silo={int(silo)} "
            f"slice={'true' if sliced else 'false'}")


class LocalDeployment:
    """A SuperLink and `silos` SuperNodes on 127.0.0.1, each a process of its own (its own
    process group) logging to `folder`; silo i reads the i-th slice of `config_path`'s train
    split. A context manager: on exit every process it started is stopped, by its group id."""

    def __init__(self, folder: Path, config_path: Path, silos: int, *, timeout: float = 60.0):
        self.folder, self.config_path, self.silos, self.timeout = Path(folder), Path(config_path), int(silos), timeout
        self.home = self.folder / "flwr-home"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.link: subprocess.Popen | None = None
        self.nodes: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def _start(self, args: list[str], log: Path) -> subprocess.Popen:
        with open(log, "wb") as out:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=environment(self.home), cwd=self.folder, start_new_session=True)

    def __enter__(self) -> "LocalDeployment":
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self.link = self._start([tool("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                                     "--host", "127.0.0.1", "--port", str(self.port)], self.folder / "superlink.log")
            deadline = time.monotonic() + self.timeout
            while not _listening(self.port):
                if self.link.poll() is not None or time.monotonic() > deadline:
                    raise PateError(f"the local SuperLink did not start on {self.address} (its log: "
                                    f"{self.folder / 'superlink.log'})")
                time.sleep(0.2)
            for i in range(self.silos):
                log = self.folder / f"supernode-{i}.log"
                self.logs.append(log)
                self.nodes.append(self._start([tool("flower-supernode"), "--insecure", "--superlink", self.address,
                                               "--port", str(free_port()), "--node-config",
                                               node_config(self.config_path, i, True)], log))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def stop(self, process: subprocess.Popen) -> None:
        """Stops `process` and its group (the ``flwr-*`` processes it started): TERM, then KILL."""
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # children left in the group

    def __exit__(self, *exc) -> None:
        for process in [*self.nodes, *([self.link] if self.link is not None else [])]:
            self.stop(process)


def submit(app: Path, home: Path, run_config: dict, log: Path, timeout: float,
           what: str = "the release across silos") -> int:
    """`flwr run APP pate --run-config ... --stream`: submits the run to the SuperLink of
    ``home``'s connection and waits for it to end (its log, Flower's and the ServerApp's, to
    `log`); its exit status. Refused in one line past `timeout` seconds."""
    pairs = " ".join(f"{k}={_toml_string(v) if isinstance(v, str) else str(v).lower()}" for k, v in run_config.items())
    with open(log, "wb") as out:
        try:
            return subprocess.run([tool("flwr"), "run", str(app), "pate", "--run-config", pairs, "--stream"],
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=environment(home), timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            raise PateError(f"{what} did not end within {timeout:g} s (Flower's log: {log})") from None
