"""Pure renderers: a LaunchPlan in, text out (same plan, same text).

Each renderer module (`compose`, `k8s`) provides `files(plan) -> {name: text}`
(what `render -o DIR` writes) and `text(plan) -> str` (what goes to stdout).
"""
from __future__ import annotations

import importlib
import json

from ..plan import LaunchPlan


def files(target: str, plan: LaunchPlan) -> dict[str, str]:
    if target == "plan":
        return {"plan.json": text(target, plan)}
    return importlib.import_module(f"labctl.render.{target}").files(plan)


def text(target: str, plan: LaunchPlan) -> str:
    if target == "plan":
        return json.dumps(plan.to_dict(), indent=2) + "\n"
    return importlib.import_module(f"labctl.render.{target}").text(plan)
