# shellcheck shell=bash
# QEMU's monitor (QMP) for the guest of hack/vm-lib.sh: CPU hot-unplug and hot-plug on request
# of the test running inside the guest. Sourced by vm-lib.sh, never run.
#
# The guest cannot reach the host's sockets; it shares the run directory (9p, read-write, not
# cached). So the test writes a request file into RUN/qmp/ and a helper started beside QEMU
# (vm_qmp_helper) performs it through QMP and writes the answer next to it:
#   RUN/qmp/NAME.req   one line, written under another name and renamed (never seen half-written):
#                        unplug cpuN   device_del, then wait until QEMU's slot is empty (the guest
#                                      kernel offlines the CPU and ejects it through ACPI)
#                        plug cpuN     device_add of the same CPU (same socket, core, thread)
#                        cpus          `unplug: yes` or `unplug: no (WHY)`, then
#                                      query-hotpluggable-cpus, verbatim
#   RUN/qmp/NAME.ans   `ok` (plus QEMU's answer for `cpus`) or `error: WHY`; the request is
#                      renamed to NAME.done
# Unplugging needs multi-threaded TCG (NRI_ALIGN_VM_TCG_THREAD=multi, as the systemd guest runs in
# hack/test): with one TCG thread for every vCPU, QEMU 7.2 aborts when the guest ejects a CPU
# (`qemu_thread_join: Resource deadlock avoided`: the vCPU thread that handles the ejection
# would join itself), so the helper refuses and the test skips.
# Only the CPUs the guest was started with as devices can be named (`nri-align emulate
# --qemu-args --hotplug-cpus` makes every CPU but the boot CPU one: QEMU unplugs only CPUs that
# were added as devices with an id). RUN/qmp.log keeps every QMP line both ways.
#
# The helper speaks QMP over a pipe chardev (RUN/qmp-ctl.in / .out, FIFOs), so plain bash
# suffices on the host. Operators get a QMP socket of their own too, RUN/qmp.sock
# (`socat - UNIX-CONNECT:RUN/qmp.sock`, then {"execute":"qmp_capabilities"}).
# Protocol: QEMU's docs/interop/qmp-spec.rst (greeting, qmp_capabilities, one JSON object per
# line, an "id" member echoed in the reply, asynchronous events with "event").

