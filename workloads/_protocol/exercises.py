"""The exercises: collectives a learner writes from point-to-point ops (docs/exercises.md).

Part of the wire protocol (standard library only): labctl lists these, writes their
starter files (`workloads/_exercises/starters/<name>.py`, data: the function to write,
its contract and hints; never an answer) and grades them; the
runner inside every rank (workloads/_exercise.py) runs them. What passes between the
two is `Config` (one environment variable, JSON) and the result records the runner
emits (`RECORD_*`, `Call`'s fields).
"""
from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import Env, ops
from .algorithms import ALGORITHMS, Traffic

ENV = Env.EXERCISE                # the runner's Config, JSON; set by labctl for `exercise check`
WORKLOAD = "exercise"               # the `workload` field of every result record the runner emits
SIZES = (1, 5, 12, 1001)            # elements: 1 is below any world, 5 and 1001 divide by none of 2, 3, 4
WORLDS = (4, 3, 2)                  # world sizes every check covers (those up to the lab's), largest first
DEFAULT_DEADLINE_S = 5.0
DEFAULT_SEED = 2024
FLOAT_RTOL = 1e-5                   # floats: |got - expected| <= FLOAT_ATOL + FLOAT_RTOL * |expected|
FLOAT_ATOL = 1e-5
TIME_ELEMENTS = 1 << 20             # the timed size (float32: 4 MiB; gathers and all-to-all split it by the world)
TIME_REPEATS = 5
P2P_OPS = ops.ONE_PEER_P2P        # the point-to-point ops a learner's function may call (the op table's)
SENDS = ops.SENDS                   # ... those that send

# result records (each also carries workload=WORKLOAD, rank, ok, and the entry of
# Config.exercises it is about with its exercise name; all but RECORD_LOAD the world size)
RECORD_CALL = "call"                # one call of the learner's function: values and its time window
RECORD_TIME = "time"                # the timed size: the function against torch's collective
RECORD_DEADLINE = "deadline"        # a call did not return in time (the rank exits right after)
RECORD_RAISED = "raised"            # the function raised (the rank exits right after)
RECORD_LOAD = "load"                # the file could not be imported, or has no such function
RECORD_DONE = "done"                # this rank ran every world it belongs to
RECORD_THREADS = "threads"          # threads the function left running at the rank's end (not a check:
                                    # the lab's end judges them; a non-daemon one keeps the rank alive)


@dataclass(frozen=True)
class Exercise:
    name: str
    function: str                   # what the learner writes, at the top level of the file
    signature: str
    summary: str
    reference: str                  # what the values are compared with: torch's collective, or one process
    algorithm: str | None           # its algorithm in workloads/_protocol/algorithms.py (the optimum)
    only_p2p: bool = True           # collectives are mistakes (average_gradients, moe_dispatch: the point)
    timed: bool = True              # raced against torch's collective at 4 MiB (a pattern has no one collective)
    schedule: "Schedule | None" = None  # an order its messages must keep (1F1B, a ring), read from the trace
    pattern_optimum: str = ""       # a pattern's traffic optimum in words (no algorithm declares it)

    @property
    def optimum(self) -> str:
        """The traffic the algorithm needs, in words (declared with the algorithm)."""
        if self.algorithm:
            return ALGORITHMS[self.algorithm].optimum
        return self.pattern_optimum or "each gradient all-reduced once"

    @property
    def counts_collectives(self) -> bool:
        """Traffic counts the bytes handed to collectives too (moe_dispatch's all_to_all_single);
        else only what send/isend carried."""
        return not self.only_p2p

    @property
    def starter(self) -> Path:
        return Path(__file__).parents[1] / "_exercises" / "starters" / f"{self.name}.py"


class Schedule(enum.Enum):
    """An order a pattern's messages must keep, checked on the trace's ops of each call."""
    ONE_F_ONE_B = "1F1B"            # a stage talks to its neighbours only, and holds at most n - r activations
    RING = "ring"                   # every rank sends to one neighbour, the same way round on every rank


EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    Exercise("ring_allreduce", "allreduce", "allreduce(send, recv)",
             "the tutorial's exercise: a ring all-reduce, chunked (reduce-scatter, then all-gather)",
             "all_reduce", "p2p.ring_allreduce"),
    Exercise("naive_allreduce", "allreduce", "allreduce(send, recv)",
             "all-reduce through rank 0 (everyone sends to rank 0, it sends the sum back): the baseline",
             "all_reduce", "p2p.naive_allreduce"),
    Exercise("tree_broadcast", "broadcast", "broadcast(tensor, src)",
             "binomial-tree broadcast from any rank: every rank that has the data passes it on",
             "broadcast", "p2p.tree_broadcast"),
    Exercise("ring_allgather", "all_gather", "all_gather(tensor_list, tensor)",
             "ring all-gather: n-1 steps, each rank passes on what it received last",
             "all_gather", "p2p.ring_allgather"),
    Exercise("reduce_scatter", "reduce_scatter", "reduce_scatter(output, input_list)",
             "reduce-scatter: rank r ends with the sum of every rank's input_list[r]",
             "reduce_scatter", "p2p.reduce_scatter"),
    Exercise("all_to_all", "all_to_all", "all_to_all(output_list, input_list)",
             "all-to-all from p2p: rank r's input_list[j] lands in rank j's output_list[r]",
             "all_to_all", "p2p.all_to_all"),
    Exercise("average_gradients", "average_gradients", "average_gradients(model)",
             "the seeds' gradient averaging for a data-parallel step: gradients equal DDP's",
             "DistributedDataParallel", None, only_p2p=False),
    # the parallelism patterns (docs/patterns.md), each checked against one process
    Exercise("column_parallel", "column_parallel_linear", "column_parallel_linear(x, weight, bias, out)",
             "tensor parallel: each rank holds a column slice of W, computes its columns of x @ W + b, "
             "and the ranks all-gather the output from send/recv",
             "x @ W + b in one process", None, timed=False,
             pattern_optimum="(n-1) x T x d_out/n per rank: each rank's columns to every other rank "
                             "(T tokens; blocks rounded up)"),
    Exercise("pipeline_1f1b", "pipeline_1f1b", "pipeline_1f1b(stage, microbatches, targets)",
             "pipeline parallel: stage r on rank r, activations forward and gradients back by send/recv, "
             "one forward one backward (1F1B)",
             "the whole chain in one process", None, timed=False, schedule=Schedule.ONE_F_ONE_B,
             pattern_optimum="M x A forward and M x A back per middle rank (A: one microbatch's activation)"),
    Exercise("ring_attention", "ring_attention", "ring_attention(q, k, v, out)",
             "context parallel: each rank's K/V block goes round the ring with isend/irecv, the softmax "
             "merged online",
             "softmax(Q K^T / sqrt(d)) V in one process", None, timed=False, schedule=Schedule.RING,
             pattern_optimum="2 (n-1) x t x d per rank: a K and a V block on each of n-1 hops"),
    Exercise("moe_dispatch", "moe_dispatch", "moe_dispatch(tokens, expert_of, expert, out)",
             "expert parallel: each token to its expert's rank with all_to_all_single of uneven splits, "
             "the expert's answers combined back in order",
             "every expert in one process", None, only_p2p=False, timed=False,
             pattern_optimum="per rank n counts, then its tokens once out and the tokens it received once back"),
)}
PATTERNS = ("column_parallel", "pipeline_1f1b", "ring_attention", "moe_dispatch")


