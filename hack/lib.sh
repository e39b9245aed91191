# shellcheck shell=bash
# Shared helpers for the hack/ scripts: project paths, logging, private apt, flavors.
# Sourced, never run. Nothing here changes the host outside the project's .cache/ and _output/.

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT_DIR="$(cd "$HACK_DIR/.." && pwd)"
CACHE_DIR="${NRI_ALIGN_CACHE:-$ROOT_DIR/.cache}"
OUTPUT_DIR="${NRI_ALIGN_OUTPUT:-$ROOT_DIR/_output}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_KEYRING="${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"

# Image references the CRI config and tests use; built locally by hack/build-images.
SANDBOX_IMAGE="${SANDBOX_IMAGE:-localhost/nri-align/sandbox:1}"
TEST_IMAGE="${TEST_IMAGE:-localhost/nri-align/busybox:1}"

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# image_tag VERSION -> the image tag of an nri-align of that version (`nri-align --version`,
# build.rs). A release (no pre-release part: `0.3.0+REVISION`) is tagged with its version alone,
# the tag the kustomization names; any other build with its whole version, so that a change of
# code changes the tag and `kubectl apply` rolls it out. The OCI distribution spec allows only
# [A-Za-z0-9_.-] in a tag (`[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`), so semver's `+` is written `_`,
# as Helm does for chart versions in OCI registries: 0.4.0-dev+0123abcd4567 -> 0.4.0-dev_0123abcd4567.
image_tag() {
    local version="$1" tag
    if [[ "${version%%+*}" == *-* ]]; then
        tag="${version//+/_}"
    else
        tag="${version%%+*}"
    fi
    [[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ ]] || die "version '$version' makes no OCI tag ('$tag')"
    printf '%s\n' "$tag"
}

# release_line VERSION -> the release a version belongs to: its core without pre-release or
# build metadata (0.4.0-dev+0123abcd4567 and 0.4.0+0123abcd4567 -> 0.4.0). The base
# kustomization's tag is the release line of this checkout's `nri-align --version`: the release
# its manifests are written for (tests/packaging/image_tag.rs keeps them agreeing).
release_line() {
    local core="${1%%+*}"
    printf '%s\n' "${core%%-*}"
}

# write_deploy_kustomization DIR REF [COMPONENT...]: the kustomization that deploys image REF
# (REPOSITORY:TAG) with packaging/kubernetes and the named components of
# packaging/kubernetes/components, written to DIR/kustomization.yaml (the folder made, the file
# replaced). The `images:` entry sets every nri-align container, the components' too, because
# they are rendered in the same kustomization. `kubectl apply -k DIR` then deploys exactly REF.
write_deploy_kustomization() {
    local dir="$1" ref="$2" base name tag c
    shift 2
    [[ "$ref" =~ ^[^:@[:space:]]+(:[0-9]+)?/[^:@[:space:]]+:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ || "$ref" =~ ^[^:@/[:space:]]+:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ ]] ||
        die "image reference '$ref' is not REPOSITORY:TAG"
    name="${ref%:*}" tag="${ref##*:}"
    for c in "$@"; do
        [[ -f "$ROOT_DIR/packaging/kubernetes/components/$c/kustomization.yaml" ]] ||
            die "no component '$c' in packaging/kubernetes/components"
    done
    mkdir -p "$dir"
    # kustomize takes only relative paths to other kustomizations.
    base="$(realpath --relative-to="$dir" "$ROOT_DIR/packaging/kubernetes")"
    {
        printf '# Written by hack/build-image: packaging/kubernetes with the image it built.\n'
        printf '# kubectl kustomize %s | grep image:    kubectl apply -k %s\n' "$dir" "$dir"
        printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n'
        printf 'resources:\n  - %s\n' "$base"
        if [[ $# -gt 0 ]]; then
            printf 'components:\n'
            for c in "$@"; do printf '  - %s/components/%s\n' "$base" "$c"; done
        fi
        printf 'images:\n  - name: localhost/nri-align\n'
        [[ "$name" == localhost/nri-align ]] || printf '    newName: %s\n' "$name"
        printf '    newTag: "%s"\n' "$tag"
    } >"$dir/kustomization.yaml.tmp"
    mv "$dir/kustomization.yaml.tmp" "$dir/kustomization.yaml"
}

# flavor_suite FLAVOR -> Debian suite providing that containerd; empty for v2.3, which no
# registry has (its build is located instead: containerd_locate).
flavor_suite() {
    case "$1" in
        trixie) echo trixie ;;
        sid) echo sid ;;
        v2.3) echo "" ;;
        *) die "unknown flavor '$1' (want trixie, sid or v2.3)" ;;
    esac
}

# flavor_config_version FLAVOR -> containerd config schema version for that flavor.
flavor_config_version() {
    case "$1" in
        trixie) echo 2 ;;
        sid | v2.3) echo 3 ;;
        *) die "unknown flavor '$1'" ;;
    esac
}

