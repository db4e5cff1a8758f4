"""The lab file (lab.yaml) read into plain data, bounded before anything is built from it
(docs/limits.md): at most MAX_FILE_BYTES, UTF-8 text, one document, no anchors or
aliases, nesting at most MAX_DEPTH, no duplicate keys; every refusal one line naming the
file (SpecError). What it holds is validated by labctl/spec.py (`from_dict`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError, short
from .limits import MAX_DEPTH, MAX_FILE_BYTES


def read_yaml(path: Path) -> dict[str, Any]:
    """The lab file, bounded before anything is built from it (docs/limits.md): at most
    MAX_FILE_BYTES read, UTF-8 text, one document, no anchors or aliases (a ten-line
    file of aliases stands for billions of nodes), nesting at most MAX_DEPTH, no
    duplicate keys. Every refusal is one line naming the file."""
    if not path.exists():
        raise SpecError(f"{path}: no such file (create one with: labctl init {path})")
    if path.is_dir():
        raise SpecError(f"{path}: a folder, not a lab file (example: labctl validate -f lab.yaml)")
    try:                                            # a pipe (-f <(...)) or device reads too
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)        # never more, whatever the file's size
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB, the most a lab file "
                        "may be (docs/limits.md); a lab description is a few lines")
    text = _decode(path, raw)
    try:
        _check_events(path, text)
        data = yaml.load(text, Loader=_LabLoader)
    except SpecError as exc:                      # a duplicate key, found while building
        raise SpecError(f"{path}: {exc}") from None
    except ValueError as exc:       # int() over 4,300 digits, a date like 2024-02-30
        what = ("a number of more than 4,300 digits; no lab field takes one" if "digits" in str(exc)
                else f"a value YAML cannot read ({short(str(exc).splitlines()[0])})")
        raise SpecError(f"{path}: {what}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0] or "invalid YAML"
        raise SpecError(f"{path}: malformed YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of lab fields (e.g. 'nodes: 2'), "
                        f"got {type(data).__name__}")
    return data


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text or one line saying where it is not (a binary file, a stray \\xff)."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise SpecError(f"{path}: not a text file (a NUL byte at offset {nul}); a lab file "
                        "is UTF-8 YAML")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{path}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                        f"{exc.start} (line {line}); save the lab file as UTF-8") from None


_YAML_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when PyYAML has it


def _check_events(path: Path, text: str) -> None:
    """Walk the parser's events (no objects built) and refuse what would blow up later:
    aliases and anchors, nesting deeper than MAX_DEPTH, more than one document."""
    depth = documents = 0
    for event in yaml.parse(text, Loader=_YAML_Loader):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise SpecError(f"line {line}: YAML anchors and aliases (&name, *name) are "
                            "not accepted in a lab file (one alias can stand for billions of "
                            "values); write each value out")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise SpecError(f"line {line}: nested deeper than {MAX_DEPTH} levels, "
                                "the most a lab file may be (docs/limits.md)")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise SpecError(f"line {line}: a second YAML document ('---'); a lab "
                                "file holds one")


class _LabLoader(_YAML_Loader):  # type: ignore[misc, valid-type]
    """Safe loading, and a key given twice is an error (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key that is not a plain value", key_node.start_mark) from None
            if key in seen:
                raise SpecError(f"line {key_node.start_mark.line + 1}: the key {short(key)} is given "
                                f"twice (first at line {seen[key]}); a lab file says each once")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)
