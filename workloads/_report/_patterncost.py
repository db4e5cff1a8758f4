"""The model behind `labctl predict` on a parallelism pattern's run: one step's communication at another
world size, over the lab's links (torch-free; docs/patterns.md, "What a step costs at N
ranks").

Every pattern's ranks print the ops of their last step in the order they issued them
(`<variant>-bytes-per-step`'s `ops`: [op, group, group size, S, peer] each,
workloads/_patterns.py). That list, scaled to N ranks by the pattern's own rule, is the
step at N:

- a collective keeps its S and its group's kind: the world (fsdp, tp, zero1, cp's and ep's
  collectives) becomes N ranks, mesh's tp rows keep tp ranks and its dp columns become
  N / tp; every instance of a group runs at once (mesh: every row's all_reduce together),
  so the replay plays them together over the shared cables;
- ep's all_to_alls: the counts grow to N int64s; the tokens keep their bytes, split evenly
  (the routing at N is not known: each token to any expert alike, the formula's
  expectation); S is the ranks' mean send buffer (their tokens);
- pp: M microbatches through v N stages (stage s on rank s % N), every activation sent
  forward once the microbatch reached its stage and every gradient back once it came from
  the next stage (the last stage turns a microbatch round when its activation arrived;
  GPipe only once every one did): the step's messages with no compute between them;
- cp: each ring pass (a run of sends to the next rank, or back to the previous one) has N-1
  hops of a block of T/N tokens (S n / N), a hop once the block it passes on arrived.

Each collective is the algorithm its backend runs (gloo's, read from its source:
workloads/_protocol/algorithms.py) replayed on its ranks over the links
(workloads/_protocol/replay.py), one op after another as the ranks issue them; the step's
time is their sum. The bytes per rank are what the scaled ops send with the ring's share
(as the ranks count them), set beside the pattern's formula at N (workloads/_patternmath.py)
— the check that the scaling is the formula's; gloo's own algorithms may send more (its
reduce_scatter is an all_reduce of the whole buffer), shown beside as `gloo_bytes`.

The host plays it (labctl/reports/patterns.py: the links, `labctl predict`'s table); this
module is the model: the records read, the step scaled, the formula, one phase played.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from workloads import _patternmath as pm

PATTERNS = ("fsdp", "tp", "pp", "cp", "ep", "mesh")
BYTES = "-bytes-per-step"
REPLAY_MAX_RANKS = 64           # above: each op's closed form over the slowest link (bench's bound)
REPLAY_MAX_MESSAGES = 50_000    # a call of more messages: its closed form too (bench's bound)


@dataclass(frozen=True)
class Phase:
    """One op of the step at N ranks: a collective on every instance of its group at once
    (`groups`, global ranks; `size` its S), or a schedule of sends (pp, cp)."""
    op: str
    label: str                            # the group's name in the run (default_pg, mesh_tp ...)
    groups: tuple[tuple[int, ...], ...] = ()
    size: int = 0
    schedule: Any = None                  # p2p: an algorithms.Schedule over the N ranks

    @property
    def key(self) -> tuple:
        return (self.op, self.groups, self.size, id(self.schedule) if self.schedule is not None else None)


@dataclass
class Played:
    seconds: float = 0.0
    alpha: float = 0.0
    beta: float = 0.0
    model: str = "replay"
    sent: list[float] = field(default_factory=list)       # ring share per rank (as the ranks count)
    wire: list[int] = field(default_factory=list)         # what gloo's algorithms send per rank


# ---- the run's records --------------------------------------------------------------------
def variants(results: list[dict]) -> dict[tuple[str, str], dict[int, dict]]:
    """(pattern, variant) -> rank -> its `<variant>-bytes-per-step` record with an op list."""
    out: dict[tuple[str, str], dict[int, dict]] = {}
    for r in results:
        name = str(r.get("name", ""))
        if r.get("workload") in PATTERNS and name.endswith(BYTES) and isinstance(r.get("ops"), list) \
                and isinstance(r.get("rank"), int) and not r.get("skipped"):
            out.setdefault((r["workload"], name[:-len(BYTES)]), {})[r["rank"]] = r
    return out


def _ops(record: dict) -> list[tuple[str, str, int, int, int | None]]:
    out = []
    for row in record.get("ops") or []:
        if isinstance(row, list) and len(row) == 5 and isinstance(row[0], str) and isinstance(row[2], int) \
                and isinstance(row[3], (int, float)):
            out.append((row[0], str(row[1]), int(row[2]), int(row[3]), row[4] if isinstance(row[4], int) else None))
    return out


# ---- scaling a step to N ranks -------------------------------------------------------------
def _groups(pattern: str, label: str, size: int, n: int, big: int, record: dict) -> tuple[tuple[int, ...], ...]:
    """Every instance, at `big` ranks, of the group an op of the run ran on."""
    if pattern == "mesh" and label in ("mesh_tp", "mesh_dp"):
        tp = int(record.get("tp") or 1)
        dp = big // tp
        if label == "mesh_tp":
            return tuple(tuple(r * tp + c for c in range(tp)) for r in range(dp))
        return tuple(tuple(r * tp + c for r in range(dp)) for c in range(tp))
    if size >= n:                          # the world
        return (tuple(range(big)),)
    k = max(1, size)                       # a subgroup of the run's: consecutive blocks of its size
    return tuple(tuple(range(i, min(i + k, big))) for i in range(0, big, k))


def _collectives(pattern: str, records: dict[int, dict], n: int, big: int) -> list[Phase]:
    """The step's collectives at `big` ranks, from the lowest rank's list (S: the ranks' mean
    for an op whose S differs by rank: ep's combine)."""
    first = records[min(records)]
    mine = _ops(first)
    lists = [_ops(r) for r in records.values()]
    phases = []
    for i, (op, label, size, nbytes, _) in enumerate(mine):
        if op == "send":
            continue
        same = [lst[i][3] for lst in lists if len(lst) > i and lst[i][0] == op]
        nbytes = round(sum(same) / len(same)) if same else nbytes
        if pattern == "ep" and op == "all_to_all" and nbytes == 8 * n:
            nbytes = 8 * big                # the counts: one int64 per rank
        phases.append(Phase(op, label, _groups(pattern, label, size, n, big, first), int(nbytes)))
    return phases


def _pp_schedule(big: int, per_rank: int, microbatches: int, act: int, gpipe: bool):
    """Every activation and gradient message of one pipeline step (see the module's text)."""
    from workloads._protocol.schedules import Message, Schedule

    stages = big * per_rank
    messages: list[Message] = []
    fwd: dict[tuple[int, int], int] = {}
    for k in range(microbatches):
        for s in range(stages - 1):
            after = (fwd[(k, s - 1)],) if s > 0 else ()
            fwd[(k, s)] = len(messages)
            messages.append(Message(s % big, (s + 1) % big, act, after, k))
    last_in = [fwd[(k, stages - 2)] for k in range(microbatches)] if stages > 1 else []
    for k in range(microbatches):
        came: int | None = None
        for s in range(stages - 1, 0, -1):
            if came is None:
                after = tuple(last_in) if gpipe else (last_in[k],)
            else:
                after = (came,)
            came = len(messages)
            messages.append(Message(s % big, (s - 1) % big, act, after, microbatches + k))
    return Schedule(f"pp.{'gpipe' if gpipe else '1f1b'}", big, act, tuple(messages))


def _ring_pass(big: int, nbytes: int, step: int):
    """One ring pass of N-1 hops: at hop h each rank passes on the block it received at h-1."""
    from workloads._protocol.schedules import Message, Schedule

    messages: list[Message] = []
    prev: dict[int, int] = {}
    for hop in range(big - 1):
        now = {}
        for r in range(big):
            src = (r - step) % big          # the rank this one received from at the last hop
            now[r] = len(messages)
            messages.append(Message(r, (r + step) % big, nbytes, (prev[src],) if src in prev else (), hop))
        prev = now
    return Schedule("cp.ring_pass", big, nbytes, tuple(messages))


def phases(pattern: str, variant: str, records: dict[int, dict], n: int, big: int) -> list[Phase]:
    """The step of `variant` at `big` ranks, op by op in the order the ranks issue them."""
    first = records[min(records)]
    if pattern == "pp":
        sends = [o for o in _ops(first) if o[0] == "send"]
        act = sends[0][3] if sends else int(first.get("activation_bytes") or 0)
        sched = _pp_schedule(big, int(first.get("stages_per_rank") or 1), int(first.get("microbatches") or 1),
                             act, variant == "gpipe")
        return [Phase("send", "default_pg", size=act, schedule=sched)]
    out: list[Phase] = []
    if pattern == "cp":
        me = min(records)
        run: list[tuple[int, int]] = []              # (direction, bytes) of the sends in a row

        def close() -> None:
            if run:
                step, nbytes = run[0]
                scaled = max(1, round(nbytes * n / big))
                out.append(Phase("send", "default_pg", size=scaled, schedule=_ring_pass(big, scaled, step)))
                run.clear()
        collectives = iter(_collectives(pattern, records, n, big))
        for op, label, size, nbytes, peer in _ops(first):
            if op == "send" and peer is not None:
                step = 1 if (peer - me) % n == 1 else -1
                if run and (run[0][0] != step or len(run) == n - 1):
                    close()
                run.append((step, nbytes))
            else:
                close()
                out.append(next(collectives))
        close()
        return out
    return _collectives(pattern, records, n, big)


# ---- the formula at N, from the run's own numbers ----------------------------------------------
def formula(pattern: str, variant: str, records: dict[int, dict], n: int, big: int) -> tuple[float, str]:
    """The most bytes a rank sends per step at `big` ranks by the pattern's formula
    (docs/patterns.md), its parameters read from the run's records; and the formula's text."""
    r = records[min(records)]
    at_n = float(r.get("formula") or 0.0)
    ops = _ops(r)
    if pattern == "fsdp":
        if variant == "fsdp2":
            p = at_n / (3 * (n - 1) / n)
            return pm.fsdp2_bytes(p, big), f"3 (N-1)/N P, P = {p:,.0f} B"
        p = at_n / (2 * (n - 1) / n)
        return pm.zero1_bytes(p, big), f"2 (N-1)/N P, P = {p:,.0f} B"
    if pattern == "tp":
        act, blocks = float(r.get("activation_bytes") or 0), int(r.get("blocks") or 1)
        seq = variant.endswith("-sp")
        text = "(4L-1) (N-1)/N A" if seq else "(2L-1) 2(N-1)/N A"
        return pm.tp_bytes(act, big, blocks, seq), f"{text}, L = {blocks}, A = {act:,.0f} B"
    if pattern == "pp":
        per_rank, m = int(r.get("stages_per_rank") or 1), int(r.get("microbatches") or 1)
        act = float(r.get("activation_bytes") or 0)
        most = max(pm.pp_bytes(k, big, per_rank, m, act) for k in range(big))
        return most, f"(stages sending forward + backward) x M x A, M = {m}, A = {act:,.0f} B (a middle rank)"
    if pattern == "cp":
        block, tokens = int(r.get("block_tokens") or 1), int(r.get("tokens") or 1)
        p = float(r.get("param_bytes") or 0)
        train = variant == "train"
        ring_part = at_n - (pm.ring("all_reduce", p, n) if train else 0.0)
        d = ring_part / ((2 if train else 1) * 2 * (n - 1) * block * 4)
        got = pm.cp_bytes(big, tokens / big, d, backward=train, param_bytes=p)
        text = "2 x 2 (N-1) (T/N) d x 4 + 2(N-1)/N P" if train else "2 (N-1) (T/N) d x 4"
        return got, f"{text}, T = {tokens}, d = {d:g}" + (f", P = {p:,.0f} B" if train else "")
    if pattern == "ep":
        data = [o for o in ops if o[0] == "all_to_all" and o[3] != 8 * n]
        tokens = sum(int(x) for x in (r.get("send_splits") or [[0]])[-1])
        d = data[0][3] / (tokens * 4) if data and tokens else 0
        even = [[tokens / big] * big for _ in range(big)]
        return pm.ep_bytes(0, even, d), (f"8 (N-1) + 3 (N-1)/N T d x 4 (each token to any expert alike), "
                                               f"T = {tokens}, d = {d:g}")
    if pattern == "mesh":
        tp, act = int(r.get("tp") or 1), float(r.get("activation_bytes") or 0)
        shard, blocks = float(r.get("shard_param_bytes") or 0), len([o for o in ops if o[1] == "mesh_tp"])
        blocks = (blocks + 1) // 2
        return (pm.mesh_bytes(act, big // tp, tp, blocks, shard),
                f"(2L-1) 2(tp-1)/tp A + 2(dp-1)/dp P/tp, tp = {tp}, dp = N/tp = {big // tp}, A = {act:,.0f} B, "
                f"P/tp = {shard:,.0f} B")
    return 0.0, ""


# ---- playing the step ----------------------------------------------------------------------
def _spread(schedule, members: tuple[int, ...], big: int, offset: int):
    """A schedule over a group's ranks 0..k-1 put on its global ranks (its waits shifted by
    `offset`, the messages before it in the merged schedule)."""
    from workloads._protocol.schedules import Message

    return [Message(members[m.src], members[m.dst], m.nbytes, tuple(a + offset for a in m.after), m.step)
            for m in schedule.messages]


def _ways(phase: Phase, family: str, big: int, itemsize: int = 4):
    """The ways the phase's call may go, each a Schedule over the N ranks (every instance of
    its group at once)."""
    from workloads._protocol import algorithms as registry
    from workloads._protocol.algorithms import Schedule

    if phase.schedule is not None:
        return (phase.schedule,)
    algo = registry.algorithm(family, phase.op)
    per_group = [algo.schedules(len(g), phase.size, itemsize) for g in phase.groups]
    count = min(len(w) for w in per_group)
    out = []
    for i in range(count):
        messages: list = []
        for g, ways in zip(phase.groups, per_group):
            messages += _spread(ways[i], g, big, len(messages))
        out.append(Schedule(algo.key, big, phase.size, tuple(messages), 1.0, per_group[0][i].weight))
    return tuple(out)


def play(phase: Phase, net, family: str, big: int, cache: dict) -> Played:
    """One phase's time over `net` (replayed, or above REPLAY_MAX_RANKS the closed form over
    the slowest link), its ring share per rank and what gloo's algorithm sends per rank."""
    from workloads._protocol import algorithms as registry
    from workloads._protocol.schedules import ScheduleTooLong, at_most
    from workloads._protocol.replay import expected

    key = phase.key
    if key in cache:
        return cache[key]
    sent = [0.0] * big
    if phase.schedule is not None:
        for m in phase.schedule.messages:
            sent[m.src] += m.nbytes
    else:
        for g in phase.groups:
            share = registry.busbw_factor(phase.op, len(g)) * phase.size if len(g) > 1 else 0.0
            for r in g:
                sent[r] += share
    ways = None
    if big <= REPLAY_MAX_RANKS:
        try:        # a size a results line may name (1 TiB: gloo's ring is a million segments) is not replayed
            with at_most(REPLAY_MAX_MESSAGES):
                ways = _ways(phase, family, big)
        except ScheduleTooLong:
            ways = None
    if ways is None:
        link = net.slowest()
        if phase.schedule is not None:
            beta = max(sent) / link if math.isfinite(link) else 0.0
            steps = max(m.step for m in phase.schedule.messages) + 1 if phase.schedule.messages else 0
        else:
            algo = registry.algorithm(family, phase.op)
            k = max(len(g) for g in phase.groups)
            beta = algo.factor(k) * phase.size / link if math.isfinite(link) else 0.0
            steps = algo.steps(k)
        lat = max(net.latency.values()) if net.latency else 0.0
        why = "too many ranks" if big > REPLAY_MAX_RANKS else f"more than {REPLAY_MAX_MESSAGES:,} messages"
        found = Played(beta + steps * lat, steps * lat, beta, f"closed form ({why} to replay)", sent, [])
    else:
        got = expected(ways, net)
        wire = ways[0].sent() if ways else []
        found = Played(got.seconds, got.alpha_term, got.beta_term,
                       "replay" if got.ways == 1 else f"replay, mean of {got.ways} ways", sent, wire)
    cache[key] = found
    return found
