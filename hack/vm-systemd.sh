# shellcheck shell=bash
# The systemd variant of the QEMU guest (hack/vm-e2e --systemd): the same kernel, NUMA shape,
# 9p shares and job protocol as hack/vm-lib.sh's guest, but PID 1 is systemd on the unified
# cgroup v2 hierarchy, so containerd runs runc with the systemd cgroup driver (containers in
# `cri-containerd-ID.scope` units under the kubelet's slices, created over D-Bus).
# Sourced after lib.sh and vm-lib.sh, never run.
#
# The root filesystem is built from bookworm's packages by mmdebstrap (the "essential" variant
# plus VM_SD_PACKAGES), customised by hack/vm/sd-customize (job unit, masks), packed into an ext4
# image by mke2fs and kept in .cache/vm-systemd/root-KEY.img. KEY hashes the package list and
# the scripts that shape the image, so the image is rebuilt only when one of them changes. QEMU
# opens it with snapshot=on: every boot starts from the pristine image, guests never write it,
# and several guests may share it.
#
# The busybox initramfs of vm-lib.sh still boots first: hack/vm/init loads the modules (virtio,
# 9p, ext4...), mounts the image and the shares, and switch_roots into systemd when the kernel
# command line carries nra.root=. systemd starts nri-align.target: the basic system, D-Bus and
# nri-align-job.service, which runs the host's job file and powers the guest off.

VM_SD_DIR="$CACHE_DIR/vm-systemd"
# On top of the essential set (bash, coreutils, util-linux, findutils, grep, sed, diffutils...):
# systemd as PID 1 and its D-Bus (runc's systemd driver talks to systemd through it),
# libseccomp2 for runc, mawk for the harness scripts, procps for a human in --shell.
VM_SD_PACKAGES=(systemd dbus libseccomp2 mawk procps)
# Kernel modules the systemd guest needs beyond vm-lib.sh's: the root image's disk and
# filesystem (ext4 checksums its metadata with crc32c, which it loads through the crypto API).
VM_SD_MODULES=(virtio_blk crc32c_generic ext4)
VM_SD_IMAGE_SIZE=1G
# Documentation and translations are left out (dpkg path-exclude); force-unsafe-io: the tree is
# packed into an image right after, an fsync per file only costs time.
VM_SD_MMDEBSTRAP_OPTS=(--mode=root --variant=essential
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt=force-unsafe-io)

# vm_sd_key prints the image's cache key: a hash of what decides its content (the suite, the
# packages, mmdebstrap's options, the size and the customize hook).
vm_sd_key() {
    {
        echo "bookworm ${VM_SD_PACKAGES[*]} ${VM_SD_MMDEBSTRAP_OPTS[*]} $VM_SD_IMAGE_SIZE"
        cat "$HACK_DIR/vm/sd-customize"
    } | sha256sum | cut -c1-12
}

# vm_sd_image: builds the root image unless the cache has it; sets VM_SD_IMAGE. Serialised
# with the other cache fillers by the cache lock.
vm_sd_image() {
    local key img stage
    key="$(vm_sd_key)"
    img="$VM_SD_DIR/root-$key.img"
    VM_SD_IMAGE="$img"
    [[ -f "$img" ]] && return 0
    mkdir -p "$VM_SD_DIR"
    exec 7>"$CACHE_DIR/.lock"
    flock 7
    if [[ ! -f "$img" ]]; then
        command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run hack/setup"
        command -v mke2fs >/dev/null || die "mke2fs missing: run hack/setup"
        local t0=$SECONDS
        log "building the systemd guest's root image (bookworm: ${VM_SD_PACKAGES[*]})"
        stage="$(mktemp -d "$VM_SD_DIR/build.XXXXXX")"
        local hook
        hook="$(printf '%q' "$HACK_DIR/vm/sd-customize") \"\$1\""
        local includes
        includes="$(IFS=,; echo "${VM_SD_PACKAGES[*]}")"
        if ! mmdebstrap "${VM_SD_MMDEBSTRAP_OPTS[@]}" --include="$includes" \
            --customize-hook="$hook" \
            bookworm "$stage/root" \
            "deb [signed-by=$DEBIAN_KEYRING] $DEBIAN_MIRROR bookworm main" \
            >"$stage/mmdebstrap.log" 2>&1; then
            tail -n 30 "$stage/mmdebstrap.log" >&2
            rm -rf "$stage"
            die "mmdebstrap failed (log above)"
        fi
        # A sparse file: the guest's writes go to QEMU's snapshot, never here.
        mke2fs -q -t ext4 -L nri-align-root -d "$stage/root" "$stage/root.img" "$VM_SD_IMAGE_SIZE" >/dev/null \
            || { rm -rf "$stage"; die "mke2fs of the systemd guest's root failed"; }
        mv "$stage/root.img" "$img"
        rm -rf "$stage"
        # Older images (another package list or script): a guest still running keeps its open
        # file, so removing them is safe.
        find "$VM_SD_DIR" -maxdepth 1 -name 'root-*.img' ! -name "root-$key.img" -delete
        log "root image built in $((SECONDS - t0))s: $img ($(du -h "$img" | cut -f1) used)"
    fi
    flock -u 7
    exec 7>&-
}