@dataclass(frozen=True)
class Config:
    """What labctl tells the runner (env LAB_EXERCISE): which functions of which files,
    the deadline of one call, the seed of the inputs, whether to time."""
    exercises: tuple[tuple[str, str | None], ...]     # (exercise, file as the node sees it; None: the script)
    deadline: float = DEFAULT_DEADLINE_S
    seed: int = DEFAULT_SEED
    time: bool = True

    def to_json(self) -> str:
        return json.dumps({"exercises": [list(e) for e in self.exercises], "deadline": self.deadline,
                           "seed": self.seed, "time": self.time}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Config":
        data = json.loads(text)
        return cls(exercises=tuple((str(n), p) for n, p in data["exercises"]),
                   deadline=float(data.get("deadline", DEFAULT_DEADLINE_S)),
                   seed=int(data.get("seed", DEFAULT_SEED)), time=bool(data.get("time", True)))


KINDS = (("int64", "arange"), ("int64", "random"), ("float32", "normal"))   # dtype and input of a case
GRADIENT_SEEDS = ("batch 1", "batch 2")                                    # average_gradients: 2 per width


@dataclass(frozen=True)
class Case:
    """One call's inputs, made from the seed on every rank alike: `size` elements (for
    average_gradients the model's hidden width), `root` the src of a broadcast; a
    pattern's shapes by name in `dims` (tokens, width, microbatches ...), its label `text`."""
    index: int
    dtype: str
    kind: str
    size: int
    root: int | None = None
    width: bool = False             # `size` is an MLP's hidden width (average_gradients)
    dims: tuple[tuple[str, int], ...] = ()
    text: str = ""

    @property
    def label(self) -> str:
        if self.text:
            return self.text
        if self.width:
            return f"{self.dtype} MLP of width {self.size}, {self.kind}"
        root = f", src {self.root}" if self.root is not None else ""
        return f"{self.dtype} {self.kind}, {self.size} element{'s' if self.size != 1 else ''}{root}"

    def dim(self, name: str) -> int:
        return dict(self.dims)[name]


TOKENS, D_IN = 3, 4                                         # column_parallel: x is TOKENS x D_IN, d_out varies
PIPELINE_ROWS = 2                                           # pipeline_1f1b: a microbatch's rows
PIPELINE_CASES = ((1, 5), (3, 1), (4, 12), (8, 5))          # (microbatches, width): 8 > n - r shows GPipe
RING_CASES = ((1, 4), (3, 8), (5, 1), (16, 8))              # ring_attention: (tokens a rank, head dim)
MOE_CASES = ((5, 4, "random"), (12, 8, "random"), (1, 4, "random"),
             (12, 4, "one expert"), (6, 3, "own expert"))   # (tokens a rank, width, routing)


def _pattern_cases(exercise: str) -> list[Case]:
    if exercise == "column_parallel":
        return [Case(i, dtype, kind, d_out, dims=(("tokens", TOKENS), ("d_in", D_IN), ("d_out", d_out)),
                     text=f"{dtype} {kind}, {TOKENS} tokens x {D_IN} -> {d_out} feature{'s' if d_out != 1 else ''}")
                for i, (d_out, (dtype, kind)) in enumerate((d, k) for d in SIZES for k in KINDS)]
    if exercise == "pipeline_1f1b":
        return [Case(i, "float32", "normal", PIPELINE_ROWS * width,
                     dims=(("microbatches", m), ("rows", PIPELINE_ROWS), ("width", width)),
                     text=f"float32, {m} microbatch{'es' if m != 1 else ''} of {PIPELINE_ROWS} x {width}")
                for i, (m, width) in enumerate(PIPELINE_CASES)]
    if exercise == "ring_attention":
        return [Case(i, "float32", "normal", t * d, dims=(("tokens", t), ("head_dim", d)),
                     text=f"float32, {t} token{'s' if t != 1 else ''} a rank, head dim {d}")
                for i, (t, d) in enumerate(RING_CASES)]
    return [Case(i, "float32", routing, t, dims=(("tokens", t), ("width", d)),
                 text=f"float32 {routing} routing, {t} token{'s' if t != 1 else ''} a rank of width {d}")
            for i, (t, d, routing) in enumerate(MOE_CASES)]


def cases(exercise: str, world: int) -> list[Case]:
    """Every call one world size makes of an exercise: each dtype and input at each size
    (a broadcast's src goes round the ranks); MLP widths and two seeds for gradients."""
    if exercise == "average_gradients":
        return [Case(i, "float32", kind, width, width=True) for i, (width, kind) in
                enumerate((w, k) for w in SIZES for k in GRADIENT_SEEDS)]
    if exercise in PATTERNS:
        return _pattern_cases(exercise)
    found: list[Case] = []
    for size in SIZES:
        for dtype, kind in KINDS:
            i = len(found)
            found.append(Case(i, dtype, kind, size, i % world if exercise == "tree_broadcast" else None))
    return found


def describe_cases(exercise: str) -> str:
    if exercise == "average_gradients":
        return (f"{len(cases(exercise, 2))} steps per world size: an MLP 4 -> width -> 3 of widths "
                f"{', '.join(map(str, SIZES))}, two batches each (every rank its own)")
    if exercise == "column_parallel":
        return (f"{len(cases(exercise, 2))} calls per world size: x of {TOKENS} tokens x {D_IN}, "
                f"{', '.join(f'{d} {k}' for d, k in KINDS)}, d_out {', '.join(map(str, SIZES))} "
                "(column blocks of torch.tensor_split: uneven where n does not divide d_out)")
    if exercise == "pipeline_1f1b":
        return (f"{len(PIPELINE_CASES)} steps per world size: a Linear + Tanh stage a rank, microbatches of "
                f"{PIPELINE_ROWS} rows, (microbatches, width) "
                f"{', '.join(f'({m}, {w})' for m, w in PIPELINE_CASES)}")
    if exercise == "ring_attention":
        return (f"{len(RING_CASES)} calls per world size: one head, (tokens a rank, head dim) "
                f"{', '.join(f'({t}, {d})' for t, d in RING_CASES)}, not causal")
    if exercise == "moe_dispatch":
        return (f"{len(MOE_CASES)} calls per world size: a Linear expert a rank, (tokens a rank, width, routing) "
                f"{', '.join(f'({t}, {d}, {r})' for t, d, r in MOE_CASES)}")
    kinds = ", ".join(f"{d} {k}" for d, k in KINDS)
    return (f"{len(cases(exercise, 2))} calls per world size: {kinds} at sizes "
            f"{', '.join(map(str, SIZES))} elements" + (", src going round the ranks"
                                                         if exercise == "tree_broadcast" else ""))


def worlds(largest: int) -> list[int]:
    """The world sizes a lab of `largest` ranks checks, largest first: ranks leave as the
    world shrinks, so no rank ever waits for a later world."""
    return sorted({largest, *(w for w in WORLDS if w <= largest)}, reverse=True)


def traffic(exercise: str, world: int, rank: int, size: int, itemsize: int,
            dims: dict[str, int] | None = None) -> Traffic | None:
    """What one call of the algorithm sends, for a case of `size` elements of `itemsize`
    bytes (the S of Exercise.optimum), as its algorithm declares it
    (workloads/_protocol/algorithms.py); a pattern's from the case's `dims` (what the rank
    recorded of its call). None: not graded by bytes sent (average_gradients)."""
    if exercise in PATTERNS:
        return _pattern_traffic(exercise, world, rank, itemsize, dims or {})
    ex = EXERCISES.get(exercise)
    algo = ALGORITHMS[ex.algorithm] if ex is not None and ex.algorithm else None
    return algo.traffic(world, rank, size, itemsize) if algo is not None and algo.traffic else None


def column_block(columns: int, world: int, rank: int) -> int:
    """Rank `rank`'s columns of `columns` split as torch.tensor_split splits them."""
    return columns // world + (1 if rank < columns % world else 0)


def _pattern_traffic(exercise: str, n: int, rank: int, item: int, dims: dict[str, int]) -> Traffic:
    if exercise == "column_parallel":           # an all-gather of uneven column blocks
        tokens, columns = dims["tokens"], dims["d_out"]
        widest = math.ceil(columns / n)
        return Traffic((n - 1) * tokens * widest * item, (n - 1) * tokens * columns * item,
                       n * (n - 1) * tokens * widest * item)
    if exercise == "pipeline_1f1b":             # M activations forward, M gradients back
        a = dims["rows"] * dims["width"] * item
        m = dims["microbatches"]
        return Traffic(((rank < n - 1) + (rank > 0)) * m * a, 2 * (n - 1) * m * a)
    if exercise == "ring_attention":            # a K and a V block on each of n - 1 hops
        block = 2 * (n - 1) * dims["tokens"] * dims["head_dim"] * item
        return Traffic(block, n * block)
    # moe_dispatch: the counts (n int64), the tokens once out, the tokens received once back
    width = dims["width"] * item
    return Traffic(n * 8 + (dims["tokens"] + dims["received"]) * width,
                   n * n * 8 + 2 * dims["all_tokens"] * width)


def least_received(exercise: str, world: int, rank: int, size: int, itemsize: int,
                   root: int | None = None, dims: dict[str, int] | None = None) -> float | None:
    """The bytes `rank` must receive in one call, by whatever p2p schedule: the data it
    lacks, which only the other ranks hold (its own result depends on their inputs; a
    relay or a reduction on the way does not shrink it). Right values with less than
    this arrived some other way (a collective the trace does not see). None: not graded
    so (average_gradients, where collectives are the point)."""
    n, s = world, size * itemsize
    if exercise in ("ring_allreduce", "naive_allreduce", "reduce_scatter"):
        return float(s)                 # the others' sum (of its block): S bytes it cannot make
    if exercise == "tree_broadcast":
        return 0.0 if rank == root else float(s)
    if exercise in ("ring_allgather", "all_to_all"):
        return float((n - 1) * s)       # n - 1 blocks held by n - 1 other ranks
    d = dims or {}
    if exercise == "column_parallel":   # the other ranks' columns: only their weights make them
        return float(d["tokens"] * (d["d_out"] - column_block(d["d_out"], n, rank)) * itemsize)
    if exercise == "pipeline_1f1b":     # activations from the stage before, gradients from the one after
        return float(((rank > 0) + (rank < n - 1)) * d["microbatches"] * d["rows"] * d["width"] * itemsize)
    if exercise == "ring_attention":    # every other rank's K and V
        return float(2 * (n - 1) * d["tokens"] * d["head_dim"] * itemsize)
    return None


@dataclass
class Call:
    """One RECORD_CALL as labctl reads it back (results.jsonl)."""
    entry: int                      # which of Config.exercises
    exercise: str
    world: int
    rank: int
    case: int
    label: str                      # "int64 arange, 5 elements"
    ok: bool
    detail: str
    begin_ns: int                   # the rank's own clock around the call (time.time_ns)
    end_ns: int
    size: int
    itemsize: int
    root: int | None = None         # a broadcast's src
    dims: dict[str, int] = field(default_factory=dict)     # a pattern's shapes, as the rank made them
    store: "StoreUse | None" = None  # the store's methods the call used (none: None)

    @classmethod
    def from_record(cls, r: dict) -> "Call":
        dims = r.get("dims") if isinstance(r.get("dims"), dict) else {}
        return cls(entry=int(r["entry"]), exercise=r["exercise"], world=int(r["world"]), rank=int(r["rank"]),
                   case=int(r["case"]), label=str(r.get("label", "")), ok=bool(r["ok"]),
                   detail=str(r.get("detail", "")), begin_ns=int(r["begin_ns"]),
                   end_ns=int(r["end_ns"]), size=int(r.get("size", 0)),
                   itemsize=int(r.get("itemsize", 0)),
                   root=int(r["root"]) if r.get("root") is not None else None,
                   dims={str(k): int(v) for k, v in dims.items()},
                   store=StoreUse.from_record(r.get("store")))


# the Store methods a learner's function could carry values through (every data method of
# torch's Store; its subclasses, TCPStore's client included, inherit them)
STORE_METHODS = ("set", "get", "add", "append", "compare_set", "multi_get", "multi_set", "wait", "check",
                 "delete_key", "num_keys", "list_keys", "queue_push", "queue_pop", "queue_len")


@dataclass(frozen=True)
class StoreUse:
    """The store's methods one call used (the runner watches them while the call runs):
    each method's count, and the first call's line in the learner's file."""
    methods: tuple[tuple[str, int], ...]
    where: dict[str, Any] | None = None     # {"file", "line", "source"}

    def to_record(self) -> dict[str, Any]:
        return {"methods": dict(self.methods), "where": self.where}

    @classmethod
    def from_record(cls, value: Any) -> "StoreUse | None":
        if not isinstance(value, dict) or not isinstance(value.get("methods"), dict) or not value["methods"]:
            return None
        where = value.get("where") if isinstance(value.get("where"), dict) else None
        return cls(tuple((str(k), int(v)) for k, v in value["methods"].items()), where)

