"""`python -m workloads._replica_store --port P`: the replica store of a lab with replicas.

One TCPStore server that every replica's workers reach through
REPLICA_STORE_ADDR:REPLICA_STORE_PORT. Replicas are independent torchrun jobs,
each with its own rendezvous store; this one is what they share, so that
cross-replica process groups (one `PrefixStore` per group) can meet without
any replica's rank 0 having to host it — and without dying with it.

It is started before the first worker and stopped after the last one (by the
backend, with SIGTERM); `--lifetime` makes it exit on its own should nobody
stop it (a `docker compose up` by hand, a forgotten Job).
"""
from __future__ import annotations

import argparse
import datetime
import signal
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads._replica_store", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="port to listen on (every interface)")
    parser.add_argument("--lifetime", type=float, default=0.0,
                        help="exit after this many seconds (0: only on SIGTERM/SIGINT)")
    args = parser.parse_args(argv)

    import torch.distributed as dist

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stop.append("SIGINT"))
    store = dist.TCPStore("0.0.0.0", args.port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=max(args.lifetime, 60.0)))
    print(f"replica store: listening on port {store.port}", flush=True)
    started = time.monotonic()
    while not stop and (args.lifetime <= 0 or time.monotonic() - started < args.lifetime):
        time.sleep(0.2)
    why = stop[0] if stop else f"lifetime of {args.lifetime:g}s over"
    print(f"replica store: {why}; {store.num_keys()} key(s) at exit", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
