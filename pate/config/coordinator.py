"""The coordinator's address of a `--distributed` command (`--coordinator`,
`$JAX_COORDINATOR_ADDRESS`), checked where it enters: the CLI's option and
`pate.programs.joining` share this one rule."""

from __future__ import annotations


def coordinator_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[IPv6]:PORT`) as (host, port): a host of printable characters without
    a space, a decimal port in 1..65535.

    Raises:
      ValueError: anything else, with the reason (the CLI turns it into a usage error).
    """
    text = str(text)
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"{text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ValueError(f"{text!r} names no host: give HOST:PORT, e.g. 127.0.0.1:12345")
    if len(host) > 253 or any(c.isspace() or not c.isprintable() or c in "[]/@" for c in host):
        raise ValueError(f"{text!r}: the host must be a name or an address, without spaces")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port)
