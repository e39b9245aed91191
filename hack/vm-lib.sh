# shellcheck shell=bash
# The QEMU guest of hack/vm-e2e and hack/demo: built from Debian packages only (bookworm's kernel,
# busybox-static, the harness's containerd and runc), shaped by a shipped host description
# (`nri-align emulate --host NAME --qemu-args`), booted with TCG under `timeout`, stopped by PID.
# Sourced after lib.sh, never run.
#
# The guest's root is an initramfs holding busybox, bash, the shared libraries of every binary
# the guest runs, /init (hack/vm/init) and the few kernel modules it needs. Everything else comes
# over 9p at the same path as on the host, so the harness scripts and the test binaries find
# their files where they were built: the checkout and cargo's target directory (read-only), the
# download cache (read-only) and the run directory (read-write: job, logs, exit status).
#
# Knobs (env): NRI_ALIGN_VM_HOST (description, default vm-2s4n), NRI_ALIGN_VM_FLAVOR (containerd
# build, default sid), NRI_ALIGN_VM_BOOT_TIMEOUT (seconds of QEMU's CPU time until the guest says ready, 240),
# NRI_ALIGN_VM_TRIES (boots tried when a guest hangs early, 3), NRI_ALIGN_VM_TIMEOUT (seconds
# for one guest run, 900; per runtime with --crio), NRI_ALIGN_VM_TCG_THREAD (single or multi, the
# TCG threading; single), NRI_ALIGN_VM_DEV_CHAR_LINKS (0: no /dev/char/195:N links to the GPU
# stand-ins, see hack/vm/guest-run; 1), NRI_ALIGN_VM_HOTPLUG_CPUS (0, the default: every CPU
# in -smp, none that QEMU's monitor can unplug; 1: all but the boot CPU as devices, see
# hack/vm-qmp.sh: on a 2-core host the guest stalls while ejecting a CPU, so it is opt-in).
#
# QEMU's monitor: a QMP socket RUN/qmp.sock for operators, and a helper beside QEMU that
# unplugs and plugs CPUs when the test in the guest asks for it (hack/vm-qmp.sh).

source "$HACK_DIR/vm-qmp.sh"

VM_HOST_DESC="${NRI_ALIGN_VM_HOST:-vm-2s4n}"
VM_FLAVOR="${NRI_ALIGN_VM_FLAVOR:-sid}"
VM_BOOT_TIMEOUT="${NRI_ALIGN_VM_BOOT_TIMEOUT:-240}"
VM_TRIES="${NRI_ALIGN_VM_TRIES:-3}"
VM_TIMEOUT="${NRI_ALIGN_VM_TIMEOUT:-900}"
VM_DIR="$OUTPUT_DIR/vm"
KERNEL_DIR="$CACHE_DIR/kernel-bookworm"
# Modules the guest loads (their dependencies are added): virtio PCI transport and 9p for the
# shares, overlayfs for containerd's snapshotter, e1000e so the NIC stand-ins get netdevs.
VM_MODULES=(virtio_pci 9pnet_virtio 9p overlay e1000e)
# Set by a guest variant (hack/vm-systemd.sh) before vm_run: more QEMU arguments (a disk), more
# kernel command line, more KEY=VALUE for the job's environment.
VM_QEMU_EXTRA=()
VM_APPEND_EXTRA=""
VM_JOB_ENV=()
# More TAG:PATH:ro|rw shares, each at its host path (hack/vm-e2e --crio: the CRI-O build).
VM_SHARES_EXTRA=()
# Appended to the run directory's name (_output/vm/JOB-SUFFIX), so variants keep their own logs.
VM_RUN_SUFFIX=""

# vm_fill_cache: downloads what the guest needs into .cache/ (serialised with the harness's
# lock, as containerd-up does): containerd, runc, the images, and the kernel.
vm_fill_cache() {
    mkdir -p "$CACHE_DIR"
    exec 8>"$CACHE_DIR/.lock"
    flock 8
    fetch_deb "$(flavor_suite "$VM_FLAVOR")" containerd "$CACHE_DIR/containerd-$VM_FLAVOR"
    fetch_deb bookworm runc "$CACHE_DIR/runc-bookworm"
    "$HACK_DIR/build-images" >/dev/null
    vm_fetch_kernel
    flock -u 8
    exec 8>&-
}

