"""The lab's wire protocol: what labctl and the ranks say to each other, spelled once.

Standard library only, and nothing here runs: both sides import it (the ranks'
workloads, recorder and wrapper in every node; labctl's plan, node guard, log
reader, trace merge and report), and labctl imports nothing else from
`workloads` (the workloads' report hooks are plugins it looks up by name).
`exercises` beside this module is the exercises' part: their catalogue and what
`labctl exercise check` and the runner in each rank pass each other.

- **Environment** labctl sets for every node (`Env`): the lab's settings a
  rank reads.
- **Marked lines** a rank writes into its log stream: a log stream is the one
  thing every backend collects (a local file, `docker logs`, `kubectl logs`),
  so results, trace records and joins travel in it behind a marker.
- **Records**: the names and bounds of what a rank reports.
- **The node log's own lines**: what the launchers (torchrun's prefix, the
  local node guard, the containers' direct wrapper) add around the ranks'
  output, which labctl's log reader parses.
- **One line** (`one_line`): how an error is said where one line is all there is
  room for, on either side (a check's detail, a progress line, status.json).
"""
from __future__ import annotations


class Env:
    """Environment variables labctl sets for every node (and reserves: a lab's `env:`
    may not set them, labctl/labvalues.py RESERVED_ENV)."""
    RUN_ID = "LAB_RUN_ID"              # the run; also how labctl finds a local run's processes
    NAME = "LAB_NAME"
    NODES = "LAB_NODES"
    NPROC_PER_NODE = "LAB_NPROC_PER_NODE"
    WORLD_SIZE = "LAB_WORLD_SIZE"
    LAUNCHER = "LAB_LAUNCHER"          # torchrun | direct
    DIST_BACKEND = "LAB_DIST_BACKEND"  # gloo | nccl | auto
    INIT_METHOD = "LAB_INIT_METHOD"    # the URL a worker joins through (env://, tcp://, file://)
    SHARED_DIR = "LAB_SHARED_DIR"      # a directory every node sees (file:// init, checkpoints)
    PG_TIMEOUT = "LAB_PG_TIMEOUT"      # seconds a collective waits for its peers
    TRACE = "LAB_TRACE"                # "1": record every op (workloads/_trace/)
    TRACE_DIR = "LAB_TRACE_DIR"        # a folder labctl reads itself: the ranks' record files go there
    FAULT_CLOCK = "LAB_FAULT_CLOCK"    # "join": each rank says when it joined (JOINED_MARKER)
    FR_DUMP_DIR = "LAB_FR_DUMP_DIR"    # where ranks dump Flight Recorder pickles at a hang
    FR_DUMP_STACKS = "LAB_FR_DUMP_STACKS"  # "1": those pickles carry each entry's Python stack (as torch's own do)
    EXERCISE = "LAB_EXERCISE"          # `labctl exercise check`: the runner's config, JSON
    LINKS = "LAB_LINKS"                # the lab's configured links (labctl/links.py), JSON
    DEBUG_SERVER = "LAB_DEBUG_SERVER"  # torch's debug server: its frontend's port on rank 0
    DEBUG_SERVER_INTERVAL = "LAB_DEBUG_SERVER_INTERVAL"  # seconds between its dumps
    DEBUG_SERVER_DIR = "LAB_DEBUG_SERVER_DIR"  # where rank 0's frontend writes them (local, compose)


# The run folder's subfolder where local ranks write their record files (LAB_TRACE_DIR):
# rank-<RANK>.<t0 ns, 19 digits>.<pid>.<segment, 4 digits>.rec, each the marked lines below,
# NUL-padded past the last one written (workloads/_trace/sink.py, _FileSink).
RECORDS_SUBDIR = "records"
# The run folder's subfolder where torch's debug server writes its dumps (LAB_DEBUG_SERVER_DIR).
DEBUG_SERVER_SUBDIR = "debug-server"
# What torch's debug server frontend imports besides torch, each entry's names being
# alternatives (its fetches use aiohttp, else requests): the ranks check it before they start
# it (workloads/_debugserver.py), the local backend's preflight in the ranks' own Python.
DEBUG_SERVER_NEEDS = (("jinja2",), ("tabulate",), ("aiohttp", "requests"))


