"""A collective that writes into a copy the line makes and drops (issue 50): in
`dist.all_reduce(counts.float())`, `.float()` returns `counts` itself where it is float
already, but a new tensor where it is not, and then the sum goes into that copy, which
nothing keeps: the rank goes on with its own counts, and nothing fails. Checked once per
call site, at the first call (the recorder's wrapper, pyops.py): the line's argument is a
method call on a tensor the script's frame can name (`counts`, `self.buf`, no call or
index on the way), and the tensor the collective got shares no memory with it. Nothing
is evaluated: names are looked up and attributes read, as the line itself did."""
from __future__ import annotations

import ast
import linecache
from typing import Any

from .sites import _line_of

_trees: dict[str, Any] = {}          # file -> its parsed module (None: not Python we can read)


def _tree(path: str) -> Any:
    if path not in _trees:
        try:
            _trees[path] = ast.parse("".join(linecache.getlines(path)) or "\n")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            _trees[path] = None
    return _trees[path]


def _argument(path: str, line: int, call: str) -> ast.expr | None:
    """The first argument of the `call(...)` (or `x.call(...)`) the line makes."""
    tree = _tree(path)
    if tree is None:
        return None
    found = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not (node.lineno <= line <= (node.end_lineno or node.lineno)):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else \
            node.func.id if isinstance(node.func, ast.Name) else None
        if name == call:
            first = node.args[0] if node.args else \
                next((k.value for k in node.keywords if k.arg in ("tensor", "tensors")), None)
            found = first if first is not None else found
    return found


def _resolve(expr: ast.expr, frame: Any) -> Any:
    """The value of a chain of a name and attributes (`counts`, `self.stats.buf`) in `frame`;
    None for anything else (a call, an index: evaluating it could do something)."""
    attrs = []
    while isinstance(expr, ast.Attribute):
        attrs.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    scope = frame.f_locals
    if expr.id in scope:
        value = scope[expr.id]
    elif expr.id in frame.f_globals:
        value = frame.f_globals[expr.id]
    else:
        return None
    for attr in reversed(attrs):
        value = getattr(value, attr, None)
    return value


def _storage(t: Any) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:          # noqa: BLE001 - no storage (meta, sparse): not compared
        return None


def into_a_copy(frame: Any, code: Any, lasti: int, given: Any, call: str, tensor: type) -> bool:
    """The collective `call` at the script's `code`/`lasti` (its frame: `frame` or one out
    from it) got `given`, a copy that the line's method call made of a tensor the frame
    names: what it writes into `given` is dropped with it."""
    try:
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        if frame is None or not isinstance(given, tensor):
            return False
        arg = _argument(code.co_filename, _line_of(code, lasti), call)
        if not isinstance(arg, ast.Call) or not isinstance(arg.func, ast.Attribute):
            return False
        source = _resolve(arg.func.value, frame)
        if not isinstance(source, tensor) or source is given:
            return False
        mine, theirs = _storage(given), _storage(source)
        return mine is not None and theirs is not None and mine != theirs
    except Exception:          # noqa: BLE001 - a line we cannot read: nothing said
        return False
