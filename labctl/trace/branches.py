"""Which rank the script's own branches single out (issue 50). Two ranks that called
different things at one collective are a tie the counting cannot break: "rank 0 ran an
extra forward" and "rank 1 skipped it" leave the same records. A reader of the script
breaks it by the code: `if rank == 0:` around the extra call names rank 0; `if rank != 1:`
around it names rank 1 (the one left out); `padded = rank == 1` and `x if rank == 1 else y`
name rank 1. So do we: the ranks such a test compares the rank with, first those of the
tests around the ranks' own calls, else those of the script's `if` statements (one that
only prints left out), else those of its other rank tests. And where the script sets a store key the ranks
wait for (`set_line`): a set that never ran is in no record, only in the code. And a
rank waiting past the end of the loop the others are still in ran fewer iterations
(`left_loop_early`): what it skipped is what they wait in. Standard
library only; a file that cannot be read or parsed names nobody."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

_RANK_NAMES = ("rank", "global_rank", "local_rank", "my_rank", "rank_id", "get_rank")
_FORMATTING = ("str", "repr", "format", "len", "round", "int", "float", "item", "tolist", "sum", "mean", "norm", "max",
               "min", "numel", "size", "get_rank", "get_world_size")   # inside a print: still a print
_QUIET_CALLS = ("print", "info", "debug", "warning", "log", "write", "flush", "sleep")


def _is_rank(node: ast.AST, aliases: frozenset[str] = frozenset()) -> bool:
    """A name, attribute or call that reads the rank: rank, args.rank, self.local_rank,
    dist.get_rank(), or a name the file assigned from get_rank() (`stage = dist.get_rank()`)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id.lower() in _RANK_NAMES or node.id in aliases
    if isinstance(node, ast.Attribute):
        return node.attr.lower() in _RANK_NAMES
    return False


