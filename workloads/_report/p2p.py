"""The p2p workload's plugin: each message as an arrow between ranks (the page), a row
(report.md), with the value sent and the value received (torch-free)."""
from __future__ import annotations

from workloads._protocol.plugin import Heading, Workload

from . import _views

SENDS, RECVS = ("send", "isend"), ("recv", "irecv")
CAPTIONS = {
    "ping-pong": "Blocking send/recv between ranks 0 and 1: the tensor starts at 0, each rank adds 1 "
                 "and sends it on, so rank 0 ends with 2.",
    "pair-exchange": "isend/irecv, then wait(): partners (0,1), (2,3), ... swap rank + 1 at the same time.",
    "ring-shift": "Every rank sends its rank to the right neighbour and receives from the left one "
                  "(both posted non-blocking, then waited on).",
}


def views(results: list[dict]) -> list:
    records = _views.data_records(results, "p2p")
    views: list = []
    for call in ("ping-pong", "pair-exchange", "ring-shift"):
        mine = [r for r in records if r.get("call") == call]
        if not mine:
            continue
        recvs = {}
        for r in mine:
            if r.get("op") in RECVS:
                recvs.setdefault((r.get("replica", 0), r.get("peer"), r.get("rank"), r.get("hop")), []).append(r)
        sent = []
        for r in sorted((r for r in mine if r.get("op") in SENDS),
                        key=lambda r: (r.get("replica", 0), r.get("hop") or 0, r.get("rank", 0))):
            match = recvs.get((r.get("replica", 0), r.get("rank"), r.get("peer"), r.get("hop")))
            got = match.pop(0) if match else None
            sent.append({"src": r.get("rank"), "dst": r.get("peer"), "hop": r.get("hop"),
                         "replica": r.get("replica"), "send_op": r.get("op"),
                         "recv_op": got.get("op") if got else None,
                         "sent": r.get("tensor"), "received": got.get("tensor") if got else None})
        for left in recvs.values():            # received with no send recorded (a rank that died)
            for got in left:
                sent.append({"src": got.get("peer"), "dst": got.get("rank"), "hop": got.get("hop"),
                             "replica": got.get("replica"), "send_op": None, "recv_op": got.get("op"),
                             "sent": None, "received": got.get("tensor")})
        ranks = sorted({r.get("rank") for r in mine} | {m["dst"] for m in sent if isinstance(m["dst"], int)})
        layout = "sequence" if any(m["hop"] is not None for m in sent) else "ring"
        views.append(_views.messages(call, call, ranks, sent, layout, CAPTIONS.get(call, "")))
    return [Heading("P2p: every message, sent and received"), *views] if views else []


WORKLOAD = Workload("p2p", views=views, brief=False)