# vm_fetch_kernel: bookworm's current kernel image package (the one the linux-image-amd64
# metapackage depends on), unpacked into .cache/kernel-bookworm.
vm_fetch_kernel() {
    if [[ -f "$KERNEL_DIR/.done" ]] && { [[ "${NRI_ALIGN_OFFLINE:-0}" == 1 ]] \
        || [[ -n "$(find "$KERNEL_DIR/.done" -mmin -1440)" ]]; }; then
        return 0
    fi
    apt_refresh bookworm
    local pkg
    pkg="$(apt_private apt-cache bookworm show linux-image-amd64 2>/dev/null \
        | sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]*-amd64\).*/\1/p' | sed -n 1p)"
    [[ -n "$pkg" ]] || die "cannot resolve linux-image-amd64 in bookworm"
    fetch_deb bookworm "$pkg" "$KERNEL_DIR"
}

# vm_kernel_version prints the version directory under lib/modules of the unpacked kernel.
vm_kernel_version() {
    local d
    for d in "$KERNEL_DIR"/lib/modules/*/; do
        basename "$d"
        return 0
    done
    die "no kernel modules under $KERNEL_DIR"
}

# vm_module_closure MODDIR NAME...: prints the module files (relative to MODDIR) to load for the
# NAMEs, dependencies first. Built-in modules are skipped. Dependencies come from each module's
# own modinfo (`depends=`), so no depmod is needed on the host.
vm_module_closure() {
    local moddir="$1"; shift
    local -A path_of=() seen_mod=()
    local f n
    while IFS= read -r f; do
        n="$(basename "$f" .ko)"
        path_of["${n//-/_}"]="${f#"$moddir"/}"
    done < <(find "$moddir/kernel" -name '*.ko')
    visit() {
        local name="${1//-/_}" dep
        [[ -n "${seen_mod[$name]:-}" ]] && return 0
        seen_mod[$name]=1
        if [[ -z "${path_of[$name]:-}" ]]; then
            grep -q "/${name}.ko\$" "$moddir/modules.builtin" 2>/dev/null \
                || grep -q "/${1}.ko\$" "$moddir/modules.builtin" 2>/dev/null \
                || die "kernel module $1 is neither a module nor built in"
            return 0
        fi
        for dep in $(tr '\0' '\n' <"$moddir/${path_of[$name]}" | sed -n 's/^depends=//p' | tr ',' ' '); do
            visit "$dep"
        done
        echo "${path_of[$name]}"
    }
    for n in "$@"; do visit "$n"; done
}

# vm_copy_libs STAGE BINARY...: copies the shared libraries (and the dynamic loader) the binaries
# need into STAGE at the paths ldd reports.
vm_copy_libs() {
    local stage="$1"; shift
    local bin lib
    for bin in "$@"; do
        [[ -e "$bin" ]] || die "missing binary $bin"
        while IFS= read -r lib; do
            [[ -n "$lib" ]] || continue
            mkdir -p "$stage$(dirname "$lib")"
            cp -L "$lib" "$stage$lib"
        done < <(ldd "$bin" 2>/dev/null | awk '/=> \// {print $3} /^\t\// {print $1}')
    done
}

# vm_initramfs OUT BINARY...: writes the guest's initramfs (uncompressed newc cpio) to OUT,
# with the libraries of BINARY... (the binaries themselves stay on the 9p shares).
vm_initramfs() {
    local out="$1"; shift
    local busybox="$CACHE_DIR/busybox-bookworm/bin/busybox"
    local kver moddir stage a m
    kver="$(vm_kernel_version)"
    moddir="$KERNEL_DIR/lib/modules/$kver"
    stage="$(mktemp -d "$VM_DIR/initramfs.XXXXXX")"
    mkdir -p "$stage"/{bin,dev,etc,proc,sys,run,tmp,root,newroot,lib/modules,var/run}
    ln -s bin "$stage/sbin"
    mkdir -p "$stage/usr"
    ln -s ../bin "$stage/usr/bin"
    ln -s ../bin "$stage/usr/sbin"
    cp "$busybox" "$stage/bin/busybox"
    for a in $("$busybox" --list); do
        [[ "$a" == busybox ]] || ln -sf busybox "$stage/bin/$a"
    done
    # bash runs the harness scripts (hack/containerd-up...) inside the guest; they also use
    # flock, which busybox lacks. Both come from the host (Debian), with their libraries.
    local tool
    for tool in bash flock; do
        cp -L "$(command -v "$tool")" "$stage/bin/$tool"
        vm_copy_libs "$stage" "$stage/bin/$tool"
    done
    vm_copy_libs "$stage" "$@"
    install -m 755 "$HACK_DIR/vm/init" "$stage/init"
    : >"$stage/etc/modules.load"
    while IFS= read -r m; do
        mkdir -p "$stage/lib/modules/$(dirname "$m")"
        cp "$moddir/$m" "$stage/lib/modules/$m"
        echo "$m" >>"$stage/etc/modules.load"
    done < <(vm_module_closure "$moddir" "${VM_MODULES[@]}")
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$stage/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"
    printf '127.0.0.1 localhost nri-align-guest\n' >"$stage/etc/hosts"
    # containerd copies it into every host-network pod; the guest has no DNS.
    : >"$stage/etc/resolv.conf"
    (cd "$stage" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc 2>/dev/null) >"$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$stage"
}

# vm_boot RUN_DIR SHARE...: boots the guest for the job in RUN_DIR/job (SHARE: TAG:PATH:ro|rw;
# RUN_DIR must be one of them, rw), streams its console to stderr, and returns the job's exit
# status once the guest has powered off. A guest that does not report ready within
# VM_BOOT_TIMEOUT (TCG guests occasionally hang early in boot on a loaded host) is killed and
# booted again, up to VM_TRIES times.
vm_boot() {
    local run="$1"; shift
    local kver cmd_shares="" s tag rest path mode
    kver="$(vm_kernel_version)"
    local -a qemu=(qemu-system-x86_64 -accel "tcg,thread=${NRI_ALIGN_VM_TCG_THREAD:-single}" -nodefaults -display none -no-reboot
        -monitor none -pidfile "$run/qemu.pid"
        -kernel "$KERNEL_DIR/boot/vmlinuz-$kver" -initrd "$run/initramfs.cpio")
    if [[ "${VM_SERIAL:-}" == stdio ]]; then
        qemu+=(-chardev "stdio,id=con,signal=off,logfile=$run/console.log" -serial chardev:con)
    else
        qemu+=(-serial "file:$run/console.log")
    fi
    local i=0
    for s in "$@"; do
        tag="${s%%:*}"; rest="${s#*:}"; path="${rest%:*}"; mode="${rest##*:}"
        [[ "$path" =~ ^/[A-Za-z0-9_./+-]*$ ]] || die "share path '$path' has characters the kernel command line cannot carry"
        local ro=""
        [[ "$mode" == ro ]] && ro=",readonly=on"
        qemu+=(-fsdev "local,id=fs$i,path=$path,security_model=none,multidevs=remap$ro"
            -device "virtio-9p-pci,fsdev=fs$i,mount_tag=$tag,bus=pcie.0")
        cmd_shares+="${cmd_shares:+,}$tag:$path:$mode"
        i=$((i + 1))
    done
    local shape
    local -a hotplug=()
    [[ "${NRI_ALIGN_VM_HOTPLUG_CPUS:-0}" == 1 ]] && hotplug=(--hotplug-cpus)
    shape="$("$NRI_ALIGN_BIN" emulate --host "$VM_HOST_DESC" --qemu-args "${hotplug[@]}")" \
        || die "nri-align emulate --host $VM_HOST_DESC --qemu-args failed"
    [[ -n "$shape" ]] || die "no QEMU arguments for $VM_HOST_DESC (invalid description?)"
    mapfile -t -O "${#qemu[@]}" qemu <<<"$shape"
    # The CPUs the QMP helper may unplug and plug: `cpuN DEVICE-ARGS`.
    grep -E '^[a-z0-9]+-x86_64-cpu,id=cpu[0-9]+,' <<<"$shape" \
        | sed -E 's/^([^,]*,id=(cpu[0-9]+),.*)$/\2 \1/' >"$run/qmp-cpus" || true
    qemu+=("${VM_QEMU_EXTRA[@]}")
    # mitigations=off: the guest is a throwaway test machine, and under TCG the page-table
    # isolation and speculation workarounds the kernel turns on for this CPU model cost every
    # system call a flush of QEMU's soft TLB; without them the suites ran about 10 % faster.
    # no_timer_check: on a busy host the emulated timer's first interrupts can come late
    # enough that the kernel's boot-time check panics ("IO-APIC + timer doesn't work!").
    qemu+=(-append "console=ttyS0 loglevel=5 panic=-1 mitigations=off no_timer_check nra.run=$run nra.shares=$cmd_shares${VM_APPEND_EXTRA:+ $VM_APPEND_EXTRA}")
    printf '%q ' "${qemu[@]}" >"$run/qemu.cmdline"
    if [[ "${VM_SERIAL:-}" == stdio ]]; then
        # Interactive: the console is this terminal; no hang detection.
        local -a monitors
        mapfile -t monitors < <(vm_qmp_args "$run")
        vm_qmp_start "$run" $$
        timeout --foreground --kill-after=10 "$VM_TIMEOUT" "${qemu[@]}" "${monitors[@]}"
        return
    fi

    local try
    for try in $(seq "$VM_TRIES"); do
        rm -f "$run/console.log" "$run/qemu.pid" "$run/job.rc" "$run/job.log"
        : >"$run/console.log"
        # `timeout` bounds the whole guest even if this script dies; the guest is stopped by
        # the PID QEMU writes, never by name.
        local -a monitors
        mapfile -t monitors < <(vm_qmp_args "$run")
        timeout --kill-after=10 "$VM_TIMEOUT" "${qemu[@]}" "${monitors[@]}" </dev/null >>"$run/qemu.log" 2>&1 &
        VM_TIMEOUT_PID=$!
        vm_qmp_start "$run" "$VM_TIMEOUT_PID"
        # The boot budget is QEMU's CPU time, not the clock's: a niced guest beside other work
        # (hack/test runs three beside `cargo test`) may get a small share of a CPU for minutes
        # and is not hung for that. A guest hung idle uses no CPU, so the clock still bounds
        # the wait, at four times the budget.
        local t0=$SECONDS ready=0 cpu=0
        while ((cpu < VM_BOOT_TIMEOUT && SECONDS - t0 < 4 * VM_BOOT_TIMEOUT)); do
            if grep -q '^nri-align-guest: ready' "$run/console.log" 2>/dev/null; then
                ready=1
                break
            fi
            kill -0 "$VM_TIMEOUT_PID" 2>/dev/null || break
            sleep 1
            cpu="$(vm_cpu_secs "$run")"
        done
        if ((ready)); then
            log "guest up after $((SECONDS - t0))s, $(vm_cpu_secs "$run")s of CPU (boot $try of $VM_TRIES)"
            break
        fi
        log "guest not ready after $((SECONDS - t0))s, ${cpu}s of CPU (boot $try of $VM_TRIES); console tail:"
        tail -n 15 "$run/console.log" >&2 || true
        vm_down "$run"
    done
    ((ready)) || die "the guest did not boot in $VM_TRIES tries (see $run/console.log, $run/qemu.log)"

    # Follow the console on stdout until QEMU exits (the guest powers off when its job ends);
    # VM_CONSOLE_QUIET=1 leaves out the kernel's and init's own lines (they stay in console.log).
    local hide='^nri-align-guest: ready'
    [[ -n "${VM_CONSOLE_QUIET:-}" ]] && hide='^\[ *[0-9]+\.[0-9]+\] |^nri-align-guest: '
    tail -n +1 -f --pid="$VM_TIMEOUT_PID" "$run/console.log" | grep --line-buffered -Ev "$hide" &
    local tail_pid=$!
    # A guest whose CPUs stay stuck in the kernel (the watchdog reports soft lockups of two
    # minutes or more) will not recover: stop it now rather than at the timeout.
    while kill -0 "$VM_TIMEOUT_PID" 2>/dev/null; do
        if vm_stuck "$run/console.log"; then
            log "the guest is stuck (kernel soft lockup); stopping it"
            vm_down "$run"
            wait "$tail_pid" 2>/dev/null || true
            return 125
        fi
        sleep 2
    done
    wait "$VM_TIMEOUT_PID" || true
    VM_TIMEOUT_PID=""
    wait "$tail_pid" 2>/dev/null || true
    if [[ ! -f "$run/job.rc" ]]; then
        log "the guest stopped without finishing its job (timeout ${VM_TIMEOUT}s?); see $run/console.log"
        return 124
    fi
    return "$(cat "$run/job.rc")"
}

# vm_cpu_secs RUN_DIR: the CPU time (user + system, whole seconds) the guest's QEMU has used so
# far; 0 before QEMU wrote its PID.
vm_cpu_secs() {
    local pid="" stat
    [[ -f "$1/qemu.pid" ]] && pid="$(cat "$1/qemu.pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && stat="$(cat "/proc/$pid/stat" 2>/dev/null)"; then
        # Fields after the command name (which may hold spaces): utime and stime are the 12th
        # and 13th, in clock ticks.
        awk -v hz="$(getconf CLK_TCK)" '{ print int(($12 + $13) / hz) }' <<<"${stat##*) }"
    else
        echo 0
    fi
}

# vm_stuck CONSOLE_LOG: whether the kernel reported a CPU stuck for 120 s or more.
vm_stuck() {
    grep -o 'soft lockup - CPU#[0-9]* stuck for [0-9]*s' "$1" 2>/dev/null \
        | awk '{ s = $NF; sub(/s$/, "", s); if (s + 0 >= 120) found = 1 } END { exit !found }'
}

# vm_down RUN_DIR: stops the guest by the PID QEMU recorded (TERM, then KILL), and its timeout.
vm_down() {
    local run="$1" pid=""
    [[ -f "$run/qemu.pid" ]] && pid="$(cat "$run/qemu.pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && [[ -d "/proc/$pid" ]] \
        && grep -qF -- "$run/qemu.pid" < <(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null); then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do [[ -d "/proc/$pid" ]] || break; sleep 0.1; done
        [[ -d "/proc/$pid" ]] && kill -KILL "$pid" 2>/dev/null
    fi
    vm_qmp_stop
    if [[ -n "${VM_TIMEOUT_PID:-}" ]]; then
        kill -TERM "$VM_TIMEOUT_PID" 2>/dev/null || true
        wait "$VM_TIMEOUT_PID" 2>/dev/null || true
        VM_TIMEOUT_PID=""
    fi
    rm -f "$run/qemu.pid"
}

# vm_build [TEST]: builds (debug) nri-align, the CRI client and the fake NVML library, and with
# TEST the named integration test binary, and sets NRI_ALIGN_BIN, CRICTL_BIN (honouring
# $CRICTL), FAKE_NVML_LIB, TARGET_BIN_DIR and VM_TEST_BIN.
vm_build() {
    local test="${1:-}"
    # VM_PREBUILT_BIN_DIR and VM_PREBUILT_TEST_BIN (set by hack/test, which builds everything
    # first): use those and run no cargo, so that a guest started beside `cargo test` does not
    # wait for the build directory's lock, which cargo holds while the tests run.
    if [[ -n "${VM_PREBUILT_BIN_DIR:-}" ]]; then
        TARGET_BIN_DIR="$VM_PREBUILT_BIN_DIR"
        NRI_ALIGN_BIN="$TARGET_BIN_DIR/nri-align"
        FAKE_NVML_LIB="$TARGET_BIN_DIR/libfake_nvml.so"
        CRICTL_BIN="${CRICTL:-$TARGET_BIN_DIR/nri-align-crictl}"
        VM_TEST_BIN="${VM_PREBUILT_TEST_BIN:-}"
        [[ -x "$NRI_ALIGN_BIN" && -f "$FAKE_NVML_LIB" ]] || die "VM_PREBUILT_BIN_DIR=$TARGET_BIN_DIR lacks nri-align or libfake_nvml.so"
        [[ -z "$test" || -x "$VM_TEST_BIN" ]] || die "VM_PREBUILT_TEST_BIN='$VM_TEST_BIN' is not an executable"
        return 0
    fi
    command -v cargo >/dev/null || die "cargo not found: install the Rust toolchain first"
    (cd "$ROOT_DIR" && cargo build --locked -q -p nri-align -p cri-client -p fake-nvml) \
        || die "cargo build failed"
    local dir
    dir="$(cd "$ROOT_DIR" && cargo metadata --locked --format-version 1 --no-deps \
        | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    [[ -n "$dir" ]] || die "cannot find cargo's target directory"
    TARGET_BIN_DIR="$dir/debug"
    NRI_ALIGN_BIN="$TARGET_BIN_DIR/nri-align"
    FAKE_NVML_LIB="$TARGET_BIN_DIR/libfake_nvml.so"
    CRICTL_BIN="${CRICTL:-$TARGET_BIN_DIR/nri-align-crictl}"
    VM_TEST_BIN=""
    if [[ -n "$test" ]]; then
        VM_TEST_BIN="$(cd "$ROOT_DIR" && cargo test --locked -q --no-run --test "$test" \
            --message-format=json | grep -o "\"executable\":\"[^\"]*/${test}-[^\"]*\"" \
            | tail -1 | cut -d'"' -f4)"
        [[ -x "$VM_TEST_BIN" ]] || die "cargo test --no-run --test $test built no test binary"
    fi
}

