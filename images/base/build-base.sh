#!/usr/bin/env bash
# Build labctl-base:bookworm without any container registry: debootstrap a
# minimal Debian bookworm from the apt mirror, then `docker import` it.
#
# Why not `FROM debian:bookworm`: the lab must build on machines that reach
# only Debian's and PyPI's mirrors. Python comes from Debian (3.11, the same
# minor version as the torch wheel we install into the image).
#
# Usage: images/base/build-base.sh [TAG]        (default labctl-base:bookworm)
# Env:   DEBIAN_MIRROR (default http://deb.debian.org/debian), SUITE (bookworm),
#        INPUT_HASH (recorded in the image comment; images/build.sh passes it)
set -euo pipefail

TAG=${1:-labctl-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
INPUT_HASH=${INPUT_HASH:-none}
DOCKER=${DOCKER:-docker}
# torch's CPU wheel bundles libgomp; it needs only glibc/libstdc++ (in minbase).
PACKAGES=python3,python3-venv,ca-certificates,procps,iproute2,iputils-ping,netbase,bash

command -v debootstrap >/dev/null || { echo "build-base: error: debootstrap missing; run: bash scripts/ensure-docker.sh" >&2; exit 1; }
ROOTFS=$(mktemp -d /var/tmp/labctl-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT

echo "build-base: debootstrap --variant=minbase $SUITE from $MIRROR"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" \
        >"$ROOTFS.log" 2>&1; then
    echo "build-base: error: debootstrap failed; last lines of $ROOTFS.log:" >&2
    tail -n 5 "$ROOTFS.log" >&2
    exit 1
fi
rm -f "$ROOTFS.log"

# Slim the tree: package caches and docs are not needed at run time.
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* \
       "$ROOTFS"/usr/share/locale/* "$ROOTFS"/var/cache/debconf/*-old "$ROOTFS"/var/log/*.log
echo "deb $MIRROR $SUITE main" > "$ROOTFS/etc/apt/sources.list"

echo "build-base: docker import -> $TAG"
tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    -C "$ROOTFS" -c . \
  | "$DOCKER" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["bash"]' \
      -m "labctl-base suite=$SUITE input-hash=$INPUT_HASH" - "$TAG" >/dev/null
echo "build-base: built $TAG ($("$DOCKER" image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
