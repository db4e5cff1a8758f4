"""Which free port a lab takes on one host: below the kernel's ephemeral range.

Linux hands `bind(port 0)` odd ports of the ephemeral range and `connect()` even
ones (measured here: 100 of 100 connects got an even source port). A rendezvous
port taken with bind(0) is odd, so the port after it (tcp:// init, a replica's
store) is even, the very ports every gloo pair's connect() draws from: a rank of
this or any other lab on the host could hold it as a source port before rank 0
listens there ("Address already in use", the preflight's init_port failing in
CI). Ports below the ephemeral range are only ever taken by a bind, which is
what torchrun's default 29500 relies on too.
"""
from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 20000                       # below: the registered services people run
TRIES = 200
_DRAW = random.SystemRandom()      # a rank's random.seed() must not pin the port


def ephemeral_range() -> tuple[int, int]:
    """The kernel's (first, last) ephemeral port; Linux's default where unreadable."""
    try:
        with open(EPHEMERAL_RANGE, encoding="ascii") as f:
            first, last = (int(x) for x in f.read().split()[:2])
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(span: int = 1, host: str = "127.0.0.1") -> int:
    """The first of `span` consecutive ports free on `host` now, drawn at random below
    the ephemeral range (another process may still bind one before the lab does: rare,
    and said by the lab's own check). Falls back to the kernel's choice where the
    ephemeral range leaves no room below it."""
    first, _ = ephemeral_range()
    top = first - span                  # the span ends below the ephemeral range
    if top > LOWEST:
        for _ in range(TRIES):
            port = _DRAW.randint(LOWEST, top)
            if all(bindable(port + k, host) for k in range(span)):
                return port
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port + span <= 65536 and all(bindable(port + k, host) for k in range(1, span)):
            return port
    raise OSError(f"no {span} consecutive free ports found on {host}")
