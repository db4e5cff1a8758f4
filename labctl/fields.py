"""A lab field's declaration (`lab_field`: its type and default, how a value is read, its
flag, help, backends, starter lines and docs cells) and the readers every kind of field
shares: a whole number in bounds, seconds, one of some names, true or false, a path.
labctl/spec.py declares each field of `LabSpec` with these; `from_dict`, the CLI's lab
flags, `to_dict`, `labctl init`'s starter and docs/lab-description.md's table are made from
the declarations (as a backend's flags from its `Options`)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

MAX_PATH = 4096                      # script, image, out: the kernel's PATH_MAX
MAX_SECONDS = 10 ** 9                # timeouts: about 31 years, fits every int field (int64, int32)

# Each LabSpec field is declared once, with `lab_field`: its type and default (the
# dataclass field), how a value is read and checked (a Reader: its bounds and the line a
# bad value gets), its flag (name, help, repeatable), which backends use it, its lines
# in `labctl init`'s starter and its row in docs/lab-description.md. `from_dict`, the
# CLI's lab flags (labctl/cli.py `lab_options`), `to_dict`, STARTER and `field_table`
# are made from these (the backends' own flags come from their Options the same way).

# The backends themselves are listed once, in the registry (labctl/backends/__init__.py,
# above this layer): a field names only the ones it is limited to (None: every backend).
CONTAINERS = ("compose", "k8s")      # the backends that run a node in a container


class Reading:
    """What a field's reader sees: the lab's data, the fields read so far, `bad` (the
    error for one field: `<source>: <field>: expected ..., given ...`) and the source."""

    def __init__(self, data: Mapping[str, Any], source: str, bad, default_of: Callable[[str], Any]):
        self.data, self.source, self.bad, self.default_of = data, source, bad, default_of
        self.kw: dict[str, Any] = {}

    def value(self, name: str) -> Any:
        """A field as read so far, else its default."""
        return self.kw[name] if name in self.kw else self.default_of(name)


class Reader:
    """How one field's value is read from a lab file (or a flag's override) and written
    back (`to_dict`). The base reader takes the value as it is."""
    late = False            # reads the whole lab (a LabSpec of the other fields): faults

    def read(self, value: Any, key: str, lab: Reading) -> Any:
        return value

    def dump(self, value: Any) -> Any:
        """The value as plain data, in the shape `read` accepts."""
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value

    def from_flags(self, values: Any) -> Any:
        """A flag's value(s) as the lab file would say it (a repeatable flag: a tuple)."""
        return values

    def values(self) -> str:
        """What it takes, for the docs table."""
        return ""


@dataclass(frozen=True)
class Int(Reader):
    """A whole number from lo to hi (digits in a string too, as YAML may quote them)."""
    lo: int
    hi: int
    what: str = "an integer"        # a bad flag: `expected <what> between lo and hi`
    expected: str | None = None     # a bad file value, when it says more than the flag's
    upto: str | None = None         # the file's upper bound is this field (min_nodes: nodes)

    def flag_expected(self) -> str:
        return f"{self.what} between {self.lo} and {self.hi}"

    def flag_value(self, text: Any) -> int:
        """A flag's value, read as the file's (digits only, lo to hi); ValueError else."""
        def bad(*_: Any) -> ValueError:
            return ValueError(f"expected {self.flag_expected()}, given {text!r}")
        return read_int(text, "", self.lo, self.hi, bad)

    def read(self, value: Any, key: str, lab: Reading) -> int:
        hi = lab.value(self.upto) if self.upto else self.hi
        expected = self.expected.format(upto=hi) if self.expected else None
        return read_int(value, key, self.lo, hi, lab.bad, expected)

    def values(self) -> str:
        return f"{self.lo}–{self.upto or self.hi}"


