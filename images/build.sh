#!/usr/bin/env bash
# Build labctl's images without a container registry; reuse what is up to date.
#
#   images/build.sh            labctl-base:bookworm (if missing/stale) + labctl-cpu:latest
#   images/build.sh cuda       labctl-base:bookworm + labctl-cuda:latest: PyPI's default
#                              (CUDA) torch wheel and its nvidia-* wheels, several GB
#   BASE_IMAGE=pytorch/pytorch:<tag> images/build.sh cuda
#                              labctl-cuda:latest = labctl on an image that already has
#                              CUDA torch (needs a registry or a pre-loaded image)
#   images/build.sh --force    rebuild even when the input hashes match
#
# Each image carries the hash of its inputs (label labctl.input-hash; for the
# imported base, its comment). A rebuild happens only when the hash changed:
# the base's inputs are its build script; a lab image's are its Dockerfile,
# the base image id, the torch version, the wheel files and labctl's sources.
#
# Env: CPU_TAG (labctl-cpu:latest), BASE_TAG (labctl-base:bookworm),
#      TORCH_VERSION (default: the torch in .venv, else 2.13.0; the CUDA image
#      takes its public part, 2.13.0+cpu -> 2.13.0), CUDA_TAG (labctl-cuda:latest),
#      BASE_IMAGE (cuda only, see above), PYTHON (.venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BASE_TAG=${BASE_TAG:-labctl-base:bookworm}
CPU_TAG=${CPU_TAG:-labctl-cpu:latest}
CUDA_TAG=${CUDA_TAG:-labctl-cuda:latest}
BASE_IMAGE=${BASE_IMAGE:-}
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
WHEELS=.cache/wheels
CUDA_WHEELS=.cache/wheels-cuda
# Debian's client matches Debian's engine and has the classic builder built in.
DOCKER=${DOCKER:-$( [ -x /usr/bin/docker ] && echo /usr/bin/docker || command -v docker )}
export DOCKER_BUILDKIT=0

TARGET=cpu FORCE=0
for arg in "$@"; do
    case $arg in
        cpu|cuda) TARGET=$arg ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
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

up_to_date() {  # $1: image, $2: input hash
    if [ "$FORCE" = 0 ] && [ "$(label "$1" labctl.input-hash)" = "$2" ]; then
        say "$1 up to date (input-hash $2)"
        return 0
    fi
    return 1
}

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

