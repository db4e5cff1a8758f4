"""workloads/_protocol/ports.py: a lab's ports come from below the ephemeral range,
where no connect() can be holding them as a source port."""
from __future__ import annotations

import socket

from workloads._protocol import ports


def test_the_ports_a_lab_takes_lie_below_the_ephemeral_range_and_are_free():
    first, last = ports.ephemeral_range()
    assert ports.LOWEST < first <= last
    for span in (1, 2, 5):
        for _ in range(20):
            port = ports.free_port(span)
            assert ports.LOWEST <= port and port + span - 1 < first
            assert all(ports.bindable(port + k) for k in range(span))


def test_connects_draw_the_ports_after_a_bind_zero_port_which_the_lab_no_longer_takes():
    """The CI failure's mechanism: bind(0) gives an odd port P, connect() source ports
    are even, so P + 1 (tcp:// init) is where connections land. Every port a connection
    holds is in the ephemeral range; free_port's spans never meet one."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    clients = []
    try:
        for _ in range(32):
            c = socket.socket()
            c.connect(server.getsockname())
            clients.append(c)
        held = {c.getsockname()[1] for c in clients}
        first, last = ports.ephemeral_range()
        assert all(first <= p <= last for p in held)
        for _ in range(50):
            port = ports.free_port(2)
            assert not {port, port + 1} & held
    finally:
        for c in clients:
            c.close()
        server.close()


def test_a_seeded_random_does_not_pin_the_port():
    import random

    drawn = set()
    for _ in range(5):
        random.seed(0)
        drawn.add(ports.free_port())
    assert len(drawn) > 1


def test_an_unreadable_range_falls_back_to_linux_defaults(monkeypatch, tmp_path):
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", str(tmp_path / "missing"))
    assert ports.ephemeral_range() == (32768, 60999)
    (tmp_path / "odd").write_text("nonsense\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", str(tmp_path / "odd"))
    assert ports.ephemeral_range() == (32768, 60999)


def test_no_room_below_the_range_falls_back_to_the_kernels_choice(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1025, 65535))
    port = ports.free_port(2)
    assert ports.bindable(port + 1)
