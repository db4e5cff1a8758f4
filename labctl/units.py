"""Quantities read the same way everywhere: a Kubernetes quantity (`quantity`: the lab's
resources, the compose render's limits, the GPUs a Kubernetes node advertises) and a
message size (`message_size`: `labctl predict --size`)."""
from __future__ import annotations

import re
from typing import Any

from .errors import short

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")
_SUFFIX = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}


def quantity(value: Any) -> float:
    """A Kubernetes quantity (2, 500m, 4Gi, 1.5G) in its base unit (cores, bytes, a count);
    ValueError for anything else. The one reading of one: the lab's resources here, the
    compose render's limits, the GPUs a Kubernetes node advertises (the k8s preflight)."""
    text = str(value)
    valid = not isinstance(value, bool) and isinstance(value, (str, int, float)) and len(text) <= 32
    match = _QUANTITY.match(text) if valid else None
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {short(value)} (examples: 2, 500m, 4Gi)")
    number, unit = float(match.group(1)), match.group(2) or ""
    return number / 1000 if unit == "m" else number * _SUFFIX[unit]    # 500m: 0.5 exactly


_SIZE = re.compile(r"^\s*([0-9]+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
               "mb": 10 ** 6, "g": 1 << 30, "gib": 1 << 30, "gb": 10 ** 9}


def message_size(value: Any) -> int:
    """A message size (`labctl predict --size`): bytes, or with a unit (64KiB, 4MiB, 1MB;
    K/M/G are binary), 1 B to 1 TiB; ValueError saying what is expected otherwise."""
    m = _SIZE.match(str(value))
    size = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()] if m else 0
    if not 1 <= size <= 1 << 40:
        raise ValueError(f"expected a size in bytes from 1 to 1TiB, with or without a unit "
                         f"(examples: 65536, 64KiB, 4MiB), given {value!r}")
    return size
