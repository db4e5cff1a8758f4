"""The import graph of labctl and workloads as the import-circles tool reads it: every
import statement, lazy ones (inside functions) and those for type checkers too, and the
imports made at run time by name: `importlib.import_module(f"workloads._report.{name}")`
imports every module whose name the f-string can spell (labctl/plugins.py)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = ("labctl", "workloads")


def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> its file (a package by its __init__.py)."""
    found = {}
    for package in packages:
        for f in (root / package).rglob("*.py"):
            parts = f.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return found


def by_name(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """labctl's module -> the modules of `packages` it imports at run time by name: an
    `import_module` call whose argument is a string, or an f-string whose text before its
    first field is a package's name and a dot (every module under that package). The
    ranks' runner (workloads/__main__.py: `workloads.<name>`, each workload) is not read:
    its workloads are run, not layered."""
    files = modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, f in files.items():
        if not name.startswith("labctl"):
            continue
        found = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not (isinstance(node, ast.Call) and node.args and (
                    getattr(node.func, "attr", None) == "import_module"
                    or getattr(node.func, "id", None) == "import_module")):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found |= {m for m in files if m == arg.value}
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                prefix = str(arg.values[0].value)
                if prefix.endswith("."):
                    found |= {m for m in files if m.startswith(prefix) or m == prefix[:-1]}
        graph[name] = found - {name}
    return graph


def imports(root: Path, packages: tuple[str, ...] = PACKAGES, run_time: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (`from a import b` names a.b when
    b is a module, a otherwise), and (`run_time`) those it imports by name (`by_name`)."""
    files = modules(root, packages)
    loaded = by_name(root, packages) if run_time else {}
    graph: dict[str, set[str]] = {}
    for name, f in files.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                head = ".".join(base + ([node.module] if node.module else []))
                targets = [head] + [f"{head}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        graph[name] = found | loaded.get(name, set())
    return graph


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """A module's floor: 1 when it imports none of the graph's modules, else one more
    than the highest floor it imports (defined only for a graph without circles)."""
    floor: dict[str, int] = {}

    def of(module: str, path: tuple[str, ...] = ()) -> int:
        if module not in floor:
            if module in path:
                raise ValueError("import circle: " + " -> ".join(path[path.index(module):] + (module,)))
            floor[module] = 1 + max((of(d, path + (module,)) for d in graph[module]), default=0)
        return floor[module]

    for module in graph:
        of(module)
    return floor
