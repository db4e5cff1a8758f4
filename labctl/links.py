"""The lab's links (`links:`): the model and its parsing are the protocol's
(workloads/_protocol/links.py), since the workloads' report plugins read the links the
nodes were given too; labctl's modules import them from here."""
from __future__ import annotations

from workloads._protocol.links import (  # noqa: F401  (the one definition)
    FLAG_USAGE, LATENCY_EXAMPLE, MAX_LATENCY_US, MAX_RATE_BPS, MIN_RATE_BPS, RATE_EXAMPLE, Link, LinkError,
    Links, from_flags, human, human_rate, latency_text, parse, parse_latency, parse_link, parse_rate,
    rate_text,
)
