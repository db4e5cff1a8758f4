"""The checks `labctl exercise check` makes of one world size's calls (docs/exercises.md,
"What each check means"), and the grade they fill: a cell per check and world size, a
finding per failure (the line a learner reads). Pure: the calls (the runner's records)
and the ops the trace saw inside each call in, cells and findings out; reading the run
folder is labctl/exercise_grade.py's.
"""
from __future__ import annotations

import ast
import enum
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads._protocol.exercises import (P2P_OPS, SENDS, Call, Exercise, Schedule, least_received,
                                           traffic)
from workloads._protocol.ops import COLLECTIVE_CALLS

from .tables import human_bytes

MAX_FILE_BYTES = 1 << 20            # a learner's file is read (parsed) before the lab starts
MAX_NAMED = 4                       # findings of one kind named one by one
SLACK_BYTES = 0.5                   # byte counts are whole: half a byte over is over


class Check(enum.Enum):
    VALUES = "values"
    ONLY_P2P = "only p2p"
    TRAFFIC = "traffic"
    SCHEDULE = "schedule"           # the patterns' order (1F1B, a ring); blank for the collectives
    WAITS = "waits"
    DEADLINE = "deadline"
    TIME = "time"


@dataclass
class Cell:
    ok: bool | None                 # None: not graded (time) or not run
    text: str


@dataclass
class Finding:
    check: Check
    world: int | None
    text: str                       # the line a learner reads
    short: str = ""                 # the same, without the detail: the last line of `check`


@dataclass
class Grade:
    exercise: Exercise
    file: Path
    worlds: list[int]
    cells: dict[tuple[Check, int], Cell] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    interrupted: str | None = None  # the signal that stopped the lab (or the grade): not graded

    @property
    def passed(self) -> bool:
        graded = [c for c in self.cells.values() if c.ok is not None]
        return bool(graded) and all(c.ok for c in graded) and not self.findings and not self.interrupted

    def headline(self) -> str:
        """Why it failed, in one line: a signal, what ended the lab early, else the checks
        that failed."""
        if self.interrupted:
            return f"interrupted ({self.interrupted}): not graded"
        stopped = next((f for f in self.findings if f.short), None)
        return stopped.short if stopped else "failed " + ", ".join(self.failed_checks())

    def failed_checks(self) -> list[str]:
        """'values (world 3)', ... in table order."""
        out = []
        for check in Check:
            bad = [w for w in self.worlds if (c := self.cells.get((check, w))) and c.ok is False]
            if bad:
                out.append(f"{check.value} (world {', '.join(map(str, bad))})")
        if not out and self.findings:
            out.append(self.findings[0].check.value)
        return out


# ---------------------------------------------------------------- words the checks share

def ranks_text(ranks: list[int], one: str = "", many: str = "") -> str:
    """'rank 2' + one, or 'ranks 0, 1, 3' + many."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}{one}"
    return f"ranks {', '.join(map(str, ranks))}{many}"


def site(caller: str) -> str:
    path, _, line = caller.rpartition(":")
    return f"{Path(path).name}:{line}" if path else caller


def at(where: Any) -> str:
    """' at mine.py:7 (its source)' from a record's `where`, or ''."""
    if not isinstance(where, dict) or not where.get("file"):
        return ""
    source = f" ({where['source']})" if where.get("source") else ""
    return f" at {where['file']}:{where.get('line')}{source}"


def sends(ops: list[Any]) -> int:
    return sum(o.nbytes for o in ops if o.op in SENDS)


def moved(ex: Exercise, ops: list[Any]) -> int:
    """The bytes a call moved as its exercise counts them: what send/isend carried, and
    for an exercise built on collectives (moe_dispatch) what they were handed too."""
    if not ex.counts_collectives:
        return sends(ops)
    return sends(ops) + sum(o.nbytes for o in ops if o.op not in P2P_OPS)


# ---------------------------------------------------------------- values