# vm_run JOB ARGS...: builds the initramfs, boots the guest for `hack/vm/guest-run JOB ARGS...`
# in the run directory _output/vm/JOB$VM_RUN_SUFFIX (kept for post-mortems: console.log, job.log) and returns
# the job's exit status. vm_build must have run. The guest is stopped on return, also on
# interruption.
vm_run() {
    local job="$1"; shift
    VM_RUN_DIR="$VM_DIR/$job$VM_RUN_SUFFIX"
    local run="$VM_RUN_DIR"
    vm_down "$run" 2>/dev/null || true
    rm -rf "$run"
    mkdir -p "$run"
    local -a bins=("$NRI_ALIGN_BIN" "$CRICTL_BIN" "$FAKE_NVML_LIB"
        "$CACHE_DIR/containerd-$VM_FLAVOR/usr/bin/"* "$CACHE_DIR/runc-bookworm/usr/sbin/runc")
    [[ -n "$VM_TEST_BIN" ]] && bins+=("$VM_TEST_BIN")
    vm_initramfs "$run/initramfs.cpio" "${bins[@]}"

    # Shares, each at its host path: the checkout, cargo's binaries when they live elsewhere,
    # the CRI client's directory when $CRICTL points outside both, the cache, the run dir.
    local -a shares=("repo:$ROOT_DIR:ro")
    local target="${TARGET_BIN_DIR%/*}"
    [[ "$target/" == "$ROOT_DIR/"* ]] || shares+=("target:$target:ro")
    local crictl_dir="${CRICTL_BIN%/*}"
    if [[ "$crictl_dir/" != "$ROOT_DIR/"* ]] && [[ "$crictl_dir/" != "$target/"* ]]; then
        shares+=("crictl:$crictl_dir:ro")
    fi
    shares+=("${VM_SHARES_EXTRA[@]}" "cache:$CACHE_DIR:ro" "run:$run:rw")

    local -a env=(VM_RUN="$run" NRI_ALIGN_BIN="$NRI_ALIGN_BIN" CRICTL="$CRICTL_BIN"
        NRI_ALIGN_FAKE_NVML="$FAKE_NVML_LIB" HOST_CACHE="$CACHE_DIR"
        NRI_ALIGN_VM_HOST="$VM_HOST_DESC" NRI_ALIGN_VM_FLAVOR="$VM_FLAVOR"
        NRI_ALIGN_VM_DEV_CHAR_LINKS="${NRI_ALIGN_VM_DEV_CHAR_LINKS:-1}"
        VM_TEST_BIN="$VM_TEST_BIN" HOME=/root RUST_BACKTRACE=0
        PATH=/bin:/sbin:/usr/bin:/usr/sbin "${VM_JOB_ENV[@]}")
    {
        echo "# written by $(basename "$0") for hack/vm/init"
        printf 'export'; printf ' %q' "${env[@]}"; echo
        printf 'exec bash %q' "$HACK_DIR/vm/guest-run"; printf ' %q' "$job" "$@"; echo
    } >"$run/job"
    trap 'vm_down "$VM_RUN_DIR"' EXIT
    trap 'vm_down "$VM_RUN_DIR"; exit 130' INT TERM
    # A guest stuck in the middle of its job (125) gets one more try.
    local rc=0 try
    for try in 1 2; do
        rc=0
        vm_boot "$run" "${shares[@]}" || rc=$?
        vm_down "$run"
        [[ $rc == 125 ]] || break
        log "guest run $try of 2 got stuck"
    done
    return "$rc"
}