def _rank_aliases(tree: ast.AST) -> frozenset[str]:
    """The names a file assigns from a get_rank() call, alone or in a tuple
    (`stage, n = dist.get_rank(), dist.get_world_size()`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) \
                    and isinstance(node.value, ast.Tuple) else [(target, node.value)]
                for name, value in pairs:
                    func = value.func if isinstance(value, ast.Call) else None
                    called = getattr(func, "attr", None) or getattr(func, "id", None)
                    if isinstance(name, ast.Name) and called == "get_rank":
                        found.add(name.id)
    return frozenset(found)


def _named(test: ast.AST, aliases: frozenset[str] = frozenset()) -> set[int]:
    """The int constants `test` compares a rank with (rank == 0, rank != 1, rank in (0, 2),
    not rank, with `and`/`or`/`not` around them)."""
    if isinstance(test, ast.BoolOp):
        return set().union(*(_named(v, aliases) for v in test.values))
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return {0} if _is_rank(test.operand, aliases) else _named(test.operand, aliases)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if _is_rank(right, aliases):
            left, right = right, left
        if not _is_rank(left, aliases):
            return set()
        values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
        return {v.value for v in values if isinstance(v, ast.Constant) and type(v.value) is int}
    return set()


def _quiet(body: list[ast.stmt]) -> bool:
    """A branch that only prints or logs (rank 0's progress line) says nothing of who is odd;
    one whose print calls something else (`print(evaluate())`) does something."""
    for stmt in body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        for call in (n for n in ast.walk(stmt.value) if isinstance(n, ast.Call)):
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in _QUIET_CALLS and name not in _FORMATTING:
                return False
    return True


def _branches(path: str) -> tuple[tuple[int, int, frozenset[int], bool], ...]:
    """(first line, last line, ranks named, an `if` statement?) of each test on the rank in
    the file: `if` statements, and tests in an assignment or a conditional expression."""
    try:
        st = Path(path).stat()
    except OSError:
        return ()
    return _parsed(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=32)
def _tree(path: str, mtime_ns: int, size: int) -> ast.Module | None:
    """The file parsed once per version (its mtime and size), for every reading here; None:
    too long to be a script, unreadable, or not Python."""
    if size > 4 << 20:                  # no script is that long: not one to read
        return None
    try:
        return ast.parse(Path(path).read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


@functools.lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[tuple[int, int, frozenset[int], bool], ...]:
    tree = _tree(path, mtime_ns, size)
    if tree is None:
        return ()
    aliases = _rank_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and not _quiet(node.body):
            test = node.test
        elif isinstance(node, ast.IfExp):
            test = node.test                # rows = 64 if rank == 1 else 50
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Compare, ast.BoolOp)):
            test = node.value               # padded = rank == 1
        else:
            continue
        named = _named(test, aliases)
        if named:
            found.append((node.lineno, node.end_lineno or node.lineno, frozenset(named), isinstance(node, ast.If)))
    return tuple(found)


def singled_out(tied: dict[int, str]) -> int | None:
    """The one rank of `tied` (rank -> its call's "file:line") that the script's branches
    single out: first by the branches around those calls, else by every branch of the
    files. None: they name none of the tied ranks, or more than one."""
    where = {rank: _where(caller) for rank, caller in tied.items()}
    where = {rank: w for rank, w in where.items() if w[0] is not None}
    if not where:
        return None
    files = {file for file, _ in where.values()}
    around = set().union(*(named for file, line in where.values()
                           for first, last, named, _ in _branches(file) if first <= line <= last))
    # then the file's `if` statements; only then its rank tests in values (`x if rank == 0
    # else y` often just gives each rank its own data, where an `if` does something else)
    ifs = set().union(*(named for file in files for _, _, named, is_if in _branches(file) if is_if))
    values = set().union(*(named for file in files for _, _, named, is_if in _branches(file) if not is_if))
    for named in (around, ifs, values):
        hit = [r for r in tied if r in named]
        if hit:
            return hit[0] if len(hit) == 1 else None
    return None


def left_loop_early(ahead: str, behind: str) -> int | None:
    """Where `ahead` ("file:line", a rank's call) is past the end of a loop of the file that
    holds `behind` (the others' call, the same file): that loop's first line (a rank that
    ran fewer iterations, an uneven last batch or a `break`, waits after it while the
    others are still inside it), else None; None too where `ahead` is under an `if` that
    `behind` is not (`if step % eval_every == 0: dist.all_reduce(metrics)` after the
    gradients' loop is an extra call, made on a step the others did not make it on)."""
    (file, line), (their_file, theirs) = _where(ahead), _where(behind)
    if file is None or file != their_file:
        return None
    try:
        st = Path(file).stat()
    except OSError:
        return None
    loops, ifs = _blocks(file, st.st_mtime_ns, st.st_size)
    inside = [(first, last) for first, last in loops if first <= theirs <= last and not first <= line <= last]
    if not inside or any(first <= line <= last and not first <= theirs <= last for first, last in ifs):
        return None                         # a call under an `if` of its own: an extra one
    first, last = min(inside)               # the outermost one: the loop the rank left
    return first if line > last else None


def loop_around(file: str, lines: list[int]) -> int | None:
    """The first line of the innermost loop of `file` that holds every one of `lines` (a rank
    seen at two lines of one loop, between two stack dumps, spins in it: the loop whose
    condition never ends is the line to show), else None."""
    try:
        st = Path(file).stat()
    except OSError:
        return None
    loops, _ = _blocks(file, st.st_mtime_ns, st.st_size)
    holding = [(first, last) for first, last in loops if all(first <= x <= last for x in lines)]
    return max(holding)[0] if holding else None


def _where(caller: str) -> tuple[str | None, int]:
    file, _, line = (caller or "").rpartition(":")
    return (file, int(line)) if file and line.isdigit() else (None, 0)


@functools.lru_cache(maxsize=32)
def _blocks(path: str, mtime_ns: int, size: int) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """(the loops, the `if` statements) of the file, as (first line, last line)."""
    tree = _tree(path, mtime_ns, size)
    if tree is None:
        return (), ()
    nodes = list(ast.walk(tree))
    return (tuple((n.lineno, n.end_lineno or n.lineno) for n in nodes if isinstance(n, (ast.For, ast.While, ast.AsyncFor))),
            tuple((n.lineno, n.end_lineno or n.lineno) for n in nodes if isinstance(n, ast.If)))


def set_line(path: str, key: str) -> int | None:
    """The line of the file's one `<store>.set("<key>", ...)` call (the key a literal, as
    written), else None (none, several, or a file that cannot be read)."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    lines = _store_sets(path, st.st_mtime_ns, st.st_size).get(key, [])
    return lines[0] if len(lines) == 1 else None


@functools.lru_cache(maxsize=32)
def _store_sets(path: str, mtime_ns: int, size: int) -> dict[str, list[int]]:
    tree = _tree(path, mtime_ns, size)
    if tree is None:
        return {}
    found: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.setdefault(node.args[0].value, []).append(node.lineno)
    return found