# vm_sd_setup: prepares a systemd guest for vm_run: the image, the extra modules, the disk, the
# kernel command line (systemd on the unified hierarchy, the job target) and the job's
# environment (containerd with the systemd cgroup driver, nri-align as the systemd unit).
# shellcheck disable=SC2034 # read by vm-lib.sh's vm_boot and vm_run
vm_sd_setup() {
    vm_sd_image
    VM_MODULES+=("${VM_SD_MODULES[@]}")
    # bus=pcie.0: the NUMA expander buses belong to the GPU and NIC stand-ins.
    VM_QEMU_EXTRA=(-drive "file=$VM_SD_IMAGE,format=raw,if=none,id=root,snapshot=on"
        -device "virtio-blk-pci,drive=root,bus=pcie.0")
    VM_APPEND_EXTRA="nra.root=/dev/vda systemd.unified_cgroup_hierarchy=1 systemd.unit=nri-align.target systemd.show_status=error"
    # Pods start 2-3 times slower here than in the busybox guest (runc asks systemd for each
    # scope over D-Bus): a longer guard against a hung guest, unless one was asked for.
    [[ -n "${NRI_ALIGN_VM_TIMEOUT:-}" ]] || VM_TIMEOUT=1800
    # nri-align runs as the shipped systemd unit (packaging/systemd/nri-align.service), started
    # by the suite before the runtime is up (tests/vm_numa/unit.rs).
    VM_JOB_ENV=(NRI_ALIGN_VM_CGROUP_DRIVER=systemd NRI_ALIGN_VM_PLUGIN=unit)
    VM_RUN_SUFFIX=-systemd
}

# vm_sd_crio_setup: adds CRI-O with cgroup_manager = "systemd" to the systemd guest's job: the
# CRI-O build hack/crio-up finds on the host ($CRIO or shared/crio), shared read-only at its host
# path, and conmon, the CNI plugins and crio's libraries in the cache (linked by guest-run). The
# suite then runs once per runtime in NRI_ALIGN_VM_RUNTIMES ("containerd crio" unless set; "crio"
# for CRI-O alone) in the same boot. Returns 3 (hack/crio-up's) when no CRI-O build is found.
# shellcheck disable=SC2034 # read by vm-lib.sh's vm_run
vm_sd_crio_setup() {
    local bin dir
    bin="$("$HACK_DIR/crio-up" --locate)" || return 3
    dir="$(dirname "$bin")"
    mkdir -p "$CACHE_DIR"
    exec 8>"$CACHE_DIR/.lock"
    flock 8
    fetch_deb bookworm conmon "$CACHE_DIR/conmon-bookworm"
    fetch_deb bookworm containernetworking-plugins "$CACHE_DIR/cni-bookworm"
    fetch_deb bookworm libseccomp2 "$CACHE_DIR/libseccomp2-bookworm"
    fetch_deb bookworm libsqlite3-0 "$CACHE_DIR/libsqlite3-bookworm"
    fetch_deb bookworm libglib2.0-0 "$CACHE_DIR/libglib2-bookworm"
    flock -u 8
    exec 8>&-
    VM_SHARES_EXTRA+=("crio:$dir:ro")
    VM_JOB_ENV+=(CRIO="$dir" NRI_ALIGN_VM_RUNTIMES="${NRI_ALIGN_VM_RUNTIMES:-containerd crio}")
    VM_RUN_SUFFIX=-systemd-crio
}
