"""Bounds on what a lab may ask for (docs/limits.md), and the checks of a list's length
(`bound_items`) and of a set of exec strings' sizes (`bound_bytes`) against them: the lab
description (labctl/spec.py), its file (labctl/labfile.py), its values
(labctl/labvalues.py) and workloads (labctl/workloadspec.py) read them from here."""
from __future__ import annotations

from typing import Any

from workloads._protocol import records, results

MAX_PORT = 65535
# Bounds on what a lab may ask for (docs/limits.md): each keeps validation, the plan and
# every render within a second and well under 100 MB (benchmarks/validate.py measures it).
MAX_FILE_BYTES = 1024 * 1024         # a lab file; read no further than this
MAX_DEPTH = 64                       # nested mappings/sequences in a lab file
MAX_NODES = 4096                     # nodes of one replica
MAX_NPROC_PER_NODE = 1024
MAX_WORLD = records.MAX_WORLD          # ranks in the whole run: nodes * nproc_per_node * replicas (the codec says it)
MAX_TOTAL_NODES = results.MAX_TOTAL_NODES   # nodes in the whole run: nodes * replicas (the results' bound)
# The kernel refuses an exec whose one argument or environment string is over
# MAX_ARG_STRLEN (128 KiB) or whose argv + environ pass ARG_MAX (2 MiB by default;
# `getconf ARG_MAX`): a lab keeps well below both, leaving room for the caller's own
# environment and the plan's variables. Sizes are UTF-8 bytes of NAME=VALUE / each arg.
MAX_ENV_VALUE_BYTES = 32 * 1024      # one env variable, NAME=VALUE
MAX_ENV_BYTES = 64 * 1024            # all of the lab's env together
MAX_ARG_BYTES = 32 * 1024            # one script argument
MAX_ARGS_BYTES = 64 * 1024           # all script arguments together
MAX_ITEMS = 256                      # workloads, faults, tolerations, image_pull_secrets: each list


def bound_items(key: str, raw: Any, bad) -> None:
    if len(raw) > MAX_ITEMS:
        raise bad(key, raw, f"at most {MAX_ITEMS} entries (docs/limits.md)")


def bound_bytes(key: str, items: list[str] | tuple[str, ...], each: int, total: int, what: str,
                bad, names: list[str] | None = None) -> None:
    """Every string at most `each` UTF-8 bytes, all together at most `total`: below the
    kernel's MAX_ARG_STRLEN and ARG_MAX, so no node fails at exec ('Argument list too long')."""
    size = 0
    for i, item in enumerate(items):
        n = len(item.encode("utf-8", "surrogatepass"))
        if n > each:
            where = f"{key}.{names[i]}" if names else f"{key}[{i}]"
            raise bad(where, item, f"at most {each // 1024} KiB per {what} (this one: {n:,} bytes; "
                      "the kernel refuses longer exec strings; docs/limits.md)")
        size += n + 1
    if size > total:
        raise bad(key, f"{len(items)} items, {size:,} bytes", f"at most {total // 1024} KiB in all "
                  "(with the caller's environment it must stay below the kernel's ARG_MAX; "
                  "docs/limits.md)")