def debug_server_missing() -> list[str]:
    """The modules of DEBUG_SERVER_NEEDS this Python lacks (the first name of each entry)."""
    import importlib.util

    return [names[0] for names in DEBUG_SERVER_NEEDS
            if not any(importlib.util.find_spec(n) is not None for n in names)]
RECORD_FILE_SUFFIX = ".rec"
# A record file is one segment of this many bytes (sparse until written; the finish trims its
# unwritten tail): the recorder maps it whole, and labctl reads no .rec file larger.
RECORD_SEGMENT_BYTES = 8 << 20

# ---- marked lines in a rank's output ---------------------------------------------------
MARKER_PREFIX = "@@labctl-"                 # every marked line starts so
RESULT_MARKER = MARKER_PREFIX + "result "   # one JSON result record (a check or a measurement)
JOINED_MARKER = MARKER_PREFIX + "joined "   # {"rank", "pid"}: this rank's process group is up
TRACE_MARKER = MARKER_PREFIX + "trace "     # one trace record (docs/trace.md)
FR_MARKER = MARKER_PREFIX + "fr "           # a Flight Recorder entry, written at a dump
# the stack dump that follows was written at SIGTERM (the rank being stopped), not asked for:
# a stack labctl asked for (at a deadline, `labctl stacks`) is the one to show where it exists
SIGTERM_STACKS_MARKER = MARKER_PREFIX + "stacks-at-sigterm"

# ---- records ---------------------------------------------------------------------------
WORKLOAD_DONE = "workload_done"    # the record every rank writes after each workload
# A result record named DATA is not a check: it says what a rank held before and after an
# op, so the run's page can draw the data moving. At most DATA_ELEMENTS values per tensor
# and DATA_TENSORS tensors per list are written.
DATA = "data"
DATA_ELEMENTS = 16
DATA_TENSORS = 16
CLOCK_ROUNDS = 8                   # ping-pongs behind a trace "C" record (clock offset to rank 0)
# torch elastic's error file (TORCHELASTIC_ERROR_FILE), as workloads/_record.py writes it:
# torch's own layout plus LABCTL_KEY: {"rank", "local_rank", "time_ns", "py_callstack"}.
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
LABCTL_KEY = "labctl"

# ---- the node log's own lines ----------------------------------------------------------
# torchrun prefixes every worker line so (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE); the
# direct launchers add the same prefix themselves.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
# A direct-mode worker's end, written by the local node guard and the containers' wrapper:
# f"{EXIT_LINE_PREFIX}{rank} exited with code {code} at {epoch seconds}".
EXIT_LINE_PREFIX = "labctl: rank "
# torchrun's agent waits at its exit barrier once its workers ended 0 (and says so only
# at LOGLEVEL=INFO): the local node guard, stopping it there, says so; its node had finished.
AGENT_IDLE_LINE = ("labctl: the agent had no workers left when labctl stopped it "
                   "(torchrun waits at its exit barrier once its workers ended)")
# A line longer than this is ended there in a node log (and read in pieces of this size):
# memory stays flat whatever a rank prints.
MAX_PIECE = 1 << 20


# ---- one line ------------------------------------------------------------------------
def one_line(text: object, limit: int | None = None) -> str:
    """`text` (a message, an exception) as one line: every run of whitespace one space, at
    most `limit` characters, control characters shown (`visible`); an exception with no
    message says its type's name."""
    line = visible(" ".join(str("" if text is None else text).split()))[:limit]
    return line or (type(text).__name__ if isinstance(text, BaseException) else "")


# Control characters (C0, DEL, C1) and the bidi overrides and isolates, written out: a
# rank's text (an exception, a check's detail, a record's name) reaches the reader's
# terminal and report.md, where ESC [ 2 J clears the screen and U+202E reverses a line.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SHOWN = {**{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
          **{ord(c): f"\\u{ord(c):04x}" for c in _BIDI}}


def visible(text: object, keep: str = "") -> str:
    """`text` as a terminal or Markdown may show it: every control character written as
    its escape (ESC as `\\x1b`, BEL as `\\x07`, U+202E as `\\u202e`), so a rank's text
    cannot move the cursor, recolour, retitle or clear the reader's terminal. `keep`: the
    ones to leave (a report keeps its own newlines). Logs (`labctl logs`) stay raw."""
    table = _SHOWN if not keep else {k: v for k, v in _SHOWN.items() if chr(k) not in keep}
    return str("" if text is None else text).translate(table)