# vm_qmp_args RUN: prints the QEMU arguments of both monitors, one per line, and makes the FIFOs
# and the request directory.
vm_qmp_args() {
    local run="$1"
    rm -f "$run/qmp-ctl.in" "$run/qmp-ctl.out" "$run/qmp.sock"
    mkfifo "$run/qmp-ctl.in" "$run/qmp-ctl.out"
    # Requests and answers of an earlier boot of this run directory mean nothing to this one.
    rm -rf "$run/qmp"
    mkdir -p "$run/qmp"
    printf '%s\n' -chardev "pipe,id=qmpctl,path=$run/qmp-ctl" -mon "chardev=qmpctl,mode=control"
    # A unix socket's path is limited to 107 bytes: a deeper run directory gets no socket.
    if ((${#run} < 95)); then
        printf '%s\n' -qmp "unix:$run/qmp.sock,server=on,wait=off"
    fi
}

# vm_qmp_start RUN QEMU_PID: starts the helper in the background (VM_QMP_PID) for the QEMU
# process QEMU_PID (it stops when that process is gone).
vm_qmp_start() {
    vm_qmp_helper "$1" "$2" >>"$1/qmp.log" 2>&1 &
    VM_QMP_PID=$!
}

# vm_qmp_stop: stops the helper by the PID vm_qmp_start recorded.
vm_qmp_stop() {
    if [[ -n "${VM_QMP_PID:-}" ]]; then
        kill -TERM "$VM_QMP_PID" 2>/dev/null || true
        wait "$VM_QMP_PID" 2>/dev/null || true
        VM_QMP_PID=""
    fi
}

# vm_qmp_helper RUN QEMU_PID: the request loop (see the top of this file).
vm_qmp_helper() {
    local run="$1" qemu_pid="$2"
    # A background subshell of a `set -euo pipefail` script: a grep that stops early (-q) must
    # not count as a failure, nor a failed step end the helper; each step checks its result.
    set +e +o pipefail
    QMP_LOG="$run/qmp.log"
    QMP_SEQ=0
    QMP_PARTIAL=""
    # Read-write opens of a FIFO never block, whether or not QEMU has opened its end yet.
    exec {QMP_IN}<>"$run/qmp-ctl.in" {QMP_OUT}<>"$run/qmp-ctl.out"
    vm_qmp_wait '"QMP"' 60 || { echo "# no QMP greeting"; return 1; }
    vm_qmp_exec '"execute":"qmp_capabilities"' || { echo "# qmp_capabilities: $QMP_REPLY"; return 1; }
    local req name line verb id
    while kill -0 "$qemu_pid" 2>/dev/null; do
        for req in "$run"/qmp/*.req; do
            [[ -f "$req" ]] || continue
            name="${req%.req}"
            line="$(head -c 200 "$req" | head -n 1)"
            read -r verb id _ <<<"$line"
            vm_qmp_request "$run" "$verb" "${id:-}"
            printf '%s\n' "$QMP_ANSWER" >"$name.ans.tmp"
            mv "$name.ans.tmp" "$name.ans"
            mv "$req" "$name.done"
        done
        vm_qmp_read 0.5 || true
    done
}

# vm_qmp_request RUN VERB ID: performs one request; the answer is in QMP_ANSWER. (Not run in a
# command substitution: the helper's state, the command ids and a half-read line, must stay.)
vm_qmp_request() {
    local run="$1" verb="$2" id="$3" dev
    local single="QEMU runs single-threaded TCG (NRI_ALIGN_VM_TCG_THREAD=multi to unplug)"
    [[ "${NRI_ALIGN_VM_TCG_THREAD:-single}" == single ]] || single=""
    if [[ "$verb" == cpus ]]; then
        QMP_ANSWER="error: $QMP_REPLY"
        vm_qmp_exec '"execute":"query-hotpluggable-cpus"' && QMP_ANSWER="ok"
        local can="yes"
        [[ -n "$single" ]] && can="no ($single)"
        QMP_ANSWER+=$'\n'"unplug: $can"$'\n'"$QMP_REPLY"
        return
    fi
    if [[ ! "$id" =~ ^cpu[0-9]{1,4}$ ]]; then
        QMP_ANSWER="error: bad CPU id '$id'"
        return
    fi
    dev="$(grep -m1 -E "^$id " "$run/qmp-cpus" 2>/dev/null | cut -d' ' -f2)"
    if [[ -z "$dev" ]]; then
        QMP_ANSWER="error: $id is not a hot-pluggable CPU of this guest"
        return
    fi
    case "$verb" in
        unplug)
            if [[ -n "$single" ]]; then
                QMP_ANSWER="error: unplug refused: $single"
                return
            fi
            if ! vm_qmp_exec "\"execute\":\"device_del\",\"arguments\":{\"id\":\"$id\"}"; then
                QMP_ANSWER="error: device_del: $QMP_REPLY"
                return
            fi
            # device_del only asks: the guest's kernel offlines the CPU and ejects it through
            # ACPI, which under TCG on a loaded host takes a while. Done when the slot is empty
            # (no qom-path): QEMU 7.2 sends DEVICE_DELETED for the CPU's lapic child only, not
            # for the CPU itself, so the event cannot be waited for.
            QMP_ANSWER="error: $id still plugged 180s after device_del (see qmp.log)"
            local deadline=$((SECONDS + 180))
            while ((SECONDS < deadline)); do
                if vm_qmp_exec '"execute":"query-hotpluggable-cpus"' \
                    && [[ "$QMP_REPLY" != *"\"/machine/peripheral/$id\""* ]]; then
                    QMP_ANSWER=ok
                    break
                fi
                vm_qmp_read 1 || true
            done
            ;;
        plug)
            QMP_ANSWER=ok
            vm_qmp_exec "\"execute\":\"device_add\",\"arguments\":{$(vm_qmp_device_json "$dev")}" \
                || QMP_ANSWER="error: device_add: $QMP_REPLY"
            ;;
        *) QMP_ANSWER="error: unknown request '$verb' (want unplug, plug or cpus)" ;;
    esac
}

# vm_qmp_device_json DEVICE_ARGS: `DRIVER,k=v,...` as QMP device_add arguments (numbers stay
# numbers: device_add takes typed JSON).
vm_qmp_device_json() {
    local IFS=, kv k v out=""
    local -a parts
    read -ra parts <<<"$1"
    out="\"driver\":\"${parts[0]}\""
    for kv in "${parts[@]:1}"; do
        k="${kv%%=*}"; v="${kv#*=}"
        if [[ "$v" =~ ^[0-9]+$ ]]; then
            out+=",\"$k\":$v"
        else
            out+=",\"$k\":\"$v\""
        fi
    done
    echo "$out"
}

# vm_qmp_exec 'JSON MEMBERS': sends a command with a fresh id and waits (60 s) for its reply;
# the reply line is in QMP_REPLY. Succeeds when the reply is a "return".
vm_qmp_exec() {
    QMP_SEQ=$((QMP_SEQ + 1))
    local id="r$QMP_SEQ" mark
    mark="$(wc -l <"$QMP_LOG")"
    printf '{%s,"id":"%s"}\n' "$1" "$id" >&"$QMP_IN"
    printf '> {%s,"id":"%s"}\n' "$1" "$id" >>"$QMP_LOG"
    QMP_REPLY="no reply within 60s"
    vm_qmp_wait "\"id\": *\"$id\"" 60 "$mark" || return 1
    QMP_REPLY="$(tail -n +"$((mark + 1))" "$QMP_LOG" | grep -v '^> ' | grep -E "\"id\": *\"$id\"" | tail -n 1)"
    [[ "$QMP_REPLY" == *'"return"'* ]]
}

# vm_qmp_wait REGEX SECONDS [MARK]: waits until a line QEMU sent after line MARK of the log
# matches.
vm_qmp_wait() {
    local re="$1" deadline=$((SECONDS + $2)) mark="${3:-0}"
    while ((SECONDS < deadline)); do
        tail -n +"$((mark + 1))" "$QMP_LOG" | grep -v '^> ' | grep -qE "$re" && return 0
        vm_qmp_read 1 || true
    done
    return 1
}

# vm_qmp_read SECONDS: appends the lines QEMU sent (within SECONDS) to the log.
vm_qmp_read() {
    local chunk rc
    while true; do
        chunk=""
        if IFS= read -r -t "$1" chunk <&"$QMP_OUT"; then
            printf '%s\n' "$QMP_PARTIAL$chunk" >>"$QMP_LOG"
            QMP_PARTIAL=""
            continue
        fi
        rc=$?
        # A timeout keeps what was read of a line so far.
        ((rc > 128)) && QMP_PARTIAL+="$chunk"
        return 1
    done
}
