"""Links: how fast (and how late) each node's network link is, as the lab says it.

A lab may give every node, one node, or one pair of nodes a link:

    links: 100mbit                                   # every node
    links:
      default: 1gbit                                 # every node not named below
      nodes: {2: 100mbit, 3: {rate: 1gbit, latency: 5ms}}
      pairs: {"0-1": 50mbit}                         # the traffic between nodes 0 and 1

What a node's link means (docs/network.md): a cable between the node and a
switch. Its `rate` caps everything the node sends *and* everything it receives
(each direction on its own, as a full-duplex NIC); its `latency` is added to
every packet crossing that cable, in each direction, so that a one-way trip
from a to b gains latency(a) + latency(b). A pair rule adds a limit on the
traffic between two nodes only: a -> b runs at min(rate(a), rate(b), rate(a-b)),
and gains latency(a-b) once more each way.

This module is the model and its parsing only (standard library), in the protocol
because both sides read it: labctl's lab file and backends (through labctl/links.py),
and the workloads' report plugins, which read the links the nodes were given (LAB_LINKS).
How a backend applies it is the backend's (compose: `workloads/_shape.py` in each container;
Kubernetes: the bandwidth CNI plugin's pod annotations; local: refused).
"""
from __future__ import annotations

import json
import re
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

MIN_RATE_BPS = 1_000                  # 1 kbit/s: the Kubernetes bandwidth plugin's minimum too
MAX_RATE_BPS = 1_000_000_000_000      # 1 tbit/s: more than any veth carries
MAX_LATENCY_US = 10_000_000           # 10 s
# tc's own words for bits per second (SI: k = 1000), and the binary ones it also reads
_RATE_UNITS = {"bit": 1, "kbit": 10 ** 3, "mbit": 10 ** 6, "gbit": 10 ** 9, "tbit": 10 ** 12,
               "kibit": 2 ** 10, "mibit": 2 ** 20, "gibit": 2 ** 30, "tibit": 2 ** 40}
_LATENCY_UNITS = {"us": 1, "ms": 1000, "s": 1_000_000}
_RATE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([a-z]+)$")
_LATENCY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s)$")
_PAIR = re.compile(r"^\s*([0-9]+)\s*-\s*([0-9]+)\s*$")
RATE_EXAMPLE = "a rate with its unit: bit, kbit, mbit, gbit or tbit (example: 100mbit)"
LATENCY_EXAMPLE = "a one-way delay with its unit: us, ms or s (example: 5ms)"
FLAG_USAGE = ("[NODE=|A-B=]RATE[,LATENCY] (examples: --link 1gbit, --link 2=100mbit, "
              "--link 0-1=50mbit,5ms)")


class LinkError(ValueError):
    """A link that cannot be: (where, value, what is expected), for spec.py's one line."""

    def __init__(self, where: str, value: Any, expected: str):
        super().__init__(f"{where}: expected {expected}, given {value!r}")
        self.where, self.value, self.expected = where, value, expected


@dataclass(frozen=True)
class Link:
    """One link's shape: a rate in bits per second, a one-way delay in microseconds;
    None: not limited, not delayed."""
    rate_bps: int | None = None
    latency_us: int | None = None

    @property
    def empty(self) -> bool:
        return self.rate_bps is None and self.latency_us is None

    def text(self) -> str:
        """As written in a lab file: `100mbit`, `100mbit,5ms`, `5ms`."""
        return ",".join(t for t in (rate_text(self.rate_bps) if self.rate_bps else "",
                                    latency_text(self.latency_us) if self.latency_us else "") if t)

    def to_data(self) -> Any:
        """The lab file's form: a rate string, or {rate, latency} when there is a latency."""
        if self.latency_us is None:
            return rate_text(self.rate_bps) if self.rate_bps else {}
        out: dict[str, str] = {}
        if self.rate_bps is not None:
            out["rate"] = rate_text(self.rate_bps)
        out["latency"] = latency_text(self.latency_us)
        return out


