"""Lab files a hostile but fair user writes (issue 23, cases 6-8 and the tracebacks).

Shared by tests/test_spec.py, tests/test_cli.py and benchmarks/validate.py, which
measures `labctl validate` on each. Every one must be refused with one line and
exit 2, within a second and well under 100 MB; the largest accepted ones pass.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable


def _laughs(depth: int = 9, width: int = 9) -> str:
    """The billion laughs: `depth` anchors, each `width` aliases of the one before
    (9 x 9 stands for 9^9 = 387,420,489 strings)."""
    lines = ['l0: &l0 ["lol"]']
    for i in range(1, depth + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join(f"*l{i - 1}" for _ in range(width)) + "]")
    return "\n".join(lines)


def laughs_in(field: str) -> str:
    """A lab file whose real `field` is the expansion (the anchors hide under `k8s` or
    `env`, fields labctl reads, so a loader that expands first and checks after blows up)."""
    anchors = _laughs().replace("\n", "\n    ")
    top = "l9"
    if field == "nodes":
        return f"x-anchors: &unused\n    {anchors}\nnodes: *{top}\n"
    body = {
        "script_args": f"script: train.py\nscript_args: *{top}\n",
        "env": f"env: {{BIG: *{top}}}\n",
        "k8s.annotations": f"backend: k8s\nk8s: {{annotations: {{example.com/x: *{top}}}}}\n",
        "k8s.affinity": f"backend: k8s\nk8s: {{affinity: {{nodeAffinity: *{top}}}}}\n",
    }[field]
    return f"anchors:\n    {anchors}\n{body}"


LAUGH_FIELDS = ("nodes", "script_args", "env", "k8s.annotations", "k8s.affinity")

# name -> (what the file holds, words the one-line error must carry)
HOSTILE: dict[str, tuple[Callable[[], bytes], tuple[str, ...]]] = {
    **{f"laughs-{f}": ((lambda f=f: laughs_in(f).encode()), ("aliases", "line"))
       for f in LAUGH_FIELDS},
    "comments-50MB": (lambda: b"# " + b"x" * 97 + b"\n" + (b"# " + b"x" * 97 + b"\n") * 524_288,
                      ("larger than 1024 KiB",)),
    "binary": (lambda: bytes(range(256)) * 64, ("not a text file", "NUL")),
    "utf8-then-fffe": (lambda: b"nodes: 2\nnproc_per_node: 1\n\xff\xfe", ("not UTF-8", "0xff")),
    "deep-flow-100k": (lambda: b"nodes: " + b"[" * 100_000 + b"\n", ("nest",)),
    "deep-block": (lambda: "".join("  " * i + f"k{i}:\n" for i in range(200)).encode()
                   + b"  " * 200 + b"x: 1\n", ("nested deeper than 64",)),
    "duplicate-key": (lambda: b"nodes: 2\nnproc_per_node: 1\nnodes: 3\n", ("'nodes'", "twice")),
    "env-value-200KB": (lambda: b"env: {BIG: " + b"x" * 200_000 + b"}\n", ("env.BIG", "32 KiB")),
    "env-total": (lambda: ("env: {" + ", ".join(f"V{i}: {'x' * 30_000}" for i in range(3)) + "}\n").encode(),
                  ("env", "64 KiB in all")),
    "world-4096x1024": (lambda: b"nodes: 4096\nnproc_per_node: 1024\n", ("world size", "65,536")),
    "huge-int": (lambda: b"timeout: " + b"9" * 5000 + b"\n", ("4,300 digits",)),
    "timeout-1e308": (lambda: b"timeout: 1e308\n", ("timeout", "1,000,000,000")),
}


def largest_accepted() -> bytes:
    """A lab file just under every bound at once: 1 MiB less a little, the most env,
    script args and k8s annotations accepted, the rest comments (validates)."""
    env = ", ".join(f"V{i}: {'e' * 16_000}" for i in range(4))          # 4 x 16 KB < 64 KiB
    args = ", ".join(f"'{'a' * 16_000}'" for _ in range(3))
    annotations = ", ".join(f"example.com/a{i}: {'n' * 16_000}" for i in range(3))
    text = (f"name: big\nnodes: 64\nnproc_per_node: 1024\nlauncher: direct\nbackend: k8s\n"
            f"script: train.py\nscript_args: [{args}]\nenv: {{{env}}}\n"
            f"k8s: {{annotations: {{{annotations}}}}}\n")
    filler = 1024 * 1024 - 200 - len(text)
    return text.encode() + (b"# " + b"c" * 97 + b"\n") * (filler // 100)


def write(folder: Path, name: str) -> Path:
    path = folder / f"{name}.yaml"
    data = largest_accepted() if name == "largest-accepted" else HOSTILE[name][0]()
    path.write_bytes(data)
    return path
