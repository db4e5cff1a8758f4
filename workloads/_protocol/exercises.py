"""The exercises: collectives a learner writes from point-to-point ops (docs/exercises.md).

Part of the wire protocol (standard library only): labctl lists these, writes their
starter files (`workloads/_exercises/starters/<name>.py`, data: the function to write,
its contract and hints; never an answer) and grades them; the
runner inside every rank (workloads/_exercise.py) runs them. What passes between the
two is `Config` (one environment variable, JSON) and the result records the runner
emits (`RECORD_*`, `Call`'s fields).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
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
    reference: str                  # torch's collective the values (and the time) are compared with
    algorithm: str | None           # its algorithm in workloads/_protocol/algorithms.py (the optimum)
    only_p2p: bool = True           # collectives are mistakes (average_gradients: they are the point)

    @property
    def optimum(self) -> str:
        """The traffic the algorithm needs, in words (declared with the algorithm)."""
        return ALGORITHMS[self.algorithm].optimum if self.algorithm else "each gradient all-reduced once"

    @property
    def starter(self) -> Path:
        return Path(__file__).parents[1] / "_exercises" / "starters" / f"{self.name}.py"


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
)}


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
    average_gradients the model's hidden width), `root` the src of a broadcast."""
    index: int
    dtype: str
    kind: str
    size: int
    root: int | None = None
    width: bool = False             # `size` is an MLP's hidden width (average_gradients)

    @property
    def label(self) -> str:
        if self.width:
            return f"{self.dtype} MLP of width {self.size}, {self.kind}"
        root = f", src {self.root}" if self.root is not None else ""
        return f"{self.dtype} {self.kind}, {self.size} element{'s' if self.size != 1 else ''}{root}"


def cases(exercise: str, world: int) -> list[Case]:
    """Every call one world size makes of an exercise: each dtype and input at each size
    (a broadcast's src goes round the ranks); MLP widths and two seeds for gradients."""
    if exercise == "average_gradients":
        return [Case(i, "float32", kind, width, width=True) for i, (width, kind) in
                enumerate((w, k) for w in SIZES for k in GRADIENT_SEEDS)]
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
    kinds = ", ".join(f"{d} {k}" for d, k in KINDS)
    return (f"{len(cases(exercise, 2))} calls per world size: {kinds} at sizes "
            f"{', '.join(map(str, SIZES))} elements" + (", src going round the ranks"
                                                         if exercise == "tree_broadcast" else ""))


def worlds(largest: int) -> list[int]:
    """The world sizes a lab of `largest` ranks checks, largest first: ranks leave as the
    world shrinks, so no rank ever waits for a later world."""
    return sorted({largest, *(w for w in WORLDS if w <= largest)}, reverse=True)


def traffic(exercise: str, world: int, rank: int, size: int, itemsize: int) -> Traffic | None:
    """What one call of the algorithm sends, for a case of `size` elements of `itemsize`
    bytes (the S of Exercise.optimum), as its algorithm declares it
    (workloads/_protocol/algorithms.py). None: not graded by bytes sent (average_gradients)."""
    ex = EXERCISES.get(exercise)
    algo = ALGORITHMS[ex.algorithm] if ex is not None and ex.algorithm else None
    return algo.traffic(world, rank, size, itemsize) if algo is not None and algo.traffic else None


def least_received(exercise: str, world: int, rank: int, size: int, itemsize: int,
                   root: int | None = None) -> float | None:
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

    @classmethod
    def from_record(cls, r: dict) -> "Call":
        return cls(entry=int(r["entry"]), exercise=r["exercise"], world=int(r["world"]), rank=int(r["rank"]),
                   case=int(r["case"]), label=str(r.get("label", "")), ok=bool(r["ok"]),
                   detail=str(r.get("detail", "")), begin_ns=int(r["begin_ns"]),
                   end_ns=int(r["end_ns"]), size=int(r.get("size", 0)),
                   itemsize=int(r.get("itemsize", 0)),
                   root=int(r["root"]) if r.get("root") is not None else None)
