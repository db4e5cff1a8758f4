"""Layers point down only (docs/architecture.md, "Layers"): no import circle in labctl
and workloads, lazy imports and imports by name at run time included; labctl knows
workloads only through workloads._protocol (the marker lines, LAB_* names, records, the
plugin type) and loads the workloads' plugins by name in one place (labctl/plugins.py);
workloads never import labctl (a plugin describes: typed views and data; labctl/reports/
draws, writes and predicts); and the floors table in docs/architecture.md is the one the
imports give."""
from __future__ import annotations

import re

import import_graph
from conftest import REPO

DOC = REPO / "docs" / "architecture.md"
TABLE_START = "<!-- floors: tests/test_layers.py -->"
TABLE_END = "<!-- /floors -->"


def test_no_import_circle_in_labctl_and_workloads():
    graph = import_graph.imports(REPO)
    import_graph.floors(graph)          # raises on the first circle, naming it
    assert "labctl.cli" in graph and "workloads._trace" in graph


def test_a_circle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    try:
        import_graph.floors(graph)
    except ValueError as exc:
        assert "a -> b -> c -> a" in str(exc) or "b -> c -> a -> b" in str(exc) or "c -> a -> b -> c" in str(exc)
    else:
        raise AssertionError("a circle was not found")
    assert import_graph.floors({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == {"a": 2, "b": 1, "c": 3}


def test_labctl_knows_workloads_only_through_the_protocol():
    graph = import_graph.imports(REPO, run_time=False)
    reached = {(m, t) for m, targets in graph.items() if m.startswith("labctl")
               for t in targets if t.startswith("workloads")}
    assert reached, "labctl reads the marker lines and LAB_* names from workloads._protocol"
    assert {(m, t) for m, t in reached if not t.startswith("workloads._protocol")} == set()


def test_labctl_loads_the_workloads_plugins_by_name_in_one_place_and_nothing_else():
    loaded = {(m, t) for m, targets in import_graph.by_name(REPO).items() if m.startswith("labctl")
              for t in targets}
    assert {m for m, _ in loaded} == {"labctl.plugins"}
    assert {t for _, t in loaded} >= {"workloads._report.links", "workloads._report.bench"}
    assert all(t.startswith("workloads._report") for _, t in loaded)


def test_a_run_time_import_by_name_is_an_arrow_and_a_circle_through_it_is_found(tmp_path):
    for package, text in (("labctl", ""), ("workloads", ""), ("workloads/_report", "")):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text(text)
    (tmp_path / "labctl" / "loader.py").write_text(
        "import importlib\n\ndef load(name):\n    return importlib.import_module(f'workloads._report.{name}')\n")
    (tmp_path / "workloads" / "_report" / "w.py").write_text("def f():\n    from labctl import loader\n")
    graph = import_graph.imports(tmp_path)
    assert "workloads._report.w" in graph["labctl.loader"]
    try:
        import_graph.floors(graph)
    except ValueError as exc:
        assert "labctl.loader -> workloads._report.w -> labctl.loader" in str(exc) or \
            "workloads._report.w -> labctl.loader -> workloads._report.w" in str(exc)
    else:
        raise AssertionError("the circle through a run-time import was not found")


def test_workloads_never_import_labctl():
    """Not even the report plugins, lazily inside a function: the containers run workloads/
    without labctl, and a plugin that needs drawing, a file written or a prediction made
    leaves that to labctl/reports/ (issue 48)."""
    graph = import_graph.imports(REPO)
    up = sorted(f"{m} imports {t}" for m, targets in graph.items() if m.startswith("workloads")
                for t in targets if t.startswith("labctl"))
    assert up == []
    # and the protocol itself stands on nothing: labctl and every rank import it
    assert {t for m in graph if m.startswith("workloads._protocol") for t in graph[m]
            if not t.startswith("workloads._protocol")} == set()


def _documented() -> dict[str, int]:
    text = DOC.read_text()
    assert TABLE_START in text and TABLE_END in text, f"{DOC.name} has no floors table"
    table = text[text.index(TABLE_START):text.index(TABLE_END)]
    floors = {}
    for number, names in re.findall(r"^\| (\d+) \| (.+?) \|$", table, re.M):
        for name in names.split(","):
            floors["labctl." + name.strip().strip("`")] = int(number)
    return floors


def test_the_floors_table_in_architecture_md_is_the_one_the_imports_give():
    computed = {m: f for m, f in import_graph.floors(import_graph.imports(REPO, ("labctl",))).items()
                if m != "labctl"}
    documented = _documented()
    by_floor: dict[int, list[str]] = {}
    for module, floor in sorted(computed.items()):
        by_floor.setdefault(floor, []).append(module.removeprefix("labctl."))
    want = "\n".join(f"| {f} | " + ", ".join(f"`{m}`" for m in mods) + " |" for f, mods in sorted(by_floor.items()))
    assert documented == computed, "docs/architecture.md's floors table should read:\n" + want


def _private_reaches(root) -> list[str]:
    """Every `from <labctl module> import _name` and `<labctl module>._name` in labctl,
    lazy imports inside functions included."""
    import ast

    found = []
    for path in sorted((root / "labctl").rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("labctl")):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: imports {alias.name}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("labctl")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_labctl_module_imports_another_s_private_names():
    """A name with a leading underscore is its module's own: another module that needs it
    needs it public (the one rule, in the one place)."""
    assert _private_reaches(REPO) == []
