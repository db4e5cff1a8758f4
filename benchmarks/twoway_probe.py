"""Probe (a lab script, 2 nodes): does a two-way exchange run at the link both ways?

Rank 0 and rank 1 send each other S bytes at once, over plain sockets, 10 times per
size and mode:

- `one`: one TCP connection carries both directions (as gloo's pair does);
- `two`: one connection per direction.

    labctl up --backend compose --nodes 2 --nproc-per-node 1 --link 100mbit \
        --script benchmarks/twoway_probe.py

Rank 0 prints `TWOWAY {json}` per (mode, size): the exchange times in ms (the slower
rank's side of each: both ranks' times are gathered).
"""
from __future__ import annotations

import json
import socket
import threading
import time

import torch.distributed as dist

SIZES = (1 << 20, 4 << 20)
ITERS = 10


def _recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if k == 0:
            raise ConnectionError("peer closed")
        got += k


def exchange(out_sock: socket.socket, in_sock: socket.socket, size: int, data: bytes, buf: bytearray) -> float:
    t = time.perf_counter()
    sender = threading.Thread(target=out_sock.sendall, args=(data[:size],))
    sender.start()
    _recv_exact(in_sock, size, buf)
    sender.join()
    return time.perf_counter() - t


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == 2, "two ranks"
    info = [None]
    listeners = []
    if rank == 0:
        for _ in range(3):
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            s.listen(1)
            listeners.append(s)
        info = [(socket.gethostbyname(socket.gethostname()), [s.getsockname()[1] for s in listeners])]
    dist.broadcast_object_list(info, 0)
    host, ports = info[0]
    socks = []
    for i in range(3):
        if rank == 0:
            socks.append(listeners[i].accept()[0])
        else:
            c = socket.create_connection((host, ports[i]))
            socks.append(c)
        socks[-1].setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # one: socks[0] both ways; two: rank 0 sends on socks[1], receives on socks[2]; rank 1 the other way
    modes = {"one": (socks[0], socks[0]),
             "two": (socks[1], socks[2]) if rank == 0 else (socks[2], socks[1])}
    data = bytes(max(SIZES))
    buf = bytearray(max(SIZES))
    for mode, (out_sock, in_sock) in modes.items():
        for size in SIZES:
            exchange(out_sock, in_sock, size, data, buf)      # warm-up
            times = []
            for _ in range(ITERS):
                dist.barrier()
                times.append(exchange(out_sock, in_sock, size, data, buf))
            both = [None, None]
            dist.all_gather_object(both, times)
            if rank == 0:
                slow = [round(max(a, b) * 1e3, 1) for a, b in zip(*both)]
                print("TWOWAY " + json.dumps({"mode": mode, "size": size, "ms": slow}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