# Exit status of `containerd-up v2.3` (and `containerd-up --locate v2.3`) when no containerd
# 2.3 build is found: the tests skip on exactly this status, as for CRI-O.
# shellcheck disable=SC2034 # used by the scripts that source this file
CONTAINERD_MISSING_RC=3

# containerd_candidates prints, one a line, where a containerd 2.3 build is looked for, in
# order: $CONTAINERD_23 (a directory holding bin/containerd or containerd), shared/containerd-2.3
# beside this checkout, the same beside the main checkout of a git worktree, and
# /work/shared/containerd-2.3.
containerd_candidates() {
    if [[ -n "${CONTAINERD_23:-}" ]]; then
        echo "$CONTAINERD_23"
        return
    fi
    echo "$ROOT_DIR/../shared/containerd-2.3"
    local common
    if common="$(git -C "$ROOT_DIR" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)"; then
        echo "$(dirname "$common")/../shared/containerd-2.3"
    fi
    echo /work/shared/containerd-2.3
}

# containerd_locate prints the directory of the containerd 2.3 build (containerd,
# containerd-shim-runc-v2 and ctr side by side), or returns 1 after saying where it looked.
containerd_locate() {
    local c dir
    local looked=()
    while IFS= read -r c; do
        looked+=("$c")
        for dir in "$c/bin" "$c"; do
            if [[ -x "$dir/containerd" && -x "$dir/containerd-shim-runc-v2" && -x "$dir/ctr" ]]; then
                (cd "$dir" && pwd)
                return 0
            fi
        done
    done < <(containerd_candidates)
    log "no containerd 2.3 build found (looked at: ${looked[*]}); no package registry has it:" \
        "set CONTAINERD_23=/path/to/dir (with bin/containerd, bin/containerd-shim-runc-v2, bin/ctr)"
    return 1
}

# apt_private TOOL SUITE ARGS... runs apt-get or apt-cache against a private sources list, lists and cache under
# .cache/apt-SUITE, so the host's apt state is never read or written.
apt_private() {
    local tool="$1" suite="$2"; shift 2
    local base="$CACHE_DIR/apt-$suite"
    mkdir -p "$base/lists/partial" "$base/cache/archives/partial" "$base/etc"
    local sources="$base/etc/sources.list"
    local want="deb [signed-by=$DEBIAN_KEYRING] $DEBIAN_MIRROR $suite main"
    if [[ ! -f "$sources" ]] || [[ "$(cat "$sources")" != "$want" ]]; then
        printf '%s\n' "$want" >"$sources"
    fi
    "$tool" -q \
        -o Dir::Etc::sourcelist="$sources" \
        -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$base/lists" \
        -o Dir::Cache="$base/cache" \
        -o Dir::State::status=/var/lib/dpkg/status \
        -o APT::Sandbox::User=root \
        -o APT::Architecture="$(dpkg --print-architecture)" \
        "$@"
}