def values(g: Grade, world: int, calls: list[Call], stopped_here: bool) -> None:
    wrong = sorted((c for c in calls if not c.ok), key=lambda c: (c.case, c.rank))
    if not wrong:
        g.cells[(Check.VALUES, world)] = Cell(None, "stopped") if stopped_here else Cell(True, "pass")
        return
    g.cells[(Check.VALUES, world)] = Cell(False, "FAIL")
    first = wrong[0]
    cases = len({c.case for c in wrong})
    total = len({c.case for c in calls})
    text = (f"values wrong at world size {world} in {cases} of {total} cases; the first: "
            f"{first.label}, rank {first.rank}: {first.detail}")
    hint = _values_hint(g.exercise, world, wrong, calls)
    g.findings.append(Finding(Check.VALUES, world, text + (f". {hint}" if hint else "")))


def _values_hint(ex: Exercise, world: int, wrong: list[Call], calls: list[Call]) -> str:
    sizes = sorted({c.size for c in wrong})
    if "you changed" in wrong[0].detail and ex.only_p2p:
        return "Work on copies (x.clone()) of the inputs"
    if "never written" in wrong[0].detail and "tensor_list" in wrong[0].detail:
        return ("Write into the tensors of the list (copy_, recv into them): replacing a list element "
                "does not reach the caller")
    divisible_passed = any(c.ok and c.size % world == 0 for c in calls)
    if ex.name in ("ring_allreduce", "column_parallel") and divisible_passed and all(s % world for s in sizes):
        return (f"Every wrong case has a size that {world} does not divide ({', '.join(map(str, sizes))}): "
                f"do your chunks cover every element? torch.chunk may give fewer than {world} chunks; "
                f"torch.tensor_split(t, {world}) gives exactly {world}")
    return ""


# ---------------------------------------------------------------- only p2p, the store, and what arrived

