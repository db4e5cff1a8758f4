"""The `k8s:` section of a lab: where its pods may run on a real cluster.

The spec keeps the section as an opaque mapping (labctl/spec.py knows no
backend); the k8s backend checks it here (`K8sBackend.check_spec`, for every
lab: `labctl render k8s` renders any) and its renderers read it with
`settings(spec)`. The k8s-only rules on the rest of the lab (a script small
enough for a ConfigMap, a claim for `init_method: file`, the claim's name) and
Kubernetes' own name rules (object names, label keys and values) live here too.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ...errors import SpecError, short
from ...fields import MAX_SECONDS, seconds_of
from ...labvalues import DNS_LABEL
from ...limits import bound_items
from ...spec import LabSpec

MAX_K8S_MAP_BYTES = 64 * 1024        # k8s.labels / annotations / node_selector / affinity, each (as JSON)
MAX_K8S_SCRIPT_BYTES = 1024 * 1024 - 256   # a ConfigMap's 1 MiB, less room for its key
SPREAD = ("none", "hostname")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
# What one lab becomes: an Indexed Job (+ headless Service) per replica, or one JobSet.
WORKLOAD_KINDS = ("job", "jobset")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Labels labctl (or the Job controller) sets itself: a user value would break how
# `labctl down` finds a run, how the Service selects pods, or the Job's selector.
RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "labctl.dev/", "batch.kubernetes.io/")
RESERVED_LABELS = frozenset({QUEUE_LABEL, "job-name", "controller-uid"})
# Kubernetes' name syntax (apimachinery's validation): object names (DNS-1123 subdomains:
# claims, priority classes, service accounts, secrets), label names and values.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class K8sSettings:
    """Where the lab's pods may run on a real cluster (k8s render and backend only).

    Shared clusters taint GPU nodes, admit batch Jobs through Kueue and ask for
    priority classes, service accounts and pull secrets; none of that changes
    the launch plan, so it lives here and only the k8s renderer reads it.
    Tolerations are kept in Kubernetes' own shape (they are rendered as given).
    """
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)     # raw, passed through
    spread: str = "none"                 # hostname: at most one lab node per Kubernetes node
    priority_class: str | None = None
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    queue: str | None = None             # Kueue LocalQueue: queue-name label + suspended Job
    gpu_toleration: bool = True          # nccl labs tolerate the nvidia.com/gpu taint
    schedule_timeout: float = 300.0      # seconds pods may stay unschedulable / unadmitted
    kind: str = "job"                    # job: Indexed Job + Service; jobset: one JobSet (CRD)

    def to_dict(self) -> dict[str, Any]:
        """Only what differs from the defaults, as plain data `from_dict` accepts."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if value == default:
                continue
            if isinstance(value, tuple):
                value = [dict(v) if isinstance(v, Mapping) else v for v in value]
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out


def _bad(source: str):
    def bad(fieldname: str, value: Any, expected: str) -> SpecError:
        return SpecError(f"{source}: {fieldname}: expected {expected}, given {short(value)}")
    return bad


def settings(spec: LabSpec) -> K8sSettings:
    """The lab's k8s settings, read from its `k8s:` section (SpecError if it is bad)."""
    return parse(spec.k8s, _bad("lab spec"))


def check(spec: LabSpec, source: str) -> LabSpec:
    """The k8s backend's rules on a lab, with the one-line errors `spec.load` gives; returns
    the lab with its `k8s:` section normalised (what `to_dict` and the renderers store)."""
    bad = _bad(source)
    k8s = parse(spec.k8s, bad) if spec.k8s is not None else K8sSettings()
    if spec.shared_volume is not None and not _is_dns_subdomain(spec.shared_volume.claim):
        raise bad("shared_volume.claim", spec.shared_volume.claim, "a PersistentVolumeClaim name: "
                  "lower-case letters, digits, '-' and '.' (example: shared_volume: {claim: lab-shared})")
    if spec.backend == "k8s":
        if spec.init_method == "file" and spec.shared_volume is None:
            raise SpecError(f"{source}: shared_volume: expected a ReadWriteMany claim that every pod "
                            "mounts, because init_method: file on the k8s backend needs one directory "
                            "all pods see (example: shared_volume: {claim: lab-shared}), given none")
        if spec.script:
            _check_k8s_script(spec.script, bad)
    return dataclasses.replace(spec, k8s=k8s.to_dict())


# ---- the k8s: section ---------------------------------------------------------
_K8S_FIELDS = tuple(f.name for f in dataclasses.fields(K8sSettings))
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_LABEL_KEY_RULE = ("[prefix/]name: an optional DNS subdomain prefix, then at most 63 of "
                   "A-Z a-z 0-9 - _ . starting and ending alphanumeric")
_LABEL_VALUE_RULE = "at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric, or empty"