@dataclass(frozen=True)
class Seconds(Reader):
    """A finite number of seconds in (0, MAX_SECONDS]; `whole`: the line for a fraction,
    when only whole seconds will do."""
    whole: str | None = None
    lo: float | None = None         # bounds narrower than (0, MAX_SECONDS] (the stall window)
    hi: float | None = None

    def read(self, value: Any, key: str, lab: Reading) -> float:
        seconds = seconds_of(value, key, lab.bad)
        if self.whole and not seconds.is_integer():
            raise lab.bad(key, value, self.whole)
        if not self._within(seconds):
            raise lab.bad(key, value, f"{self._range()} (example: {key}: {self.lo or 1:g})")
        return seconds

    def _within(self, seconds: float) -> bool:
        return (self.lo is None or seconds >= self.lo) and (self.hi is None or seconds <= self.hi)

    def _range(self) -> str:
        return f"a number of seconds from {self.lo or 0:g} to {self.hi or MAX_SECONDS:g}"

    def values(self) -> str:
        if self.lo is not None or self.hi is not None:
            return f"seconds, {self.lo or 0:g} to {self.hi or MAX_SECONDS:g}"
        return "whole seconds > 0" if self.whole else "seconds > 0"

    def flag_value(self, text: Any) -> float:
        """A flag's value, read as the file's; ValueError else."""
        def bad(*_: Any) -> ValueError:
            if self.lo is not None or self.hi is not None:
                return ValueError(f"expected {self._range()}, given {text!r}")
            return ValueError(f"expected a number of seconds > 0 and at most {MAX_SECONDS:,}, "
                              f"given {text!r}")
        seconds = seconds_of(text, "", bad)
        if not self._within(seconds):
            raise bad()
        return seconds


@dataclass(frozen=True)
class Choice(Reader):
    """One of `choices`; None: one of the backend registry's (backends.check_spec)."""
    choices: tuple[str, ...] | None
    example: str = ""

    def read(self, value: Any, key: str, lab: Reading) -> Any:
        if self.choices is not None and value not in self.choices:
            raise lab.bad(key, value, "one of " + ", ".join(self.choices) + self.example)
        return value

    def values(self) -> str:
        return ", ".join(f"`{c}`" for c in self.choices) if self.choices else "a backend's name"


@dataclass(frozen=True)
class Bool(Reader):
    expected: str

    def read(self, value: Any, key: str, lab: Reading) -> bool:
        if not isinstance(value, bool):
            raise lab.bad(key, value, self.expected)
        return value

    def values(self) -> str:
        return "`true`, `false`"


class Text(Reader):
    """A non-empty string of at most MAX_PATH characters."""

    def read(self, value: Any, key: str, lab: Reading) -> str:
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_PATH:
            raise lab.bad(key, value, f"a non-empty string of at most {MAX_PATH} characters")
        return value


class Folder(Text):
    """A folder to make (the run folder): its flag is a path that is no file."""


@dataclass(frozen=True)
class LabField:
    """One lab field's declaration, beside its type and default in LabSpec."""
    read: Reader = Reader()
    help: str = ""                  # the flag's help
    flag: str | None = None         # `--nodes`, `--trace/--no-trace`; None: the lab file only
    many: bool = False              # a repeatable flag (its values: Reader.from_flags)
    null_ok: bool = True            # `field: null` means the default (else it is refused)
    backends: tuple[str, ...] | None = None   # the backends it acts on (None: every one)
    starter: str = ""               # its lines in `labctl init`'s starter (str.format'ed)
    section: bool = False           # a section of its own (`k8s:`): last in the starter
    doc: str = ""                   # its meaning in docs/lab-description.md (default: help)
    doc_flag: str | None = None     # the docs table's flag cell, when more than the flag
    doc_default: str | None = None  # the docs table's default cell, when not the value


def lab_field(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
              **declared: Any) -> Any:
    """A LabSpec field and its declaration (LabField's attributes)."""
    return field(default=default, default_factory=factory, metadata={"lab": LabField(**declared)})


def read_int(value: Any, key: str, lo: int, hi: int, bad, expected: str | None = None) -> int:
    expected = expected or f"an integer between {lo} and {hi} (example: {key}: 2)"
    if isinstance(value, bool):
        raise bad(key, value, expected)
    if isinstance(value, str) and len(value) < 20 and re.fullmatch(r"\s*[0-9]+\s*", value):
        value = int(value)
    if not isinstance(value, int) or not lo <= value <= hi:
        raise bad(key, value, expected)
    return value


def seconds_of(value: Any, key: str, bad) -> float:
    """A finite number of seconds in (0, MAX_SECONDS]: it becomes int fields downstream
    (activeDeadlineSeconds is an int64, torchrun's join timeout an int)."""
    expected = f"a number of seconds > 0 and at most {MAX_SECONDS:,} (example: 300)"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad(key, value, expected)
    if isinstance(value, str) and len(value) > 64:
        raise bad(key, value, expected)
    try:
        seconds = float(value)
    except (ValueError, OverflowError):
        raise bad(key, value, expected) from None
    if not 0 < seconds <= MAX_SECONDS:         # also NaN and inf
        raise bad(key, value, expected)
    return seconds


def doc_value(value: Any) -> str:
    """A default as the lab file writes it."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (tuple, list)):
        return "`[]`" if not value else f"`{list(value)}`"
    return f"`{value}`"