# apt_refresh SUITE: updates the private package lists of SUITE at most once a day; a stale list
# only means an older version.
apt_refresh() {
    local suite="$1" base="$CACHE_DIR/apt-$1"
    if [[ -z "$(find "$base/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 -print -quit 2>/dev/null)" ]]; then
        log "apt update ($suite)"
        apt_private apt-get "$suite" update >/dev/null
    fi
}

# fetch_deb SUITE PACKAGE DEST: downloads PACKAGE from SUITE and unpacks it into DEST (dpkg -x).
# Skips everything when DEST/.done names the same package version.
fetch_deb() {
    local suite="$1" pkg="$2" dest="$3"
    local base="$CACHE_DIR/apt-$suite"
    # Unpacked within the last day: done, without even reading the package lists (apt-cache
    # over sid's lists costs seconds on a loaded box). NRI_ALIGN_OFFLINE=1 never looks again.
    if [[ -f "$dest/.done" ]]; then
        if [[ "${NRI_ALIGN_OFFLINE:-0}" == 1 ]] || [[ -n "$(find "$dest/.done" -mmin -1440)" ]]; then
            return 0
        fi
    fi
    apt_refresh "$suite"
    local version
    # awk reads all of apt-cache's output: exiting at the first match would SIGPIPE apt-cache,
    # which pipefail turns into a failure of the whole script (exit 141) on a cold cache.
    version="$(apt_private apt-cache "$suite" show "$pkg" 2>/dev/null | awk '/^Version:/ && v == "" {v = $2} END {print v}')"
    [[ -n "$version" ]] || die "package $pkg not found in $suite"
    if [[ -f "$dest/.done" ]] && [[ "$(cat "$dest/.done")" == "$pkg=$version" ]]; then
        touch "$dest/.done"
        return 0
    fi
    local debdir="$base/debs"
    mkdir -p "$debdir"
    local deb
    deb="$(find "$debdir" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)"
    if [[ -z "$deb" ]] || [[ "$(dpkg-deb -f "$deb" Version)" != "$version" ]]; then
        log "downloading $pkg=$version from $suite"
        rm -f "$debdir/${pkg}_"*.deb
        (cd "$debdir" && apt_private apt-get "$suite" download "$pkg=$version" >/dev/null)
        deb="$(find "$debdir" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)"
        [[ -n "$deb" ]] || die "download of $pkg from $suite produced no .deb"
    fi
    # Unpack beside and swap in, so a reader never sees a half-unpacked tree.
    rm -rf "$dest.new" "$dest.old"
    mkdir -p "$dest.new"
    dpkg -x "$deb" "$dest.new"
    echo "$pkg=$version" >"$dest.new/.done"
    [[ -e "$dest" ]] && mv "$dest" "$dest.old"
    mv "$dest.new" "$dest"
    rm -rf "$dest.old"
}

# crictl_bin prints the CRI client to use: $CRICTL if set, else the project's own build.
crictl_bin() {
    if [[ -n "${CRICTL:-}" ]]; then
        echo "$CRICTL"
        return
    fi
    local c
    for c in "$ROOT_DIR/target/debug/nri-align-crictl" "$ROOT_DIR/target/release/nri-align-crictl"; do
        if [[ -x "$c" ]]; then echo "$c"; return; fi
    done
    die "no CRI client: set CRICTL or run 'cargo build -p cri-client'"
}

# instance_vars FLAVOR NAME sets the paths of one private containerd instance.
# shellcheck disable=SC2034 # the variables are for the scripts that source this file
instance_vars() {
    FLAVOR="$1"
    NAME="${2:-default}"
    flavor_suite "$FLAVOR" >/dev/null
    [[ "$NAME" =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad instance name '$NAME'"
    INSTANCE="$FLAVOR-$NAME"
    INST_DIR="$OUTPUT_DIR/containerd/$INSTANCE"
    # Unix socket paths are limited to 107 bytes; a deep checkout falls back to a short private
    # directory under /tmp named after the instance directory.
    SOCK_DIR="$INST_DIR/sock"
    if (( ${#SOCK_DIR} > 80 )); then
        SOCK_DIR="/tmp/nri-align-$(printf '%s' "$INST_DIR" | sha256sum | cut -c1-12)"
    fi
    CTRD_BIN_DIR="$CACHE_DIR/containerd-$FLAVOR/usr/bin"
    # v2.3 is built from source, not unpacked from a .deb: its directory is located.
    if [[ "$FLAVOR" == v2.3 ]]; then
        CTRD_BIN_DIR="$(containerd_locate 2>/dev/null)" || CTRD_BIN_DIR=""
    fi
    RUNC_BIN="$CACHE_DIR/runc-bookworm/usr/sbin/runc"
    CTRD_ROOT="$INST_DIR/root"
    CTRD_STATE="$INST_DIR/state"
    CTRD_CONFIG="$INST_DIR/config.toml"
    CTRD_LOG="$INST_DIR/containerd.log"
    CTRD_PIDFILE="$INST_DIR/containerd.pid"
    CTRD_SOCK="$SOCK_DIR/containerd.sock"
    NRI_SOCK="$SOCK_DIR/nri.sock"
    NRI_PLUGIN_PATH="$INST_DIR/nri/plugins"
    NRI_PLUGIN_CONFIG_PATH="$INST_DIR/nri/conf.d"
    RUNC_ROOT="$INST_DIR/runc"
    CRICTL_CONFIG="$INST_DIR/crictl.yaml"
    ENV_FILE="$INST_DIR/env"
    # cgroupfs parent for the instance's pods (tests put their pods below it), so that
    # containerd-down can remove exactly the cgroups this instance created. The name carries a
    # hash of the output directory: two checkouts on one host (CI beside a developer's tree)
    # must never remove each other's pods.
    CGROUP_PARENT_NAME="nri-align-$(printf '%s' "$OUTPUT_DIR" | sha256sum | cut -c1-8)-$INSTANCE"
}

# daemon_pid prints the PID of the instance's containerd if it is alive and really ours.
daemon_pid() {
    [[ -f "$CTRD_PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$CTRD_PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -d "/proc/$pid" ]] || return 1
    # A recycled PID would not carry our config path on its command line.
    grep -qF -- "$CTRD_CONFIG" < <(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    echo "$pid"
}

# shim_pids prints the PIDs of containerd shims started for this instance (their command line
# names the instance's containerd socket).
shim_pids() {
    local p
    for p in /proc/[0-9]*; do
        if grep -q -- "containerd-shim.* -address $CTRD_SOCK " < <(tr '\0' ' ' 2>/dev/null <"$p/cmdline"); then
            echo "${p#/proc/}"
        fi
    done
}
