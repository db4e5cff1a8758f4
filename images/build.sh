#!/usr/bin/env bash
# Build labctl's images without a container registry; reuse what is up to date.
#
#   images/build.sh            labctl-base:bookworm (if missing/stale) + labctl-cpu:latest
#   images/build.sh cuda       labctl-cuda:latest FROM $CUDA_BASE_IMAGE (needs a registry
#                              or a pre-loaded image; see docs/compose.md)
#   images/build.sh --force    rebuild even when the input hashes match
#
# Each image carries the hash of its inputs (label labctl.input-hash; for the
# imported base, its comment). A rebuild happens only when the hash changed:
# the base's inputs are its build script; the CPU image's are its Dockerfile,
# the base image id, the wheel files and labctl's sources.
#
# Env: CPU_TAG (labctl-cpu:latest), BASE_TAG (labctl-base:bookworm),
#      TORCH_VERSION (default: the torch in .venv, else 2.13.0),
#      CUDA_BASE_IMAGE, CUDA_TAG (labctl-cuda:latest), PYTHON (.venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BASE_TAG=${BASE_TAG:-labctl-base:bookworm}
CPU_TAG=${CPU_TAG:-labctl-cpu:latest}
CUDA_TAG=${CUDA_TAG:-labctl-cuda:latest}
CUDA_BASE_IMAGE=${CUDA_BASE_IMAGE:-pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime}
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
WHEELS=.cache/wheels
# Debian's client matches Debian's engine and has the classic builder built in.
DOCKER=${DOCKER:-$( [ -x /usr/bin/docker ] && echo /usr/bin/docker || command -v docker )}
export DOCKER_BUILDKIT=0

TARGET=cpu FORCE=0
for arg in "$@"; do
    case $arg in
        cpu|cuda) TARGET=$arg ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "build.sh: error: unknown argument '$arg'; expected: [cpu|cuda] [--force]" >&2; exit 2 ;;
    esac
done

