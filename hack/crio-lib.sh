# shellcheck shell=bash
# CRI-O helpers for hack/crio-up and hack/crio-down: where the CRI-O build comes from and the
# paths of one private instance. Sourced after lib.sh, never run.

# Exit status of crio-up (and `crio-up --locate`) when no CRI-O build is found: the tests skip
# on exactly this status, and fail on any other error.
# shellcheck disable=SC2034 # used by the scripts that source this file
CRIO_MISSING_RC=3

# crio_candidates prints, one a line, the places a CRI-O build is looked for, in order:
# $CRIO (the crio binary or a directory holding bin/crio or crio), the shared/ folder beside
# this checkout (CI clones the repository with shared/ beside it), the shared/ folder beside
# the main checkout of a git worktree, and /work/shared/crio.
crio_candidates() {
    if [[ -n "${CRIO:-}" ]]; then
        echo "$CRIO"
        return
    fi
    echo "$ROOT_DIR/../shared/crio"
    local common
    if common="$(git -C "$ROOT_DIR" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)"; then
        echo "$(dirname "$common")/../shared/crio"
    fi
    echo /work/shared/crio
}

# crio_locate sets CRIO_BIN, PINNS_BIN and COPYIMG_BIN from the first candidate that holds an
# executable crio, or returns 1 (after saying where it looked) when none does.
crio_locate() {
    local c bin dir
    local looked=()
    while IFS= read -r c; do
        looked+=("$c")
        bin=""
        if [[ -f "$c" && -x "$c" ]]; then
            bin="$c"
        elif [[ -x "$c/bin/crio" ]]; then
            bin="$c/bin/crio"
        elif [[ -x "$c/crio" ]]; then
            bin="$c/crio"
        fi
        [[ -n "$bin" ]] || continue
        dir="$(cd "$(dirname "$bin")" && pwd)"
        CRIO_BIN="$dir/$(basename "$bin")"
        PINNS_BIN="$dir/pinns"
        COPYIMG_BIN="$dir/copyimg"
        [[ -x "$PINNS_BIN" ]] || die "CRI-O at $CRIO_BIN has no pinns beside it ($PINNS_BIN)"
        [[ -x "$COPYIMG_BIN" ]] || die "CRI-O at $CRIO_BIN has no copyimg beside it ($COPYIMG_BIN)"
        return 0
    done < <(crio_candidates)
    log "no CRI-O build found (looked at: ${looked[*]}); CRI-O is in no package registry:" \
        "set CRIO=/path/to/crio (or a directory with bin/crio, bin/pinns, bin/copyimg)"
    return 1
}

# crio_instance_vars NAME sets the paths of one private CRI-O instance.
# shellcheck disable=SC2034 # the variables are for the scripts that source this file
crio_instance_vars() {
    NAME="${1:-default}"
    [[ "$NAME" =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad instance name '$NAME'"
    INSTANCE="crio-$NAME"
    INST_DIR="$OUTPUT_DIR/crio/$NAME"
    # Unix socket paths are limited to 107 bytes (as for containerd).
    SOCK_DIR="$INST_DIR/sock"
    if (( ${#SOCK_DIR} > 80 )); then
        SOCK_DIR="/tmp/nri-align-$(printf '%s' "$INST_DIR" | sha256sum | cut -c1-12)"
    fi
    CONMON_BIN="$CACHE_DIR/conmon-bookworm/usr/bin/conmon"
    RUNC_BIN="$CACHE_DIR/runc-bookworm/usr/sbin/runc"
    CNI_BIN_DIR="$CACHE_DIR/cni-bookworm/usr/lib/cni"
    CRIO_LIB_PATH="$CACHE_DIR/libseccomp2-bookworm/usr/lib/$(uname -m)-linux-gnu"
    CRIO_LIB_PATH+=":$CACHE_DIR/libsqlite3-bookworm/usr/lib/$(uname -m)-linux-gnu"
    CRIO_LIB_PATH+=":$CACHE_DIR/libglib2-bookworm/usr/lib/$(uname -m)-linux-gnu"
    CRIO_ROOT="$INST_DIR/root"
    CRIO_RUNROOT="$INST_DIR/runroot"
    CRIO_CONFIG="$INST_DIR/crio.conf"
    CRIO_CONFIG_DIR="$INST_DIR/crio.conf.d"
    CRIO_LOG="$INST_DIR/crio.log"
    CRIO_PIDFILE="$INST_DIR/crio.pid"
    CRIO_SOCK="$SOCK_DIR/crio.sock"
    NRI_SOCK="$SOCK_DIR/nri.sock"
    NRI_PLUGIN_PATH="$INST_DIR/nri/plugins"
    NRI_PLUGIN_CONFIG_PATH="$INST_DIR/nri/conf.d"
    RUNC_ROOT="$INST_DIR/runc"
    NAMESPACES_DIR="$INST_DIR/ns"
    CRICTL_CONFIG="$INST_DIR/crictl.yaml"
    ENV_FILE="$INST_DIR/env"
    CGROUP_MANAGER="${CGROUP_MANAGER:-cgroupfs}"
    # As for containerd: under cgroupfs the pods of this instance live under one cgroup parent
    # that carries a hash of the output directory, and crio-down removes exactly that subtree.
    # Under systemd a parent must be a slice: the kubelet's kubepods.slice (tests pick the QoS
    # and pod slices below it, as containerd-up's systemd driver does).
    case "$CGROUP_MANAGER" in
        cgroupfs)
            CGROUP_PARENT="/nri-align-$(printf '%s' "$OUTPUT_DIR" | sha256sum | cut -c1-8)-$INSTANCE"
            ;;
        systemd) CGROUP_PARENT="kubepods.slice" ;;
        *) die "CGROUP_MANAGER must be cgroupfs or systemd, not '$CGROUP_MANAGER'" ;;
    esac
}

# crio_daemon_pid prints the PID of the instance's crio if it is alive and really ours.
crio_daemon_pid() {
    [[ -f "$CRIO_PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$CRIO_PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -d "/proc/$pid" ]] || return 1
    # A recycled PID would not carry our config path on its command line.
    grep -qF -- "$CRIO_CONFIG" < <(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    echo "$pid"
}

# conmon_pids prints the PIDs of conmon processes of this instance (their command line names
# the instance's runc root or a bundle under the instance directory).
conmon_pids() {
    local p cmd
    for p in /proc/[0-9]*; do
        cmd="$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" || continue
        [[ "$cmd" == *conmon* ]] || continue
        if [[ "$cmd" == *"$INST_DIR/"* || "$cmd" == *"$RUNC_ROOT"* ]]; then
            echo "${p#/proc/}"
        fi
    done
}
