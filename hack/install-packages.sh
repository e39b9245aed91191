#!/bin/sh
# Installs the Debian packages the test suite needs (hack/packages.txt, one per line).
# CI runs this once before `cargo test`; it only installs packages and changes nothing else.
set -eu
cd "$(dirname "$0")"
pkgs=$(grep -v '^[[:space:]]*#' packages.txt | tr '\n' ' ')
[ -n "$pkgs" ] || exit 0
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $pkgs