# The image runs Debian bookworm's CPython 3.11 on x86_64 with glibc 2.36:
# download for that, newest tag first as pip itself ranks them (the nvidia-*
# wheels are tagged manylinux_2_27 and older).
PLATFORMS=()
for glibc in $(seq 36 -1 17); do PLATFORMS+=(--platform "manylinux_2_${glibc}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64)

fetch_wheels() {  # $1: folder, $2: the torch requirement; adds labctl's runtime deps (numpy among them)
    local dest=$1 torch_req=$2
    # the runtime deps and the `debug` extra (torch's debug server frontend: --debug-server)
    local deps; deps=$("$PYTHON" -c 'import tomllib; p = tomllib.load(open("pyproject.toml","rb"))["project"]; print(" ".join(p["dependencies"] + p["optional-dependencies"]["debug"]))')
    # numpy is one of them (torch warns on every import without it; pipelining needs it)
    local want="$torch_req $deps setuptools>=61 wheel"
    if [ -f "$dest.req" ] && [ "$(cat "$dest.req")" = "$want" ] && ls "$dest"/torch-* >/dev/null 2>&1; then
        say "wheels in $dest up to date ($want)"
        return
    fi
    local t; t=$(now)
    say "pip download $want -> $dest"
    mkdir -p "$dest"
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download -q -d "$dest" --only-binary=:all: \
        --python-version 3.11 --implementation cp "${PLATFORMS[@]}" $want \
        || die "pip download failed for: $want"
    echo "$want" > "$dest.req"
    say "downloaded wheels in $(took "$t") ($(du -sh "$dest" | cut -f1))"
}

# Names and sizes only. `ls -l`'s "total" line counts disk blocks, which can
# change while no wheel does: after the first CUDA build its hash no longer matched.
wheels_listing() { find "$1" -maxdepth 1 -type f -printf '%s %f\n' | sort -k2; }

# ---- cpu ---------------------------------------------------------------------
build_cpu() {
    build_base
    local tv; tv=$(torch_version)
    fetch_wheels "$WHEELS" "torch==$tv"
    local h; h=$( {
        cat images/cpu/Dockerfile
        image_id "$BASE_TAG"
        echo "$tv"
        wheels_listing "$WHEELS"
        src_files | xargs -r sha256sum
    } | sha)
    up_to_date "$CPU_TAG" "$h" && return
    local ctx=build/images/cpu
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp -al "$WHEELS" "$ctx/wheels" 2>/dev/null || cp -a "$WHEELS" "$ctx/wheels"
    assemble_src "$ctx/src"
    cp images/cpu/Dockerfile "$ctx/Dockerfile"
    local t old; t=$(now); old=$(image_id "$CPU_TAG")
    say "building $CPU_TAG (torch $tv, input-hash $h)"
    "$DOCKER" build -q --force-rm -t "$CPU_TAG" --build-arg BASE_IMAGE="$BASE_TAG" \
        --build-arg TORCH_VERSION="$tv" --build-arg INPUT_HASH="$h" "$ctx" >/dev/null \
        || die "docker build of $CPU_TAG failed (rerun without -q: $DOCKER build $ctx)"
    rm -rf "$ctx"
    [ -z "$old" ] || "$DOCKER" rmi "$old" >/dev/null 2>&1 || true    # superseded, if unused
    say "built $CPU_TAG in $(took "$t") ($("$DOCKER" image inspect -f '{{.Size}}' "$CPU_TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# ---- cuda --------------------------------------------------------------------
# Labels need values at build time; read them from torch inside the image, then
# add them with a one-line Dockerfile (no layer, only config).
label_cuda() {  # $1: the unlabelled image, $2: input hash, $3: what it was built from
    local versions tv cv nv
    versions=$("$DOCKER" run --rm --network none "$1" python -c '
import torch, torch.distributed as dist
nccl = ".".join(map(str, torch.cuda.nccl.version())) if dist.is_nccl_available() else "none"
print(torch.__version__, torch.version.cuda or "none", nccl)') || die "torch does not import in $1"
    read -r tv cv nv <<<"$versions"
    printf 'FROM %s\nLABEL org.opencontainers.image.title="labctl-cuda" org.opencontainers.image.description="PyTorch distributed lab node (CUDA, nccl)" labctl.torch-version="%s" labctl.cuda-version="%s" labctl.nccl-version="%s" labctl.base-image="%s" labctl.input-hash="%s"\n' \
        "$1" "$tv" "$cv" "$nv" "$3" "$2" | "$DOCKER" build -q --force-rm -t "$CUDA_TAG" - >/dev/null \
        || die "labelling $CUDA_TAG failed"
    say "$CUDA_TAG: torch $tv, CUDA $cv, NCCL $nv"
}

# $1: Dockerfile, $2: context, $3: input hash, $4: what it is built from; then build args.
build_and_label_cuda() {
    local dockerfile=$1 ctx=$2 h=$3 from=$4; shift 4
    cp "$dockerfile" "$ctx/Dockerfile"
    local t old; t=$(now); old=$(image_id "$CUDA_TAG")
    say "building $CUDA_TAG from $from (input-hash $h)"
    "$DOCKER" build -q --force-rm -t "$CUDA_TAG.unlabelled" "$@" "$ctx" >/dev/null \
        || die "docker build of $CUDA_TAG failed (rerun without -q: $DOCKER build $ctx)"
    label_cuda "$CUDA_TAG.unlabelled" "$h" "$from"
    "$DOCKER" rmi "$CUDA_TAG.unlabelled" >/dev/null
    rm -rf "$ctx"
    [ -z "$old" ] || "$DOCKER" rmi "$old" >/dev/null 2>&1 || true    # superseded, if unused
    say "built $CUDA_TAG in $(took "$t") ($("$DOCKER" image inspect -f '{{.Size}}' "$CUDA_TAG" | awk '{printf "%.1f GB", $1/1e9}'))"
}

# Air-gapped: the debootstrap base + PyPI's default torch wheel, which on Linux
# x86_64 is the CUDA build (its nvidia-* libraries come as wheels too).
build_cuda() {
    build_base
    local tv; tv=$(torch_version); tv=${tv%%+*}    # 2.13.0+cpu -> 2.13.0
    # ===: exactly this version string, so a local 2.13.0+cpu wheel never satisfies it.
    fetch_wheels "$CUDA_WHEELS" "torch===$tv"
    ls "$CUDA_WHEELS"/torch-"$tv"-cp311-*.whl >/dev/null 2>&1 \
        || die "no torch-$tv-cp311 wheel in $CUDA_WHEELS after pip download"
    local h; h=$( {
        cat images/cuda/Dockerfile
        image_id "$BASE_TAG"
        echo "$tv"
        wheels_listing "$CUDA_WHEELS"
        src_files | xargs -r sha256sum
    } | sha)
    up_to_date "$CUDA_TAG" "$h" && return
    local ctx=build/images/cuda
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp -al "$CUDA_WHEELS" "$ctx/wheels" 2>/dev/null || cp -a "$CUDA_WHEELS" "$ctx/wheels"
    assemble_src "$ctx/src"
    build_and_label_cuda images/cuda/Dockerfile "$ctx" "$h" "$BASE_TAG" \
        --build-arg BASE_IMAGE="$BASE_TAG" --build-arg TORCH_VERSION="$tv"
}

# With a registry: labctl on top of an image that already has CUDA torch.
build_cuda_on_base_image() {
    [ -n "$(image_id "$BASE_IMAGE")" ] || "$DOCKER" pull -q "$BASE_IMAGE" >/dev/null 2>&1 \
        || die "BASE_IMAGE $BASE_IMAGE is neither local nor pullable; unset BASE_IMAGE to build air-gapped"
    local h; h=$( {
        cat images/cuda/base-image.Dockerfile
        image_id "$BASE_IMAGE"
        src_files | xargs -r sha256sum
    } | sha)
    up_to_date "$CUDA_TAG" "$h" && return
    local ctx=build/images/cuda
    rm -rf "$ctx"; mkdir -p "$ctx"
    assemble_src "$ctx/src"
    build_and_label_cuda images/cuda/base-image.Dockerfile "$ctx" "$h" "$BASE_IMAGE" \
        --build-arg BASE_IMAGE="$BASE_IMAGE"
}

case $TARGET in
    cpu) build_cpu ;;
    cuda) if [ -n "$BASE_IMAGE" ]; then build_cuda_on_base_image; else build_cuda; fi ;;
esac
