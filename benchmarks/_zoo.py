"""The diagnosis zoo's pure half (benchmarks/zoo.py runs the cases): a case's expected
answer read from its header, each tool's answer read from what the tool wrote, and the
score of one against the other. Standard library only, no I/O but what a caller hands in.

A case's header (benchmarks/zoo/README.md) is one or more comment lines at the top:

    # zoo: culprit=1 op=all_reduce line=12|14 kind=mismatch nproc=3 timeout=30
    # zoo: about=rank 1 calls broadcast where the others call all_reduce

`a|b` lists the answers that count as right. An answer is the rank(s) a tool blames, the
op it names and the line it points at; `score` gives a verdict on each.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

HEADER = re.compile(r"^#\s*zoo:\s*(.*)$")
KEYS = {"culprit", "op", "line", "kind", "backend", "nodes", "nproc", "timeout", "faults",
        "pg_timeout", "links", "about", "source"}
SPLITS = ("dev", "heldout")             # heldout: the cases in zoo/heldout/, scored only at the end
BACKENDS = ("local", "compose")

# torch.distributed functions a user calls (what a traceback's line or a tool may name)
DIST_CALLS = (
    "all_gather_into_tensor", "all_gather_object", "all_gather", "all_reduce", "all_to_all_single",
    "all_to_all", "barrier", "batch_isend_irecv", "broadcast_object_list", "broadcast", "gather_object",
    "gather", "init_process_group", "irecv", "isend", "monitored_barrier", "new_group", "recv_object_list",
    "recv", "reduce_scatter_tensor", "reduce_scatter", "reduce", "scatter_object_list", "scatter",
    "send_object_list", "send",
)


# the calls that make a case a collective case (its bug in a collective, where torch's
# dumps hold every rank's part): the collectives of torch.distributed and of the
# ProcessGroup, the object collectives, and DTensor's calls, which issue collectives
COLLECTIVE_CALLS = frozenset({
    "all_gather_into_tensor", "all_gather_object", "all_gather", "all_gather_single", "all_reduce",
    "all_reduce_coalesced", "all_to_all_single", "all_to_all", "barrier", "broadcast_object_list", "broadcast",
    "gather_object", "gather", "monitored_barrier", "reduce_scatter_tensor", "reduce_scatter", "reduce",
    "scatter_object_list", "scatter", "allreduce", "allgather", "alltoall", "alltoall_base",
    "distribute_tensor", "full_tensor", "redistribute", "from_local",
})
DUMPED_KINDS = ("mismatch", "hang", "deadlock")   # failures that leave the others waiting: the dumps' cases

class BadCase(ValueError):
    """A case that cannot be scored: no header, or a header that does not parse (one line)."""


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    culprits: frozenset[int]            # empty: nobody is to blame (a passing control)
    ops: frozenset[str]
    lines: frozenset[int]
    kind: str
    backend: str = "local"
    nodes: int = 1
    nproc: int = 2
    timeout: float = 40.0
    faults: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    pg_timeout: float | None = None
    about: str = ""
    source: str = ""                    # the report the case comes from (a URL, or where to find it)
    together: bool = False              # culprit=a+b: all of these must be blamed (a|b: any of them)
    split: str = "dev"                  # heldout: zoo/heldout/, written apart from the fixes

    @property
    def world(self) -> int:
        return self.nodes * self.nproc

    @property
    def blameless(self) -> bool:
        return not self.culprits

    @property
    def collective(self) -> bool:
        """A collective case (issue 50's bar for torch's dumps): a hang or mismatch whose op
        is a collective call; a p2p, store or group life-cycle bug is not one."""
        return self.kind in DUMPED_KINDS and bool(self.ops & COLLECTIVE_CALLS)


def _ints(value: str, key: str, name: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in value.split("|") if x != "")
    except ValueError:
        raise BadCase(f"{name}: zoo header: {key}={value!r} is not a number or numbers joined by |") from None


def parse_header(text: str, name: str, path: Path | None = None) -> Case:
    """The case's expected answer from its `# zoo:` lines (at the top, before any code)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = HEADER.match(line.strip())
        if not m:
            if line.strip() and not line.lstrip().startswith("#"):
                break                   # the header ends where the code begins
            continue
        rest = m.group(1).strip()
        if rest.startswith(("about=", "source=")):
            key, _, value = rest.partition("=")
            fields[key] = (fields.get(key, "") + " " + value.strip()).strip()
            continue
        for token in rest.split():
            key, sep, value = token.partition("=")
            if not sep or key not in KEYS:
                raise BadCase(f"{name}: zoo header: unknown or malformed {token!r} "
                              f"(keys: {', '.join(sorted(KEYS))})")
            if key in ("faults", "links"):
                fields[key] = (fields.get(key, "") + " " + value).strip()
            else:
                fields[key] = value
    if not fields:
        raise BadCase(f"{name}: no '# zoo: culprit=... op=... line=...' header at the top of the file")
    for key in ("culprit", "kind"):
        if key not in fields:
            raise BadCase(f"{name}: zoo header: no {key}=")
    blameless = fields["culprit"] == "none"
    if not blameless and not ("op" in fields and "line" in fields):
        raise BadCase(f"{name}: zoo header: a case with a culprit needs op= and line=")
    backend = fields.get("backend", "local")
    if backend not in BACKENDS:
        raise BadCase(f"{name}: zoo header: backend={backend!r} (one of {', '.join(BACKENDS)})")
    try:
        nodes, nproc = int(fields.get("nodes", 1)), int(fields.get("nproc", 2))
        timeout = float(fields.get("timeout", 40))
        pg_timeout = float(fields["pg_timeout"]) if "pg_timeout" in fields else None
    except ValueError as exc:
        raise BadCase(f"{name}: zoo header: {exc}") from None
    together = "+" in fields["culprit"]
    if together and "|" in fields["culprit"]:
        raise BadCase(f"{name}: zoo header: culprit={fields['culprit']!r} mixes + (all of) and | (any of)")
    culprits = frozenset() if blameless else _ints(fields["culprit"].replace("+", "|"), "culprit", name)
    if any(not 0 <= r < nodes * nproc for r in culprits):
        raise BadCase(f"{name}: zoo header: culprit {fields['culprit']} is not a rank of "
                      f"{nodes} x {nproc}")
    return Case(name=name, path=path or Path(f"{name}.py"), culprits=culprits,
                ops=frozenset(x for x in fields.get("op", "").split("|") if x),
                lines=_ints(fields.get("line", ""), "line", name), kind=fields["kind"], backend=backend,
                nodes=nodes, nproc=nproc, timeout=timeout,
                faults=tuple(fields.get("faults", "").split()), links=tuple(fields.get("links", "").split()),
                pg_timeout=pg_timeout, about=fields.get("about", ""), source=fields.get("source", ""),
                together=together, split="heldout" if path is not None and path.parent.name == "heldout" else "dev")