def only_p2p(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    if not g.exercise.only_p2p:
        g.cells[(Check.ONLY_P2P, world)] = Cell(None, "allowed")
        return
    sites: dict[tuple[str, str], None] = {}
    for ops in called.values():
        for o in ops:
            if o.op not in P2P_OPS:
                sites[(o.op, site(o.caller))] = None
    if not sites:
        g.cells[(Check.ONLY_P2P, world)] = Cell(True, "pass")
        return
    g.cells[(Check.ONLY_P2P, world)] = Cell(False, "FAIL")
    named = "; ".join(f"you called {op} at {where}" for op, where in list(sites)[:MAX_NAMED])
    if not any(f.check is Check.ONLY_P2P for f in g.findings):
        g.findings.append(Finding(Check.ONLY_P2P, world, f"{named}: {g.exercise.name} must be built from "
                                  "send/recv/isend/irecv only (a collective does the work for you)"))


STORE_SAID = "values arrived through the store"


def store(g: Grade, world: int, calls: list[Call]) -> None:
    """The store's methods a call used (the runner counts them while it runs): a value
    that went through the lab's key-value store was never sent, so the bytes the trace
    counts say nothing of it (issue 52 item 7: a decoy ring of exactly the optimal bytes
    beside it passed every check). Fails `only p2p` whatever the values."""
    used = sorted((c for c in calls if c.store is not None), key=lambda c: (c.case, c.rank))
    if not used:
        return
    g.cells[(Check.ONLY_P2P, world)] = Cell(False, "FAIL")
    if any(f.check is Check.ONLY_P2P and f.text.startswith(("values arrived through", "your function used the store"))
           for f in g.findings):
        return
    first = used[0]
    methods = sorted({name for c in used for name, _ in c.store.methods})
    head = STORE_SAID if any(c.ok for c in used) else "your function used the store"
    where = first.store.where or {}
    line = f" at {where['file']}:{where.get('line')}" if where.get("file") else ""
    called = ", ".join(f"store.{m}" for m in methods[:MAX_NAMED])
    cases = len({c.case for c in used})
    detail = (f"world size {world}: {ranks_text(sorted({c.rank for c in used}))} called {called} (the lab's "
              f"key-value store) in {cases} of {len({c.case for c in calls})} cases, the first{line}"
              f"{' (' + where['source'] + ')' if where.get('source') else ''} in {first.label}")
    way = ("send/recv/isend/irecv" if g.exercise.only_p2p
           else "torch.distributed's own ops (all_to_all_single, send/recv)")
    short = f"{head} ({detail})"
    g.findings.append(Finding(Check.ONLY_P2P, world, (
        f"{short}. The grade weighs the bytes {way} carry, never the store's: build the exchange from "
        "them (the store is the rendezvous's, not a channel between ranks)"), short))


# what a learner's file may call that does the work below torch.distributed's functions
# (the trace records those): a process group's backend and its methods, functional collectives
BELOW_TORCH = {"_get_backend": "a process group's backend, below torch.distributed",
               "_functional_collectives": "torch's functional collectives",
               "_c10d_functional": "torch's functional collectives", "c10d": "torch.ops.c10d"}
COLLECTIVES = COLLECTIVE_CALLS     # the op table's: every name a script may call that moves data in a collective
ARRIVED_FACTOR = 2          # right values with under 1/2 of what a rank must receive: not by p2p


def arrived(g: Grade, world: int, calls: list[Call], called: dict, traced: set[int]) -> None:
    """Right values need the bytes only the other ranks hold: a rank that got them with
    nothing (or far less than that) sent to it by any send the trace saw got them some
    other way — a collective below torch.distributed's functions, which the recorder
    cannot see (docs/exercises.md). A rank without any trace record is unknown, not 0."""
    if not g.exercise.only_p2p or not set(range(world)) <= traced:
        return
    if (seen := g.cells.get((Check.ONLY_P2P, world))) is not None and seen.ok is False:
        return          # a collective the trace saw did the work (or the store), and a finding named it
    got: dict[tuple[int, int], float] = {}
    for (case, _), ops in called.items():
        for o in ops:
            if o.op in SENDS and o.peer is not None:
                got[(case, o.peer)] = got.get((case, o.peer), 0.0) + o.nbytes
    nothing: list[Call] = []
    little: list[tuple[Call, float, float]] = []
    for c in sorted(calls, key=lambda c: (c.case, c.rank)):
        need = least_received(g.exercise.name, world, c.rank, c.size, c.itemsize, c.root, c.dims)
        if not c.ok or not need:
            continue
        mine = got.get((c.case, c.rank), 0.0)
        if mine == 0:
            nothing.append(c)
        elif mine * ARRIVED_FACTOR < need:
            little.append((c, mine, need))
    if not nothing and not little:
        return
    g.cells[(Check.ONLY_P2P, world)] = Cell(False, "FAIL")
    traffic_cell = g.cells.get((Check.TRAFFIC, world))
    if traffic_cell is not None and traffic_cell.ok:
        g.cells[(Check.TRAFFIC, world)] = Cell(False, f"FAIL {traffic_cell.text}")
    if nothing:
        ranks = sorted({c.rank for c in nothing})
        cases = len({c.case for c in nothing})
        head = "values arrived without any send you issued: a collective did the work"
        detail = (f"world size {world}: {ranks_text(ranks)} got right values with 0 bytes sent to "
                  f"{'it' if len(ranks) == 1 else 'them'} in {cases} of {len({c.case for c in calls})} "
                  f"cases, e.g. {nothing[0].label}")
    else:
        c, mine, need = little[0]
        head = "values arrived with far fewer bytes than any send/recv schedule needs: a collective did the work"
        detail = (f"world size {world}: {len(little)} right call{'s' if len(little) != 1 else ''}, e.g. rank "
                  f"{c.rank} in {c.label} was "
                  f"sent {human_bytes(mine)} where its values need at least {human_bytes(need)} from the others")
    seen_below = below_torch(g.file)
    text = f"{head} ({detail}{'; ' + seen_below if seen_below else ''})"
    if not any(f.check is Check.ONLY_P2P and f.text.startswith("values arrived ") for f in g.findings):
        g.findings.append(Finding(Check.ONLY_P2P, world, text + (
            ". The trace records torch.distributed's own functions only: build the exchange from "
            "send/recv/isend/irecv"), text))


def below_torch(file: Path) -> str:
    """What the learner's source calls that could do the work unseen: `x.py:9 calls
    _get_backend (a process group's backend, ...)`, or a collective by name; "" if none."""
    try:
        tree = ast.parse(file.read_bytes()[:MAX_FILE_BYTES], filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return ""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom)
                                                     and node.module else [])
            names = [part for n in names for part in n.split(".")]
        for name in names:
            if (name in BELOW_TORCH or name in COLLECTIVES) and name not in found:
                found[name] = getattr(node, "lineno", 0)
    if not found:
        return ""
    said = []
    for name, line in sorted(found.items(), key=lambda x: x[1])[:MAX_NAMED]:
        what = f" ({BELOW_TORCH[name]}, which the trace does not see)" if name in BELOW_TORCH else ""
        said.append(f"{file.name}:{line} calls {name}{what}")
    return "; ".join(said)


