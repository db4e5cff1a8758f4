"""Raw TCP throughput between two nodes, over the address gloo uses (no torch).

busbw only means something next to what the link itself carries. One side
listens, the other streams zero bytes for a bounded number of bytes and
seconds, then waits for the receiver's byte count: throughput = bytes
received / (time from first byte sent to the receiver's answer).
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import time

CHUNK = 1 << 20
SIOCGIFADDR = 0x8915


def interface_address(ifname: str) -> str:
    """The IPv4 address of network interface `ifname` (Linux ioctl)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = struct.pack("256s", ifname[:15].encode())
        try:
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, packed)[20:24])
        except OSError as exc:
            raise ValueError(f"GLOO_SOCKET_IFNAME={ifname}: no IPv4 address on that "
                             f"interface ({exc.strerror})") from None


def gloo_address(env: dict | None = None) -> str:
    """Where gloo binds: GLOO_SOCKET_IFNAME's address, else what the hostname resolves to."""
    env = os.environ if env is None else env
    ifname = (env.get("GLOO_SOCKET_IFNAME") or "").split(",")[0].strip()
    if ifname:
        return interface_address(ifname)
    return socket.gethostbyname(socket.gethostname())


def listen(address: str, backlog: int = 1) -> socket.socket:
    """A listening socket on `address`, any free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen(backlog)
    return sock


def serve_once(sock: socket.socket, timeout: float = 120.0) -> int:
    """Accept one sender, count its bytes until it stops sending, answer the count."""
    sock.settimeout(timeout)
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(timeout)
        buf = bytearray(CHUNK)
        total = 0
        while True:
            got = conn.recv_into(buf)
            if not got:
                break
            total += got
        conn.sendall(struct.pack("!Q", total))
    return total


def send_for(address: str, port: int, max_bytes: int, max_seconds: float,
             timeout: float = 120.0) -> tuple[int, float]:
    """Stream up to `max_bytes` for at most `max_seconds`; return (bytes received, seconds)."""
    payload = bytes(CHUNK)
    with socket.create_connection((address, port), timeout=timeout) as conn:
        sent = 0
        started = time.perf_counter()
        while sent < max_bytes and time.perf_counter() - started < max_seconds:
            n = min(CHUNK, max_bytes - sent)
            conn.sendall(payload[:n] if n < CHUNK else payload)
            sent += n
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while len(answer) < 8:
            more = conn.recv(8 - len(answer))
            if not more:
                raise ConnectionError(f"link test: {address}:{port} closed before answering")
            answer += more
        seconds = time.perf_counter() - started
    return struct.unpack("!Q", answer)[0], seconds