def load_case(path: Path) -> Case:
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadCase(f"{path.stem}: cannot read {path}: {exc.strerror or exc}") from None
    return parse_header(text, path.stem, path.resolve())


# ---------------------------------------------------------------- answers and verdicts

@dataclass(frozen=True)
class Answer:
    """What one tool said: the rank(s) it blames, the op it names, the line it points at
    (in the case's script), its words, and when it said it (seconds after the fault)."""
    culprits: tuple[int, ...] = ()
    op: str | None = None
    line: int | None = None
    text: str = ""
    seconds: float | None = None

    @property
    def said(self) -> tuple[tuple[int, ...], str | None, int | None]:
        return self.culprits, self.op, self.line

    @property
    def silent(self) -> bool:
        return not self.culprits and self.op is None and self.line is None


@dataclass(frozen=True)
class Verdict:
    culprit: bool
    op: bool
    line: bool

    @property
    def all(self) -> bool:
        return self.culprit and self.op and self.line

    def marks(self) -> str:
        return "".join("✓" if ok else "✗" for ok in (self.culprit, self.op, self.line))


# the same call under torch 2.13's two names (all_gather_into_tensor is all_gather_single, deprecated)
ALIASES = {"all_gather_single": "all_gather_into_tensor", "reduce_scatter_single": "reduce_scatter_tensor"}