def _is_dns_subdomain(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= 253 and bool(DNS_SUBDOMAIN.match(name))


def _is_label_key(key: Any) -> bool:
    """A qualified name: `[DNS-subdomain/]name`, as label, annotation and taint keys are."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    if slash and not _is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.match(name))


def _scalar_str(value: Any) -> str | None:
    """YAML turns `true` and `1` into non-strings; Kubernetes wants the string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value if isinstance(value, str) else None


def _label_value(value: Any) -> str | None:
    value = _scalar_str(value)
    if value is None or len(value) > 63 or (value and not LABEL_NAME.match(value)):
        return None
    return value


def parse(raw: Any, bad) -> K8sSettings:
    """Validate the `k8s:` section; every error names `k8s.<field>` and one example."""
    if not isinstance(raw, dict):
        raise bad("k8s", raw, "a mapping of Kubernetes scheduling settings (example: "
                  "k8s: {queue: team-a, node_selector: {nvidia.com/gpu.present: 'true'}})")
    for key in raw:
        if key not in _K8S_FIELDS:
            raise bad("k8s", key, "one of the known keys: " + ", ".join(_K8S_FIELDS))
    given = {k: v for k, v in raw.items() if v is not None}
    kw: dict[str, Any] = {}

    def string_map(key: str, example: str) -> dict[str, str]:
        """node_selector, labels (label keys and values) or annotations (any string value)."""
        value = given[key]
        if not isinstance(value, dict):
            raise bad(f"k8s.{key}", value, f"a mapping (example: {key}: {example})")
        out: dict[str, str] = {}
        for k, v in value.items():
            if not _is_label_key(k):
                raise bad(f"k8s.{key}", k, f"keys as Kubernetes label keys, {_LABEL_KEY_RULE} "
                          f"(example: {key}: {example})")
            reserved = any(k.startswith(p) for p in RESERVED_LABEL_PREFIXES)
            if key == "labels" and (reserved or k in RESERVED_LABELS):
                hint = " (set k8s.queue instead)" if k == QUEUE_LABEL else ""
                raise bad(f"k8s.{key}", k, f"a label that labctl and the Job controller do not set{hint}; "
                          f"reserved: {', '.join(p + '*' for p in RESERVED_LABEL_PREFIXES)}, "
                          f"{', '.join(sorted(RESERVED_LABELS))} (example: {key}: {example})")
            if key == "annotations" and reserved:
                raise bad(f"k8s.{key}", k, "an annotation key outside "
                          f"{', '.join(p + '*' for p in RESERVED_LABEL_PREFIXES)} "
                          f"(example: {key}: {example})")
            text = _scalar_str(v) if key == "annotations" else _label_value(v)
            if text is None:
                expected = "a string" if key == "annotations" else f"a label value, {_LABEL_VALUE_RULE}"
                raise bad(f"k8s.{key}.{k}", v, f"{expected} (example: {key}: {example})")
            out[k] = text
        return out

    for key, example in (("node_selector", "{nvidia.com/gpu.present: 'true'}"),
                         ("labels", "{team: vision}"), ("annotations", "{example.com/owner: ada}")):
        if key in given:
            kw[key] = string_map(key, example)
            _bound_json(f"k8s.{key}", kw[key], bad)

    if "tolerations" in given:
        kw["tolerations"] = _tolerations(given["tolerations"], bad)

    if "affinity" in given:
        affinity = given["affinity"]
        if not isinstance(affinity, dict) or not all(
                k in AFFINITY_KINDS and isinstance(v, dict) for k, v in affinity.items()):
            raise bad("k8s.affinity", affinity, "the pod's affinity as a mapping with keys from "
                      f"{', '.join(AFFINITY_KINDS)}, passed through as written (example: "
                      "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: ...}})")
        _bound_json("k8s.affinity", affinity, bad)
        kw["affinity"] = affinity

    if "spread" in given:
        if given["spread"] not in SPREAD:
            raise bad("k8s.spread", given["spread"], "one of " + ", ".join(SPREAD) +
                      " (hostname: at most one lab node per Kubernetes node)")
        kw["spread"] = given["spread"]

    for key, example in (("priority_class", "high-priority"), ("service_account", "lab-runner")):
        if key in given:
            if not _is_dns_subdomain(given[key]):
                raise bad(f"k8s.{key}", given[key], "a Kubernetes object name (DNS subdomain: "
                          f"lower-case letters, digits, '-' and '.') (example: {key}: {example})")
            kw[key] = given[key]

    if "image_pull_secrets" in given:
        secrets = given["image_pull_secrets"]
        if isinstance(secrets, str) or not isinstance(secrets, (list, tuple)) or not all(
                _is_dns_subdomain(s) for s in secrets):
            raise bad("k8s.image_pull_secrets", secrets, "a list of Secret names (DNS subdomains) "
                      "(example: image_pull_secrets: [registry-creds])")
        bound_items("k8s.image_pull_secrets", secrets, bad)
        kw["image_pull_secrets"] = tuple(secrets)

    if "queue" in given:
        queue = given["queue"]
        if not isinstance(queue, str) or len(queue) > 63 or not DNS_LABEL.match(queue):
            raise bad("k8s.queue", queue, "a Kueue LocalQueue name, a DNS-1123 label of at most "
                      "63 characters (it becomes a label value) (example: queue: team-a)")
        kw["queue"] = queue

    if "gpu_toleration" in given:
        if not isinstance(given["gpu_toleration"], bool):
            raise bad("k8s.gpu_toleration", given["gpu_toleration"], "true or false (false: no "
                      "nvidia.com/gpu toleration for nccl labs)")
        kw["gpu_toleration"] = given["gpu_toleration"]

    if "schedule_timeout" in given:
        kw["schedule_timeout"] = seconds_of(given["schedule_timeout"], "k8s.schedule_timeout", bad)

    if "kind" in given:
        if given["kind"] not in WORKLOAD_KINDS:
            raise bad("k8s.kind", given["kind"], "one of " + ", ".join(WORKLOAD_KINDS) +
                      " (jobset: one JobSet, jobset.x-k8s.io/v1alpha2, for clusters that run "
                      "the JobSet controller) (example: k8s: {kind: jobset})")
        kw["kind"] = given["kind"]
    return K8sSettings(**kw)


def _bound_json(key: str, value: Any, bad) -> None:
    """A k8s mapping at most MAX_K8S_MAP_BYTES as JSON: the Job carries it (and the lab
    description, in an annotation) and Kubernetes caps annotations at 256 KiB in all."""
    size = len(json.dumps(value, default=str))
    if size > MAX_K8S_MAP_BYTES:
        raise bad(key, f"{size:,} bytes", f"at most {MAX_K8S_MAP_BYTES // 1024} KiB as JSON "
                  "(Kubernetes caps a pod's annotations at 256 KiB in all; docs/limits.md)")


def _tolerations(raw: Any, bad) -> tuple[dict[str, Any], ...]:
    """Kubernetes' own toleration rules (ValidateTolerations), checked before any apply."""
    example = "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"
    if not isinstance(raw, (list, tuple)):
        raise bad("k8s.tolerations", raw, f"a list of tolerations (example: {example})")
    bound_items("k8s.tolerations", raw, bad)
    out = []
    for i, item in enumerate(raw):
        where = f"k8s.tolerations[{i}]"
        if not isinstance(item, dict):
            raise bad(where, item, f"a mapping with keys from {', '.join(_TOLERATION_KEYS)} "
                      f"(example: {example})")
        for k in item:
            if k not in _TOLERATION_KEYS:
                raise bad(where, k, "one of the toleration keys: " + ", ".join(_TOLERATION_KEYS))
        key = item.get("key") or ""
        operator = item.get("operator") or "Equal"
        if key and not _is_label_key(key):
            raise bad(f"{where}.key", key, f"a taint key, {_LABEL_KEY_RULE} (example: {example})")
        if operator not in TOLERATION_OPERATORS:
            raise bad(f"{where}.operator", operator, "one of " + ", ".join(TOLERATION_OPERATORS))
        if not key and operator != "Exists":
            raise bad(f"{where}.operator", operator, "Exists when no key is given (an empty key "
                      "with Exists tolerates every taint)")
        toleration: dict[str, Any] = {"key": key} if key else {}
        toleration["operator"] = operator
        if item.get("value") is not None:
            value = _label_value(item["value"])
            if operator == "Exists" and value:
                raise bad(f"{where}.value", item["value"], "no value with operator Exists "
                          "(use operator: Equal to match a value)")
            if value is None:
                raise bad(f"{where}.value", item["value"], f"a taint value, {_LABEL_VALUE_RULE}")
            if value:
                toleration["value"] = value
        effect = item.get("effect")
        if effect is not None:
            if effect not in TAINT_EFFECTS:
                raise bad(f"{where}.effect", effect, "one of " + ", ".join(TAINT_EFFECTS) +
                          " (or leave it out to match every effect)")
            toleration["effect"] = effect
        seconds = item.get("tolerationSeconds")
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_SECONDS:
                raise bad(f"{where}.tolerationSeconds", seconds, "a whole number of seconds "
                          f">= 0 and at most {MAX_SECONDS:,} (example: tolerationSeconds: 300)")
            if effect != "NoExecute":
                raise bad(f"{where}.tolerationSeconds", seconds, "tolerationSeconds only with "
                          "effect: NoExecute (it bounds how long a pod stays after the taint)")
            toleration["tolerationSeconds"] = seconds
        out.append(toleration)
    return tuple(out)


def _check_k8s_script(script: str, bad) -> None:
    """The k8s backend mounts the script from a ConfigMap: Kubernetes caps one at 1 MiB, and
    a file name starting with '..' is not a path a volume item may have."""
    name = script.rsplit("/", 1)[-1]
    if name.startswith(".."):
        raise bad("script", script, "a file name that does not start with '..' (Kubernetes "
                  "refuses it as a volume path)")
    try:
        size = Path(script).stat().st_size
    except OSError:
        return                      # not here (yet): the render says so, with the path
    if size > MAX_K8S_SCRIPT_BYTES:
        raise bad("script", script, f"a script of at most 1 MiB on the k8s backend (this one is "
                  f"{size:,} bytes; it travels in a ConfigMap, which Kubernetes caps at 1 MiB): "
                  "bake larger code into the image and run a small script (docs/limits.md)")

