#!/usr/bin/env bash
# The GPU checks of docs/gpu.md §5 in one go, on a machine with an NVIDIA GPU and a CUDA
# build of torch already installed (labctl never installs torch here).
#
#   OUT=<folder> bash scripts/gpu-check.sh
#
# WHEELS=<folder> installs click/PyYAML/psutil from there when they are missing and the
# machine is offline (pip download them beforehand; default .cache/gpu-wheels).
# Writes <OUT>/summary.txt, one log per step and the run folders; exits non-zero when a
# lab that should pass did not.
set -u
OUT=${OUT:-gpu-check}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.cache/gpu-wheels}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

say "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1 | tee -a "$SUMMARY"

# labctl from this checkout on PYTHONPATH, so the workers torchrun starts import the
# same workloads; click/PyYAML/psutil, when missing, unpacked from their wheels beside it
# (no pip or network needed, and the machine's own python keeps its torch).
DEPS=$(mktemp -d)
if ! "$PY" -c 'import click, yaml, psutil' 2>/dev/null; then
    "$PY" - "$WHEELS" "$DEPS" <<'UNPACK'
import glob, sys, zipfile
wheels, into = sys.argv[1:]
tag = "cp%d%d" % sys.version_info[:2]
for name in ("click-*-py3-none-any", "psutil-*-abi3-*", f"pyyaml-*-{tag}-*"):
    found = glob.glob(f"{wheels}/{name}.whl")
    if not found:
        sys.exit(f"no wheel {name} in {wheels}")
    zipfile.ZipFile(found[0]).extractall(into)
UNPACK
fi
export PYTHONPATH=$PWD:$DEPS${PYTHONPATH:+:$PYTHONPATH}
LABCTL=("$PY" -m labctl.cli)
"${LABCTL[@]}" --version >/dev/null 2>&1 || "${LABCTL[@]}" --help >/dev/null || { say "labctl does not start"; exit 2; }

failed=0
lab() {   # lab <name> <expect: pass|fail> <args...>
    local name=$1 expect=$2; shift 2
    local t0=$SECONDS
    timeout 240 "${LABCTL[@]}" up --out "$OUT/runs/$name" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    say "== $name: labctl up $* -> exit $rc in $((SECONDS - t0)) s (expected $expect)"
    tail -n 25 "$OUT/$name.log" >>"$SUMMARY"
    if [ "$expect" = pass ] && [ $rc -ne 0 ]; then failed=1; fi
    if [ "$expect" = fail ] && [ $rc -eq 0 ]; then failed=1; fi
}

lab nccl-default pass --dist-backend nccl --nodes 1 --nproc-per-node 1
lab nccl-bench   pass --dist-backend nccl --nodes 1 --nproc-per-node 1 --workload bench
lab auto-default pass --dist-backend auto --nodes 1 --nproc-per-node 1
lab nccl-two-ranks-one-gpu fail --dist-backend nccl --nodes 1 --nproc-per-node 2 --workload collectives

for run in "$OUT"/runs/*/; do
    [ -d "$run" ] || continue
    say "== report $run"
    "${LABCTL[@]}" report "$run" >>"$SUMMARY" 2>&1
done
say "== done: failed=$failed"
exit $failed