def score(case: Case, answer: Answer) -> Verdict:
    """Strict. Right culprit: the ranks blamed are some of the expected ones (`a|b`: a tool
    that blames both ranks of a two-rank deadlock where either may be it is right; one that
    blames a rank outside the set, such as the one that waits, is not), or exactly all of
    them (`a+b`: two guilty ranks, both to be named). Right op: the op named is one of the expected. Right
    line: the line pointed at is one of the expected. A blameless case (culprit=none) is
    right on all three only when the tool blames nobody."""
    if case.blameless:
        quiet = not answer.culprits
        return Verdict(quiet, quiet, quiet)
    blamed = set(answer.culprits)
    right = blamed == case.culprits if case.together else bool(blamed) and blamed <= case.culprits
    return Verdict(culprit=right,
                   op=answer.op is not None and bool({answer.op, answer.op.rpartition(".")[2],
                                                       ALIASES.get(answer.op, "")} & set(case.ops)),
                   line=answer.line is not None and answer.line in case.lines)


# ---------------------------------------------------------------- the lab's answer (status.json)

_WHERE = re.compile(r"(?P<file>[^\s:()]+\.py):(?P<line>\d+)")
_OP_WORD = re.compile(r"^(?:in|after) (?P<op>[A-Za-z_]\w*)")


def _line_in(text: str | None, script: str) -> int | None:
    """The first `file:line` in `text` whose file is the case's script."""
    for m in _WHERE.finditer(text or ""):
        if Path(m.group("file")).name == script:
            return int(m.group("line"))
    return None


def _caller_line(caller: Any, script: str) -> int | None:
    if isinstance(caller, str) and ":" in caller:
        file, _, line = caller.rpartition(":")
        if Path(file).name == script and line.isdigit():
            return int(line)
    return None


def lab_answer(status: Mapping[str, Any], script: str, seconds: float | None = None) -> Answer:
    """The lab's answer from status.json: first_failure's rank (or ranks), the op and the
    line it names (its `op` and `line` where it has them; else the stuck collective, the
    rank's last op, its error's line, its stack); for a run that passed, the trace's
    straggler per rank (`trace.straggler`) or a mismatch it saw (`trace.mismatch`)."""
    first = status.get("first_failure") or {}
    trace = status.get("trace") or {}
    if not first:
        for key in ("mismatch", "hazard", "straggler"):
            found = trace.get(key)
            if isinstance(found, dict) and found.get("ranks"):
                return Answer(tuple(found["ranks"]), found.get("op"), _caller_line(found.get("caller"), script),
                              found.get("text", ""), seconds)
        return Answer(text=status.get("message", "") or "passed", seconds=seconds)
    culprits: tuple[int, ...] = ()
    if isinstance(first.get("rank"), int):
        culprits = (first["rank"],)
    elif first.get("ranks"):
        culprits = tuple(first["ranks"])
    collective = first.get("collective") or {}
    if not culprits and collective.get("ranks"):
        culprits = tuple(collective["ranks"])
    op = first.get("op") or collective.get("op")
    line = _caller_line(first.get("caller"), script) or _caller_line(collective.get("caller"), script)
    who = culprits[0] if len(culprits) == 1 else None
    stuck = [s for s in collective.get("stuck") or [] if isinstance(s, dict)]
    mine = next((s for s in stuck if who is not None and s.get("rank") == who), stuck[0] if stuck else None)
    if op is None and mine is not None:
        calls = mine.get("calls") or {}
        call = calls.get(str(who)) if who is not None else None
        if call:
            op = call.get("api") or call.get("op")
            line = line or _caller_line(call.get("caller"), script)
        elif mine.get("mismatch") and who is not None and str(who) in (mine.get("last") or {}):
            op = (mine["last"][str(who)].split() + ["", ""])[1] or None
        else:
            op = mine.get("op")
    last_op = first.get("last_op")
    if op is None and last_op and (m := _OP_WORD.match(last_op)):
        op = m.group("op")
    error = first.get("error") or {}
    if line is None and error.get("file") and Path(error["file"]).name == script:
        line = error.get("line")
    if line is None and last_op:
        line = _line_in(last_op, script)
    stack = (status.get("stacks") or {}).get(str(who)) if who is not None else None
    if line is None and stack and Path(stack.get("file") or "").name == script:
        line = stack.get("line")
    if op is None:
        for text in collective.get("p2p") or []:
            m = re.search(r"\b(send|recv|isend|irecv)\b", text)
            if m:
                op = m.group(1)
                line = line or _line_in(text, script)
                break
    return Answer(culprits, op, line, status.get("message", ""), seconds)