# ---------------------------------------------------------------- traffic

def traffic_check(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    """The bytes each call moved against the optimum: all ranks together (within what
    the chunking needs: a ring whose chunks are padded to ceil(S/n) sends that much more,
    issue 52 item 8), and each rank's call against the most one rank needs."""
    ex = g.exercise
    if ex.name == "average_gradients":
        _gradient_traffic(g, world, calls, called)
        return
    all_sent = total = allowed = 0.0
    over: list[tuple[float, int, int, Call, float, float]] = []      # calls past what one rank needs
    for c in calls:
        t = traffic(ex.name, world, c.rank, c.size, c.itemsize, c.dims)
        if t is None:
            continue
        mine = moved(ex, called.get((c.case, c.rank), []))
        all_sent += mine
        total += t.total / world                # every rank's record of a call carries its share
        allowed += t.allowed_total / world
        if mine > t.rank_most + SLACK_BYTES:
            over.append((mine / t.rank_most if t.rank_most else math.inf, -c.case, -c.rank, c, mine, t.rank_most))
    overall = all_sent / total if total else 0.0
    over_total = all_sent > allowed + SLACK_BYTES
    worst = max(over, key=lambda x: x[:3]) if over else None
    shown = f"{max(overall, worst[0] if worst else 0.0):.2f}x"
    failed = over_total or worst is not None
    padded = not failed and all_sent > total + SLACK_BYTES
    g.cells[(Check.TRAFFIC, world)] = Cell(not failed, f"FAIL {shown}" if failed else
                                           f"{shown} padded" if padded else shown)
    if over_total:
        padding = (f"; padding every chunk to the largest, as a ring on equal buffers does, adds at most "
                   f"{human_bytes(allowed - total)}" if allowed > total + SLACK_BYTES else "")
        extra = f"{human_bytes(all_sent - allowed)} was extra{' beyond that padding' if padding else ''}"
        g.findings.append(Finding(Check.TRAFFIC, world, (
            f"traffic at world size {world}: the ranks sent {overall:.1f}x the optimum "
            f"({human_bytes(all_sent)} where {human_bytes(total)} would do over {len({c.case for c in calls})} "
            f"cases; {ex.optimum}{padding}): {extra}: {_traffic_hint(ex, world, calls, called)}")))
    elif worst is not None:
        ratio, _, _, c, mine, most = worst
        g.findings.append(Finding(Check.TRAFFIC, world, (
            f"traffic at world size {world}: rank {c.rank} sent {ratio:.1f}x the most one rank needs "
            f"in {c.label} ({human_bytes(mine)} where {human_bytes(most)} would do, "
            f"{human_bytes(mine - most)} extra; {ex.optimum}): {_traffic_hint(ex, world, calls, called)}")))


def _ring_extra(world: int, calls: list[Call], called: dict) -> str:
    """What a ring all-reduce's extra bytes were, from its messages' sizes: the whole
    tensor in a message (the tutorial's unchunked ring), messages larger than a chunk of
    ceil(S/n) elements, else chunks sent more often than 2(n-1) times."""
    larger = False
    for c in calls:
        chunk = math.ceil(c.size / world) * c.itemsize
        for o in called.get((c.case, c.rank), []):
            if o.op in SENDS and o.nbytes > chunk:
                if o.nbytes >= c.size * c.itemsize:
                    return "are you passing the whole tensor around the ring instead of one chunk per step?"
                larger = True
    if larger:
        return ("are the chunks larger than ceil(S/n) elements? torch.tensor_split(t, n) gives n chunks of at "
                "most that")
    return "is a chunk sent more than once? Each rank sends 2(n-1) chunks: n-1 to reduce, n-1 to gather"


def _traffic_hint(ex: Exercise, world: int, calls: list[Call], called: dict) -> str:
    """What the extra bytes look like: the one mistake that makes them, where it shows."""
    if ex.name == "ring_allreduce":
        return _ring_extra(world, calls, called)
    return {"tree_broadcast": "is src sending to every rank itself? In a tree, every rank that has "
                              "the data passes it on",
            "naive_allreduce": "does a rank send more than its tensor (or rank 0 more than n-1 sums)?",
            "column_parallel": "does a rank send more than its own columns (the whole output, or its block "
                               "padded to d_out)? Each rank's x @ weight + bias goes to each other rank once",
            "pipeline_1f1b": "does a stage send an activation or a gradient more than once, or to a stage "
                             "that is not its neighbour?",
            "ring_attention": "does K/V go round more than n-1 hops, or to every rank at each hop?",
            "moe_dispatch": "do you pad every split to a capacity, or send a token to more than one rank? "
                            "all_to_all_single takes uneven splits (input_split_sizes, output_split_sizes): "
                            "each token goes out once and its answer comes back once",
            }.get(ex.name, "do you send a block more than once, or to yourself?")


def _gradient_traffic(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    """average_gradients: bytes handed to collectives against the gradients' bytes (each
    gradient all-reduced once). p2p bytes are shown, not graded (a hand-made all-reduce
    sends 2(n-1)/n of them, give or take the chunks of very small tensors)."""
    handed = gradients = p2p = 0.0
    worst = 0.0
    for c in calls:
        ops = called.get((c.case, c.rank), [])
        mine = sum(o.nbytes for o in ops if o.op not in P2P_OPS)
        handed += mine
        gradients += c.size * c.itemsize
        p2p += sends(ops)
        worst = max(worst, mine / max(1, c.size * c.itemsize))
    ratio = handed / gradients if gradients else 0.0
    ok = worst <= 1.0 + 1e-9
    text = f"{ratio:.2f}x" + (f", p2p {human_bytes(p2p)}" if p2p else "")
    g.cells[(Check.TRAFFIC, world)] = Cell(ok, text if ok else f"FAIL {text}")
    if not ok:
        g.findings.append(Finding(Check.TRAFFIC, world, (
            f"traffic at world size {world}: the collectives were handed {worst:.1f}x the gradients' "
            "bytes in one call: is a gradient all-reduced more than once (or the weights too)?")))


# ---------------------------------------------------------------- schedule

def schedule(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    """A pattern's order, from the trace's ops of each call: 1F1B (a stage sends only to
    its neighbours, and holds at most n - r microbatches' activations whose gradient has
    not come back), a ring (every rank sends to one neighbour, the same way round)."""
    rule = g.exercise.schedule
    if rule is None:
        return
    found = (_one_f_one_b(world, calls, called) if rule is Schedule.ONE_F_ONE_B
             else _ring_way(world, calls, called))
    if not found:
        g.cells[(Check.SCHEDULE, world)] = Cell(True, "pass")
        return
    g.cells[(Check.SCHEDULE, world)] = Cell(False, "FAIL")
    g.findings.append(Finding(Check.SCHEDULE, world, f"schedule at world size {world}: {found}"))


def _one_f_one_b(world: int, calls: list[Call], called: dict) -> str:
    for c in sorted(calls, key=lambda c: (c.case, c.rank)):
        r, ops = c.rank, called.get((c.case, c.rank), [])
        strangers = sorted({o.peer for o in ops if o.op in P2P_OPS and o.peer is not None
                            and o.peer not in (r - 1, r + 1)})
        if strangers:
            return (f"stage {r} exchanged with {ranks_text(strangers)} in {c.label}: a stage sends its "
                    f"activations to the next stage (rank {r + 1}) and its input's gradient to the one "
                    f"before (rank {r - 1}), no one else")
        if r == world - 1:
            continue
        limit = world - r
        held = most = 0
        events = sorted([(o.begin, 1) for o in ops if o.op in SENDS and o.peer == r + 1]
                        + [(o.end, -1) for o in ops if o.op not in SENDS and o.peer == r + 1 and o.end is not None])
        for _, step in events:          # a gradient back before an activation out at the same instant
            held += step
            most = max(most, held)
        if most > limit:
            return (f"stage {r} held {most} microbatches' activations at once in {c.label} (sent forward, "
                    f"their gradient not yet back), where 1F1B holds at most n - r = {limit}: that is "
                    "GPipe's order (every forward, then every backward). In 1F1B stage r runs n - r - 1 "
                    "forwards, then one forward and one backward in turn, then the backwards left")
    return ""


def _ring_way(world: int, calls: list[Call], called: dict) -> str:
    ways: dict[int, set[int]] = {}
    for c in sorted(calls, key=lambda c: (c.case, c.rank)):
        r = c.rank
        peers = sorted({o.peer for o in called.get((c.case, c.rank), []) if o.op in SENDS and o.peer is not None})
        steps = {(p - r) % world for p in peers}
        if not steps <= {1, world - 1} or len(steps) > 1:
            return (f"rank {r} sent to {ranks_text(peers)} in {c.label}: in a ring each rank sends its "
                    f"K/V block to its next rank only (rank {(r + 1) % world}), which passes on what it "
                    "received at the next hop")
        ways.setdefault(c.case, set()).update(steps)
    mixed = next((case for case, steps in ways.items() if len(steps) > 1 and world > 2), None)
    if mixed is not None:
        said = next(c.label for c in calls if c.case == mixed)
        return (f"in {said} some ranks sent to their next rank and others to their previous one: a ring "
                "goes one way round, every rank sending to r + 1 (or every rank to r - 1)")
    return ""


# ---------------------------------------------------------------- waits

def waits(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    never = []
    for c in sorted(calls, key=lambda c: (c.case, c.rank)):
        for o in called.get((c.case, c.rank), []):
            if o.end is None and o.op in ("isend", "irecv"):
                way = "to" if o.op == "isend" else "from"
                peer = f"rank {o.peer}" if o.peer is not None else "any rank"
                never.append(f"rank {c.rank}'s {o.op} {way} {peer} at {site(o.caller)} ({c.label})")
    if not never:
        g.cells[(Check.WAITS, world)] = Cell(True, "pass")
        return
    g.cells[(Check.WAITS, world)] = Cell(False, "FAIL")
    g.findings.append(Finding(Check.WAITS, world, (
        f"waits at world size {world}: {len(never)} isend/irecv never waited on, e.g. {'; '.join(never[:2])}: "
        "call wait() on every request before you return (until then the tensor may not have "
        "been sent or received)")))
