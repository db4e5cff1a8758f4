"""What the CLI checks of a loaded lab on this machine (commands.load_lab), outside
`from_dict`, which also reads a run folder's spec.yaml back where the script need not be:
the files it names (`check_files`: the script reads and compiles; `--out` can become a new
run folder, `out_refusal`), and what it sets that cannot act where and how it runs
(`idle_settings`: one `note:` line each)."""
from __future__ import annotations

from pathlib import Path

from .errors import SpecError
from .fields import CONTAINERS
from .labvalues import Resources
from .spec import LabSpec


def idle_settings(spec: LabSpec) -> list[str]:
    """What this lab sets that cannot act where and how it runs, one line each: the CLI
    says so (`note: ...`) instead of doing nothing. Notes, not refusals: one lab file
    serves several backends and launchers (`--backend`, `--launcher` override it), and
    a setting for another one is no mistake. What would fail at run time is refused
    (`from_dict`, `check_files`)."""
    notes = []
    containers = spec.backend in CONTAINERS
    if spec.image is not None and not containers:
        notes.append(f"image: the {spec.backend} backend starts no containers (image is for "
                     "compose and k8s)")
    if spec.resources != Resources() and not containers:
        notes.append(f"resources: the {spec.backend} backend sets no limits (resources are for "
                     "compose and k8s)")
    elif spec.backend == "k8s" and spec.resources.pids != Resources.pids:
        notes.append("resources.pids: a compose limit; on Kubernetes the kubelet sets it")
    if spec.k8s and spec.backend != "k8s":
        notes.append(f"k8s: read by the k8s backend only, not {spec.backend}")
    if spec.workdir != LabSpec.workdir and spec.backend != "local":
        notes.append(f"workdir: for local nodes only; on {spec.backend} a node runs in its "
                     "image's working directory")
    if spec.shared_volume is not None and spec.backend == "local":
        notes.append("shared_volume: local nodes share the run folder's shared/ (LAB_SHARED_DIR) "
                     "instead")
    if spec.join_timeout != LabSpec.join_timeout and spec.launcher != "torchrun":
        notes.append(f"join_timeout: the {spec.launcher} launcher has no rendezvous to wait for "
                     "(it is torchrun's)")
    if spec.last_call_timeout != LabSpec.last_call_timeout and spec.fewest_nodes == spec.nodes:
        notes.append("last_call_timeout: only an elastic lab's rendezvous waits for late nodes "
                     f"(min_nodes < nodes); this one needs all {spec.nodes}")
    if spec.pg_timeout is not None and spec.pg_timeout >= spec.timeout:
        notes.append(f"pg_timeout: the lab's deadline (timeout {spec.timeout:g} s) comes first, so a "
                     f"hang never reaches torch's own timeout ({spec.pg_timeout:g} s); set it lower")
    if spec.fault_clock != LabSpec.fault_clock and not spec.faults:
        notes.append("fault_clock: this lab has no faults to time")
    if spec.script_args and not spec.script:
        notes.append(f"script_args: for a script only; this lab runs workloads "
                     f"({', '.join(w.name for w in spec.workloads)})")
    return notes


def out_refusal(path: Path) -> str | None:
    """Why `path` cannot become a new run folder, from what is there now (None: it can,
    as far as the filesystem shows): the end of "run folder 'x' ...". Disk space and
    permissions are the run folder's own checks when it is made (rundir.RunDir.create)."""
    try:
        if path.exists():
            if not path.is_dir():
                return "exists and is not a folder"
            if any(path.iterdir()):
                return "exists and is not empty"
            return None
        for parent in path.parents:
            if parent.exists():
                return None if parent.is_dir() else f"cannot be made: {parent} is not a folder"
    except OSError as exc:
        return f"cannot be looked at: {exc.strerror or exc}"
    return None


MAX_SCRIPT_BYTES = 16 << 20         # a script larger than this is not compiled before the start


def _compiles(code: bytes, name: str, source: str) -> None:
    """A script that does not compile fails every rank the same way, after their start-up
    and with the blame on runpy: said here, before any rank starts, at its own line."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise SpecError(f"{source}: script: {name} does not compile ({where}: {exc.msg}); "
                        "no rank was started") from None
    except ValueError as exc:           # source code with null bytes
        raise SpecError(f"{source}: script: {name} does not compile ({exc}); no rank was started") from None


def check_files(spec: LabSpec, source: str = "lab spec", out: bool = True) -> None:
    """What the lab names on this machine, checked before anything starts (validate, up,
    render): the script is a readable file, and `out` (with `out`) can become a new run
    folder. SpecError, one line, otherwise: a lab that cannot start is exit 2, before and
    not after a run folder is made. Not in `from_dict`: a run folder's spec.yaml is read
    back where the script need not be."""
    if spec.script:
        script = Path(spec.script)
        where = f" (a path from the folder labctl runs in, {Path.cwd()})" if not script.is_absolute() else ""
        try:
            if not script.exists():
                raise SpecError(f"{source}: script: no such file: {spec.script}{where}")
            if not script.is_file():
                raise SpecError(f"{source}: script: {spec.script} is not a file (example: "
                                "script: train.py)")
            with open(script, "rb") as f:
                code = f.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"{source}: script: cannot read {spec.script}: {exc.strerror or exc}") from None
        if len(code) <= MAX_SCRIPT_BYTES:
            _compiles(code, spec.script, source)
    if out and spec.out:
        why = out_refusal(Path(spec.out))
        if why:
            raise SpecError(f"{source}: out: run folder '{spec.out}' {why}; choose another --out")