say() { echo "images: $*"; }
die() { echo "images: error: $*" >&2; exit 1; }
"$DOCKER" info >/dev/null 2>&1 || die "no Docker engine answers; run: bash scripts/ensure-docker.sh"
sha() { sha256sum | cut -c1-16; }
image_id() { "$DOCKER" image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
label() { "$DOCKER" image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

# labctl's sources as the image sees them: tracked and untracked-but-not-ignored files.
src_files() { git ls-files -co --exclude-standard -- labctl workloads pyproject.toml README.md | sort; }

assemble_src() {  # $1: destination folder
    mkdir -p "$1"
    src_files | while read -r f; do [ -f "$f" ] && install -D -m 0644 "$f" "$1/$f"; done
    [ -f "$1/README.md" ] || echo "labctl" > "$1/README.md"   # pyproject names a readme
}

# ---- base --------------------------------------------------------------------
build_base() {
    local h; h=$(cat images/base/build-base.sh | sha)
    local comment; comment=$("$DOCKER" image inspect -f '{{.Comment}}' "$BASE_TAG" 2>/dev/null || true)
    if [ "$FORCE" = 0 ] && [[ "$comment" == *"input-hash=$h"* ]]; then
        say "$BASE_TAG up to date (input-hash $h)"
        return
    fi
    local t old; t=$(now); old=$(image_id "$BASE_TAG")
    say "building $BASE_TAG (debootstrap; a few minutes)"
    INPUT_HASH=$h DOCKER=$DOCKER bash images/base/build-base.sh "$BASE_TAG"
    [ -z "$old" ] || "$DOCKER" rmi "$old" >/dev/null 2>&1 || true    # superseded, if unused
    say "built $BASE_TAG in $(took "$t")"
}

# ---- wheels ------------------------------------------------------------------
torch_version() {
    [ -n "${TORCH_VERSION:-}" ] && { echo "$TORCH_VERSION"; return; }
    "$PYTHON" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || echo 2.13.0
}

fetch_wheels() {  # torch (the host's exact build, e.g. 2.13.0+cpu) + labctl's runtime deps
    local tv=$1
    local deps; deps=$("$PYTHON" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))')
    # numpy: torch warns on every import without it.
    local want="torch==$tv numpy $deps setuptools>=61 wheel"
    if [ -f "$WHEELS.req" ] && [ "$(cat "$WHEELS.req")" = "$want" ] && ls "$WHEELS"/torch-* >/dev/null 2>&1; then
        say "wheels in $WHEELS up to date ($want)"
        return
    fi
    local t; t=$(now)
    say "pip download $want -> $WHEELS"
    mkdir -p "$WHEELS"
    # The image runs Debian bookworm's CPython 3.11 on x86_64: download for that.
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download -q -d "$WHEELS" --only-binary=:all: \
        --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 $want \
        || die "pip download failed for: $want"
    echo "$want" > "$WHEELS.req"
    say "downloaded wheels in $(took "$t") ($(du -sh "$WHEELS" | cut -f1))"
}

# ---- cpu ---------------------------------------------------------------------
build_cpu() {
    build_base
    local tv; tv=$(torch_version)
    fetch_wheels "$tv"
    local h; h=$( {
        cat images/cpu/Dockerfile
        image_id "$BASE_TAG"
        echo "$tv"
        (cd "$WHEELS" && ls -l --time-style=+ | awk '{print $5, $NF}')
        src_files | xargs -r sha256sum
    } | sha)
    if [ "$FORCE" = 0 ] && [ "$(label "$CPU_TAG" labctl.input-hash)" = "$h" ]; then
        say "$CPU_TAG up to date (input-hash $h)"
        return
    fi
    local ctx=build/images/cpu
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp -al "$WHEELS" "$ctx/wheels" 2>/dev/null || cp -a "$WHEELS" "$ctx/wheels"
    assemble_src "$ctx/src"
    cp images/cpu/Dockerfile "$ctx/Dockerfile"
    local t old; t=$(now); old=$(image_id "$CPU_TAG")
    say "building $CPU_TAG (torch $tv, input-hash $h)"
    "$DOCKER" build -q -t "$CPU_TAG" --build-arg BASE_IMAGE="$BASE_TAG" \
        --build-arg TORCH_VERSION="$tv" --build-arg INPUT_HASH="$h" "$ctx" >/dev/null \
        || die "docker build of $CPU_TAG failed (rerun without -q: $DOCKER build $ctx)"
    rm -rf "$ctx"
    [ -z "$old" ] || "$DOCKER" rmi "$old" >/dev/null 2>&1 || true    # superseded, if unused
    say "built $CPU_TAG in $(took "$t") ($("$DOCKER" image inspect -f '{{.Size}}' "$CPU_TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# ---- cuda --------------------------------------------------------------------
build_cuda() {
    [ -n "$(image_id "$CUDA_BASE_IMAGE")" ] || "$DOCKER" pull -q "$CUDA_BASE_IMAGE" >/dev/null 2>&1 \
        || die "base image $CUDA_BASE_IMAGE is neither local nor pullable; set CUDA_BASE_IMAGE (e.g. CUDA_BASE_IMAGE=$CPU_TAG CUDA_TAG=labctl-cuda:check to check the Dockerfile)"
    local ctx=build/images/cuda
    rm -rf "$ctx"; mkdir -p "$ctx"
    assemble_src "$ctx/src"
    cp images/cuda/Dockerfile "$ctx/Dockerfile"
    local t; t=$(now)
    say "building $CUDA_TAG FROM $CUDA_BASE_IMAGE"
    "$DOCKER" build -q -t "$CUDA_TAG.unlabelled" --build-arg BASE_IMAGE="$CUDA_BASE_IMAGE" "$ctx" >/dev/null \
        || die "docker build of $CUDA_TAG failed (rerun without -q: $DOCKER build $ctx)"
    # Labels need values at build time; read them from torch itself, then add them.
    local tv cv
    tv=$("$DOCKER" run --rm "$CUDA_TAG.unlabelled" python -c 'import torch; print(torch.__version__)')
    cv=$("$DOCKER" run --rm "$CUDA_TAG.unlabelled" python -c 'import torch; print(torch.version.cuda or "none")')
    printf 'FROM %s\nLABEL org.opencontainers.image.title="labctl-cuda" org.opencontainers.image.description="PyTorch distributed lab node (CUDA, nccl)" labctl.input-hash="" labctl.torch-version="%s" labctl.cuda-version="%s" labctl.base-image="%s"\n' \
        "$CUDA_TAG.unlabelled" "$tv" "$cv" "$CUDA_BASE_IMAGE" | "$DOCKER" build -q -t "$CUDA_TAG" - >/dev/null
    "$DOCKER" rmi "$CUDA_TAG.unlabelled" >/dev/null
    rm -rf "$ctx"
    say "built $CUDA_TAG in $(took "$t") (torch $tv, CUDA $cv)"
}

case $TARGET in
    cpu) build_cpu ;;
    cuda) build_cuda ;;
esac