# ---------------------------------------------------------------- torchrun's output (plain, or DETAIL)

_RANKED = re.compile(r"^\[(?:default)?rank(?P<rank>\d+)\]:(?P<rest>.*)$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_DETAIL = re.compile(r"Detected mismatch between collectives on ranks\. Rank (?P<me>\d+) is running collective: .*?, but Rank (?P<other>\d+) is running collective")
_MONITORED = re.compile(r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier")
_ROOT = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(?P<rank>\d+)", re.S)
_OPTYPE = {"ALLREDUCE": "all_reduce", "BROADCAST": "broadcast", "REDUCE": "reduce", "ALLGATHER": "all_gather",
           "GATHER": "gather", "SCATTER": "scatter", "REDUCE_SCATTER": "reduce_scatter", "BARRIER": "barrier",
           "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single", "_ALLGATHER_BASE": "all_gather_into_tensor",
           "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor"}


def live_answer(status: Mapping[str, Any] | None, script: str) -> Answer:
    """The live watcher's answer (status.json's `live`, said while the lab hung): its rank
    (or ranks), op and line; its seconds are from the hang's start (the first rank's last
    op) to the answer. Silent when it named no hang, or when the hang it named ended."""
    live = (status or {}).get("live")
    if not isinstance(live, dict) or live.get("resumed_at") is not None:
        return Answer(text="no live hang named")
    culprits: tuple[int, ...] = (live["rank"],) if isinstance(live.get("rank"), int) else \
        tuple(r for r in live.get("ranks") or [] if isinstance(r, int))
    line = _caller_line(live.get("caller"), script) or _line_in(live.get("text"), script)
    seconds = live["made_at"] - live["since"] if isinstance(live.get("made_at"), (int, float)) and \
        isinstance(live.get("since"), (int, float)) else None
    return Answer(culprits, live.get("op"), line, str(live.get("text", "")), seconds)


@dataclass
class Traceback:
    frames: list[tuple[str, int, str, str]] = field(default_factory=list)   # file, line, function, source
    exception: str = ""


def tracebacks(output: str) -> dict[int, list[Traceback]]:
    """Every `[rankN]:`-prefixed traceback in torchrun's output, per rank."""
    found: dict[int, list[Traceback]] = {}
    current: dict[int, Traceback] = {}
    for raw in output.splitlines():
        m = _RANKED.match(raw)
        if not m:
            continue
        rank, rest = int(m.group("rank")), m.group("rest")
        rest = rest[1:] if rest.startswith(" ") else rest      # "[rank1]: " then the line as printed
        if rest.strip().startswith("Traceback (most recent call last)"):
            current[rank] = Traceback()
            found.setdefault(rank, []).append(current[rank])
            continue
        tb = current.get(rank)
        if tb is None:
            continue
        frame = _FRAME.match(rest)
        if frame:
            tb.frames.append((frame.group("file"), int(frame.group("line")), frame.group("func"), ""))
        elif rest.startswith("    ") and tb.frames and not tb.frames[-1][3]:
            f = tb.frames[-1]
            tb.frames[-1] = (f[0], f[1], f[2], rest.strip())
        elif rest.strip() and not rest.startswith(" "):
            tb.exception = rest.strip()
            del current[rank]
    return found


def _called(source: str) -> str | None:
    """The torch.distributed function a line of the user's code calls."""
    for m in re.finditer(r"(?:^|[.\s=(])(?P<name>[a-z_]+)\(", source):
        if m.group("name") in DIST_CALLS:
            return m.group("name")
    return None


def _traceback_op(tb: Traceback, script: str) -> str | None:
    user = [i for i, f in enumerate(tb.frames) if Path(f[0]).name == script]
    if user:
        called = _called(tb.frames[user[-1]][3])
        if called:
            return called
    after = tb.frames[user[-1] + 1:] if user else tb.frames
    for file, _, func, _ in after:
        if "torch/distributed" in file and func in DIST_CALLS:
            return func
    m = re.search(r"OpType=(\w+)", tb.exception)
    if m and m.group(1) in _OPTYPE:
        return _OPTYPE[m.group(1)]
    m = re.search(r"for (send|recv) operation", tb.exception)
    return m.group(1) if m else None


def _traceback_line(tb: Traceback, script: str) -> int | None:
    lines = [f[1] for f in tb.frames if Path(f[0]).name == script]
    return lines[-1] if lines else None


def torchrun_answer(output: str, script: str, seconds: float | None = None) -> Answer:
    """What a user reads off torchrun's output (plain, or with TORCH_DISTRIBUTED_DEBUG=DETAIL):
    the rank DETAIL's mismatch messages point at (the rank most named as running something
    else; with two ranks, both), else the ranks its monitored barrier says failed to pass
    it (as DETAIL says them: ranks of the group), else the root cause torchrun's failure
    summary names; the
    op and line of that rank's traceback (the op: the torch.distributed call on its line,
    else another rank's traceback's); nothing for a run that was killed at its timeout
    saying nothing."""
    tbs = tracebacks(output)
    votes: dict[int, int] = {}
    for rank_tbs in tbs.values():
        for tb in rank_tbs:
            m = _DETAIL.search(tb.exception)
            if m:
                votes[int(m.group("other"))] = votes.get(int(m.group("other")), 0) + 1
    culprits: tuple[int, ...] = ()
    barrier = _MONITORED.search(output)
    if votes:
        top = max(votes.values())
        culprits = tuple(sorted(r for r, n in votes.items() if n == top))
    elif barrier:                       # DETAIL's monitored barrier names who never came (group ranks)
        culprits = tuple(sorted(int(x) for x in barrier.group("ranks").split(",")))
    else:
        m = _ROOT.search(output)
        if m:
            culprits = (int(m.group("rank")),)
    op = line = None
    text = ""
    for rank in culprits:
        for tb in tbs.get(rank, []):
            op = op or _traceback_op(tb, script)
            line = line if line is not None else _traceback_line(tb, script)
            text = text or f"rank {rank}: {tb.exception}"
    if culprits and op is None:
        for rank_tbs in tbs.values():
            for tb in rank_tbs:
                op = op or _traceback_op(tb, script)
    if culprits and not text:
        text = f"rank {culprits[0]} failed (torchrun's root cause), no traceback"
    return Answer(culprits, op, line, text[:300], seconds)


# ---------------------------------------------------------------- torchfrtrace's output

_FR_BLOCK = re.compile(r"^(Not all ranks joining collective, sequence number: \d+|Collective sequence number: \d+ "
                       r"has errors|Input/output mismatch in the collective sequence number: \d+)", re.M)


def frtrace_answer(output: str, script: str, seconds: float | None = None) -> Answer:
    """torchfrtrace's first problem: its culprit ("Culprit rank R", else the missing
    ranks), the op (the culprit's collective type in a type mismatch, else the
    collective's), and a line of the script in the collective's stack trace if it printed
    one."""
    starts = [m.start() for m in _FR_BLOCK.finditer(output)]
    if not starts:
        return Answer(text="no problem found" if output.strip() else "", seconds=seconds)
    block = output[starts[0]:starts[1] if len(starts) > 1 else len(output)]
    culprits: tuple[int, ...] = ()
    m = re.search(r"Culprit rank (\d+)", block)
    if m:
        culprits = (int(m.group(1)),)
    else:
        m = re.search(r"missing ranks: \{([\d, ]+)\}", block)
        if m:
            culprits = tuple(sorted(int(x) for x in m.group(1).split(",")))
    op = None
    m = re.search(r"found collective type: '(\w+)'", block)
    if m:
        op = m.group(1)
    else:
        m = re.search(r"collective: (?:\w+:)?(\w+)", block)
        op = m.group(1) if m else None
    line = None
    for m in re.finditer(r"([^\s:]+\.py):(\d+)", block):
        if Path(m.group(1)).name == script:
            line = int(m.group(2))
            break
    first_line = block.strip().splitlines()[0]
    said = re.search(r"error msg: (.*)", block)
    return Answer(culprits, op, line, f"{first_line}; {said.group(1) if said else ''}".strip("; ")[:300], seconds)


# ---------------------------------------------------------------- labctl diagnose on torch's dumps

def dumps_answer(output: str, script: str, seconds: float | None = None) -> Answer:
    """`labctl diagnose DIR --format json` on the run's torch dumps: its culprit (or every
    rank it names when no one rank is), its op and its line in the case's script; its one
    error line (exit 2) or nothing found: silent."""
    start = output.find("{")                # past whatever else reached the terminal first
    try:
        said = json.loads(output[start:]) if start >= 0 else None
    except ValueError:
        said = None
    if said is None:
        return Answer(text=output.strip().splitlines()[0][:300] if output.strip() else "", seconds=seconds)
    if not isinstance(said, dict):
        return Answer(text="not an object", seconds=seconds)
    culprits = tuple(r for r in said.get("culprits") or [] if type(r) is int)
    if not culprits and type(said.get("rank")) is int:
        culprits = (said["rank"],)
    op = said.get("op") if isinstance(said.get("op"), str) else None
    return Answer(culprits, op, _caller_line(said.get("line"), script), str(said.get("text") or "nothing stuck")[:300],
                  seconds)


# ---------------------------------------------------------------- torch's debug server

def stack_lines(dump: str, script: str, world: int, marker: str = "=== Rank ") -> dict[int, int | None]:
    """Each rank's innermost line of the case's script in a stacks dump of torch's debug
    server (`=== Rank R ===` sections, faulthandler's threads: the main thread last, each
    thread's innermost frame first): None where the rank's section is missing or its main
    thread is not in the script (it answered nothing, or is outside it)."""
    out: dict[int, int | None] = {}
    stem = re.escape(script)
    for rank in range(world):
        parts = re.split(rf"{re.escape(marker)}{rank}\b", dump)
        if len(parts) < 2:
            out[rank] = None
            continue
        section = re.split(rf"{re.escape(marker)}\d+", parts[1])[0]
        threads = [t for t in re.split(r"\n(?=Thread 0x|Current thread 0x)", section) if script in t]
        found = re.findall(rf'{stem}", line (\d+)', threads[-1]) if threads else []
        out[rank] = int(found[0]) if found else None
    return out


def debug_server_answer(lines: Mapping[int, int | None], source: str, seconds: float | None = None) -> Answer:
    """What a user reads off the debug server's stacks page: where every rank is, and the
    odd one out — the ranks at a line most ranks are not at (or with no stack in the
    script: gone, or elsewhere), with the torch.distributed call on that line. Every rank
    at one line, or no line most share: no culprit (the page shows where, not who)."""
    if not lines:
        return Answer(text="no stacks dump", seconds=seconds)
    counts: dict[int | None, int] = {}
    for line in lines.values():
        counts[line] = counts.get(line, 0) + 1
    common = max(counts, key=lambda k: (counts[k], k is not None))
    said = ", ".join(f"rank {r}: {'-' if l is None else l}" for r, l in sorted(lines.items()))
    if counts[common] * 2 <= len(lines) or len(counts) == 1:
        return Answer(text=said, seconds=seconds)
    odd = tuple(sorted(r for r, l in lines.items() if l != common))
    odd_lines = {lines[r] for r in odd} - {None}
    line = next(iter(odd_lines)) if len(odd_lines) == 1 else None
    text_lines = source.splitlines()
    op = _called(text_lines[line - 1]) if line is not None and 0 < line <= len(text_lines) else None
    return Answer(odd, op, line, said, seconds)
