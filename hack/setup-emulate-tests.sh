#!/bin/sh
# Installs what tests/emulate_roundtrip.rs needs: hwloc's lstopo (Debian package `hwloc`).
set -eu
if command -v lstopo-no-graphics >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends hwloc || {
    apt-get update
    apt-get install -y --no-install-recommends hwloc
}