@dataclass(frozen=True)
class Links:
    """Every link rule of a lab. Node indices count over the whole run (with replicas:
    replica * nodes + i, as the faults' do); a pair is (a, b) with a < b."""
    default: Link = field(default_factory=Link)
    nodes: Mapping[int, Link] = field(default_factory=dict)
    pairs: Mapping[tuple[int, int], Link] = field(default_factory=dict)

    def node(self, index: int) -> Link:
        """Node `index`'s own link: its rule, else the default."""
        return self.nodes.get(index, self.default)

    def pair(self, a: int, b: int) -> Link:
        """The pair rule between a and b (either order), or an empty link."""
        return self.pairs.get((min(a, b), max(a, b)), Link())

    def path(self, a: int, b: int) -> Link:
        """What traffic from a to b meets: the slowest rate on its way and the sum of
        the delays (a's cable, the pair rule, b's cable)."""
        parts = (self.node(a), self.pair(a, b), self.node(b))
        rates = [p.rate_bps for p in parts if p.rate_bps is not None]
        delays = [p.latency_us for p in parts if p.latency_us is not None]
        return Link(min(rates) if rates else None, sum(delays) if delays else None)

    def shaped_nodes(self, total: int) -> list[int]:
        """Nodes that must shape something: their own link, or a pair rule they are in."""
        in_pairs = {i for pair in self.pairs for i in pair}
        return [i for i in range(total) if not self.node(i).empty or i in in_pairs]

    @property
    def has_latency(self) -> bool:
        return any(link.latency_us is not None
                   for link in (self.default, *self.nodes.values(), *self.pairs.values()))

    @property
    def has_rate(self) -> bool:
        return any(link.rate_bps is not None
                   for link in (self.default, *self.nodes.values(), *self.pairs.values()))

    def to_data(self) -> Any:
        """The lab file's form (round-trips through `parse`)."""
        if not self.nodes and not self.pairs:
            return self.default.to_data()
        out: dict[str, Any] = {}
        if not self.default.empty:
            out["default"] = self.default.to_data()
        if self.nodes:
            out["nodes"] = {i: self.nodes[i].to_data() for i in sorted(self.nodes)}
        if self.pairs:
            out["pairs"] = {f"{a}-{b}": self.pairs[(a, b)].to_data() for a, b in sorted(self.pairs)}
        return out

    def to_json(self) -> str:
        """One line of JSON (LAB_LINKS: what the workloads read), keys as strings."""
        data = self.to_data()
        if isinstance(data, dict) and "nodes" in data:
            data = {**data, "nodes": {str(k): v for k, v in data["nodes"].items()}}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def describe(self, total: int) -> list[str]:
        """One line per rule, for people: `node 2: 100 Mbit/s`, `nodes 0-1: 50 Mbit/s, +5 ms`."""
        lines = []
        if not self.default.empty:
            lines.append(f"every node: {human(self.default)}")
        for i in sorted(self.nodes):
            lines.append(f"node {i}: {human(self.nodes[i])}")
        for a, b in sorted(self.pairs):
            lines.append(f"nodes {a}-{b}: {human(self.pairs[(a, b)])}")
        return lines


# ---- texts -------------------------------------------------------------------------
def rate_text(bps: int | None) -> str:
    """bits/s as tc writes it, in the largest SI unit that divides it: 100000000 -> 100mbit."""
    if not bps:
        return ""
    for unit, size in (("tbit", 10 ** 12), ("gbit", 10 ** 9), ("mbit", 10 ** 6), ("kbit", 10 ** 3)):
        if bps % size == 0:
            return f"{bps // size}{unit}"
    return f"{bps}bit"


def latency_text(us: int | None) -> str:
    if not us:
        return ""
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000}s"
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def human(link: Link) -> str:
    """`100 Mbit/s`, `1 Gbit/s, +5 ms`, `unshaped`."""
    parts = []
    if link.rate_bps is not None:
        parts.append(human_rate(link.rate_bps))
    if link.latency_us is not None:
        parts.append(f"+{link.latency_us / 1000:g} ms one way")
    return ", ".join(parts) or "unshaped"


