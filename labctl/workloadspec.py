"""A lab's workloads (`workloads:`): its entries (`WorkloadSpec`, read by the `Workloads`
reader of LabSpec's field), the workloads shipped (`known_workloads`), each one's options
read from its `run` signature without importing it (`workload_parameters`) and checked at
load (names, types, JSON-plain values, the workload's plugin's rules: `report_hook`)."""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import SpecError
from .fields import Reader, Reading
from .limits import MAX_ARG_BYTES, MAX_DEPTH, bound_items

DEFAULT_WORKLOADS = ("env", "p2p", "collectives", "ddp")


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


class Workloads(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> tuple[WorkloadSpec, ...]:
        return _workloads(value, lab.bad, lab.source)

    def dump(self, value: Any) -> Any:
        return [{"name": w.name, "options": dict(w.options)} if w.options else w.name for w in value]

    def from_flags(self, values: Any) -> Any:
        return [w for item in values for w in item.split(",") if w]


def known_workloads() -> list[str]:
    """Workload modules shipped in the `workloads` package, found without importing torch."""
    found = importlib.util.find_spec("workloads")
    if found is None or not found.submodule_search_locations:
        return list(DEFAULT_WORKLOADS)
    return sorted(m.name for m in pkgutil.iter_modules(found.submodule_search_locations)
                  if not m.name.startswith("_"))


@functools.lru_cache(maxsize=None)
def workload_parameters(name: str) -> dict[str, Any]:
    """A workload's options and their defaults, read from its `run` signature.

    Parsed from the source, not imported: importing a workload imports torch,
    and validation must stay instant. Defaults that are not constants map to None.
    """
    found = importlib.util.find_spec(f"workloads.{name}")
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return {}
    tree = ast.parse(Path(found.origin).read_text())
    run = next((node for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name == "run"), None)
    if run is None:
        return {}
    args = run.args.args[1:] + run.args.kwonlyargs          # skip ctx
    defaults = [None] * (len(run.args.args) - 1 - len(run.args.defaults)) + list(run.args.defaults)
    defaults += list(run.args.kw_defaults)
    params = {}
    for arg, default in zip(args, defaults):
        try:
            params[arg.arg] = eval(compile(ast.Expression(default), "<default>", "eval"),
                                   {"__builtins__": {}}) if default is not None else None
        except Exception:
            params[arg.arg] = None
    return params


def _check_options(name: str, options: Mapping[str, Any], bad, source: str) -> None:
    """Unknown option names and wrong types fail at load, not inside a running lab."""
    params = workload_parameters(name)
    where = f"workloads.{name}.options"
    for key, value in options.items():
        if key not in params:
            raise bad(where, key, f"one of {name}'s options: {', '.join(params)}" if params
                      else f"no options ({name} takes none)")
        if not _json_plain(value):     # they travel as JSON (--options): b'..' or a date would not
            raise bad(f"{where}.{key}", value, "text, numbers, booleans, null, and lists or "
                      "mappings of them")
        default = params[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            kind = {bool: "true or false", int: "an integer", float: "a number",
                    str: "a string"}[type(default)]
            raise bad(f"{where}.{key}", value, f"{kind} (default: {default!r})")
    rules = report_hook(name)
    if rules is not None:
        try:
            rules.check_options(dict(options), dict(params))
        except ValueError as exc:
            raise SpecError(f"{source}: {where}.{exc}") from None


def report_hook(name: str):
    """A workload's plugin (labctl/plugins.py: workloads/_report/<name>.py's `WORKLOAD`), if
    it has one: its option rules and lab checks (`check_options`, `check_lab`,
    `check_placement`; each a no-op when the workload has none)."""
    from .plugins import plugin

    return plugin(name)


def _json_plain(value: Any, depth: int = 0) -> bool:
    """A value JSON writes as it is (a workload option travels as JSON)."""
    if value is None or isinstance(value, (str, int, float)):
        return True
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, (list, tuple)):
        return all(_json_plain(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_plain(v, depth + 1) for k, v in value.items())
    return False


def _workloads(raw: Any, bad, source: str) -> tuple[WorkloadSpec, ...]:
    known = known_workloads()
    expected = ("a list of workload names or {name: ..., options: {...}} entries "
                "(example: workloads: [env, p2p])")
    if isinstance(raw, str):
        raw = [w for w in re.split(r"[,\s]+", raw) if w]
    if not isinstance(raw, (list, tuple)):
        raise bad("workloads", raw, expected)
    bound_items("workloads", raw, bad)
    out = []
    for item in raw:
        options: Any = {}
        if isinstance(item, str):
            name = item
        elif isinstance(item, dict) and "name" in item:
            name, options = item["name"], item.get("options") or {}
            extra = set(item) - {"name", "options"}
            if extra:
                raise bad("workloads", item, "only 'name' and 'options' in a workload entry")
        elif isinstance(item, dict) and len(item) == 1:
            (name, options), = item.items()
            options = options or {}
        else:
            raise bad("workloads", item, expected)
        if name not in known:
            raise bad("workloads", name, "one of the known workloads: " + ", ".join(known))
        if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
            raise bad(f"workloads.{name}.options", options, "a mapping of option names to values")
        _check_options(name, options, bad, source)
        out.append(WorkloadSpec(name, dict(options)))
    options_json = json.dumps({w.name: dict(w.options) for w in out}, default=str)
    if len(options_json) > MAX_ARG_BYTES:         # one argument of every worker (--options)
        raise bad("workloads", f"options of {len(options_json):,} bytes as JSON", f"at most "
                  f"{MAX_ARG_BYTES // 1024} KiB of workload options in all (they travel as one "
                  "command-line argument; docs/limits.md)")
    return tuple(out)