def human_rate(bps: float) -> str:
    for unit, size in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.4g} {unit}"
    return f"{bps:.4g} bit/s"


def human_size(size: float) -> str:
    """A message size as bench tables say it: 4 MiB where it is a whole number of them, else bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{int(size) >> shift} {unit}"
    return f"{size:.0f} B"


# ---- parsing -----------------------------------------------------------------------
def parse_rate(value: Any, where: str) -> int:
    """`100mbit` -> 100000000 (bits/s), or LinkError."""
    if isinstance(value, bool) or not isinstance(value, str) or len(value) > 32:
        raise LinkError(where, value, RATE_EXAMPLE)
    m = _RATE.match(value.strip().lower())
    if not m:
        raise LinkError(where, value, RATE_EXAMPLE)
    number, unit = m.groups()
    if unit not in _RATE_UNITS:
        hint = (f"{RATE_EXAMPLE}; tc reads '{unit}' as bytes per second, so write bits "
                f"({unit[:-3]}bit)") if unit.endswith("bps") else RATE_EXAMPLE
        raise LinkError(where, value, hint)
    bps = Decimal(number) * _RATE_UNITS[unit]
    if bps <= 0:
        raise LinkError(where, value, "a rate > 0 (example: 100mbit; to leave a link unshaped, "
                        "leave it out)")
    if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS or bps != int(bps):
        raise LinkError(where, value, f"a whole number of bits per second from 1kbit to 1tbit "
                        f"(example: 100mbit)")
    return int(bps)


def parse_latency(value: Any, where: str) -> int:
    """`5ms` -> 5000 (microseconds), or LinkError."""
    if isinstance(value, bool) or not isinstance(value, str) or len(value) > 32:
        raise LinkError(where, value, LATENCY_EXAMPLE)
    m = _LATENCY.match(value.strip().lower())
    if not m:
        raise LinkError(where, value, LATENCY_EXAMPLE)
    us = Decimal(m.group(1)) * _LATENCY_UNITS[m.group(2)]
    if us <= 0:
        raise LinkError(where, value, "a delay > 0 (example: 5ms; leave it out for none)")
    if us > MAX_LATENCY_US or us != int(us):
        raise LinkError(where, value, "a whole number of microseconds up to 10s (example: 5ms)")
    return int(us)


def parse_link(value: Any, where: str) -> Link:
    """A rate string (`100mbit`), a `RATE,LATENCY` string, or {rate: ..., latency: ...}."""
    if isinstance(value, str):
        words = [w.strip() for w in value.split(",")]
        if not 1 <= len(words) <= 2 or not all(words):
            raise LinkError(where, value, "a rate, a latency or both: RATE[,LATENCY] "
                            "(examples: 100mbit, 1gbit,5ms, {rate: 1gbit, latency: 5ms})")
        rate = latency = None
        for word in words:
            if _LATENCY.match(word.lower()):
                if latency is not None:
                    raise LinkError(where, value, "at most one latency")
                latency = parse_latency(word, where)
            else:
                if rate is not None:
                    raise LinkError(where, value, "at most one rate")
                rate = parse_rate(word, where)
        return Link(rate, latency)
    if isinstance(value, dict):
        unknown = [k for k in value if k not in ("rate", "latency")]
        if unknown or not value:
            raise LinkError(where, value if not unknown else unknown[0],
                            "a rate string (100mbit) or a mapping of rate and latency "
                            "(example: {rate: 1gbit, latency: 5ms})")
        return Link(parse_rate(value["rate"], f"{where}.rate") if value.get("rate") is not None else None,
                    parse_latency(value["latency"], f"{where}.latency")
                    if value.get("latency") is not None else None)
    raise LinkError(where, value, "a rate string (example: 100mbit) or {rate: ..., latency: ...}")


def _node_key(key: Any, where: str, total: int) -> int:
    expected = f"a node of this lab: 0 to {total - 1}"
    if isinstance(key, bool):
        raise LinkError(where, key, expected)
    if isinstance(key, str) and key.strip().isdigit() and len(key) < 12:
        key = int(key)
    if not isinstance(key, int) or not 0 <= key < total:
        raise LinkError(where, key, expected)
    return key


def _pair_key(key: Any, where: str, total: int) -> tuple[int, int]:
    expected = f"two different nodes of this lab (0 to {total - 1}) as \"A-B\" (example: \"0-2\")"
    m = _PAIR.match(key) if isinstance(key, str) and len(key) < 32 else None
    if not m:
        raise LinkError(where, key, expected)
    a, b = int(m.group(1)), int(m.group(2))
    if a == b or not (0 <= a < total and 0 <= b < total):
        raise LinkError(where, key, expected)
    return (min(a, b), max(a, b))


def parse(raw: Any, total_nodes: int, where: str = "links") -> Links:
    """The `links:` value of a lab with `total_nodes` nodes (over all replicas)."""
    if isinstance(raw, str):
        return Links(default=parse_link(raw, where))
    if not isinstance(raw, dict):
        raise LinkError(where, raw, "a rate for every node (example: links: 1gbit) or a mapping "
                        "of default, nodes and pairs (example: {default: 1gbit, nodes: {2: 100mbit}})")
    unknown = [k for k in raw if k not in ("default", "nodes", "pairs")]
    if unknown:
        raise LinkError(where, unknown[0], "one of default, nodes, pairs (example: "
                        "{default: 1gbit, nodes: {2: 100mbit}, pairs: {\"0-1\": 50mbit}})")
    default = parse_link(raw["default"], f"{where}.default") if raw.get("default") is not None else Link()
    nodes: dict[int, Link] = {}
    for key, value in _mapping(raw.get("nodes"), f"{where}.nodes", "{2: 100mbit}"):
        index = _node_key(key, f"{where}.nodes", total_nodes)
        if index in nodes:
            raise LinkError(f"{where}.nodes", key, f"each node once (node {index} is given twice)")
        nodes[index] = parse_link(value, f"{where}.nodes.{index}")
    pairs: dict[tuple[int, int], Link] = {}
    for key, value in _mapping(raw.get("pairs"), f"{where}.pairs", '{"0-1": 50mbit}'):
        pair = _pair_key(key, f"{where}.pairs", total_nodes)
        if pair in pairs:
            raise LinkError(f"{where}.pairs", key, f"each pair once ({pair[0]}-{pair[1]} is given twice)")
        pairs[pair] = parse_link(value, f"{where}.pairs.{key}")
    return Links(default, dict(sorted(nodes.items())), dict(sorted(pairs.items())))


def _mapping(raw: Any, where: str, example: str) -> Iterable[tuple[Any, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise LinkError(where, raw, f"a mapping (example: {example})")
    return list(raw.items())


def from_flags(items: Iterable[str], fail: Callable[[str], Exception]) -> dict[str, Any]:
    """`--link` values as the lab file's `links:` mapping (checked later, with the lab's
    nodes): `1gbit` (every node), `2=100mbit` (node 2), `0-1=50mbit,5ms` (a pair)."""
    out: dict[str, Any] = {}
    for item in items:
        scope, sep, value = item.rpartition("=")
        scope = scope.strip()
        if not value.strip() or (sep and not scope):
            raise fail(f"--link: expected {FLAG_USAGE}, given {item!r}")
        if not sep or scope == "default":
            section, key = "default", None
        elif _PAIR.match(scope):
            section, key = "pairs", scope.replace(" ", "")
        elif scope.isdigit():
            section, key = "nodes", int(scope)
        else:
            raise fail(f"--link: expected {FLAG_USAGE}, given {item!r}")
        if key is None:
            if "default" in out:
                raise fail(f"--link: the default link is given twice ({out['default']!r}, {value!r})")
            out["default"] = value
        else:
            entries = out.setdefault(section, {})
            if key in entries:
                raise fail(f"--link: {scope} is given twice")
            entries[key] = value
    return out
