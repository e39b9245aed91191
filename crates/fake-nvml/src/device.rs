//! Per-device queries.

use std::ffi::{c_char, c_uint, c_ulong};

use crate::fixture::{parse_list, FixtureGpu};
use crate::{gpu, handle, mig, pci_info, put, put_str, ret, with_fixture, Handle, PciInfo};

/// Runs `f` on the GPU behind handle `h`, or answers `INVALID_ARGUMENT`.
fn on_gpu(h: Handle, f: impl FnOnce(&FixtureGpu) -> u32) -> u32 {
    with_fixture(|fx| gpu(fx, h).map_or(ret::INVALID_ARGUMENT, f))
}

/// `nvmlDeviceGetPciInfo_v3`.
///
/// # Safety
/// `pci` must be null or valid for a write of `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: Handle, pci: *mut PciInfo) -> u32 {
    on_gpu(device, |g| {
        let info = pci_info(&g.pci_bus_id, g.pci_device_id, g.pci_subsystem_id);
        // SAFETY: forwarded caller guarantee on `pci`.
        unsafe { put(pci, info) }
    })
}

/// `nvmlDeviceGetUUID`: a GPU's `GPU-...` or a MIG device's `MIG-...`.
///
/// # Safety
/// `uuid` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: Handle,
    uuid: *mut c_char,
    length: c_uint,
) -> u32 {
    with_fixture(|fx| {
        let id = match (gpu(fx, device), mig(fx, device)) {
            (Some(g), _) => &g.uuid,
            (None, Some((_, _, m))) => &m.uuid,
            (None, None) => return ret::INVALID_ARGUMENT,
        };
        // SAFETY: forwarded caller guarantee on `uuid`/`length`.
        unsafe { put_str(id, uuid, length) }
    })
}

/// `nvmlDeviceGetName`: a MIG device is named `<parent name> MIG <profile>`.
///
/// # Safety
/// `name` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: Handle,
    name: *mut c_char,
    length: c_uint,
) -> u32 {
    with_fixture(|fx| {
        let text = match (gpu(fx, device), mig(fx, device)) {
            (Some(g), _) => g.name.clone(),
            (None, Some((_, g, m))) => format!("{} MIG {}", g.name, m.profile),
            (None, None) => return ret::INVALID_ARGUMENT,
        };
        // SAFETY: forwarded caller guarantee on `name`/`length`.
        unsafe { put_str(&text, name, length) }
    })
}

/// `nvmlDeviceGetMinorNumber`.
///
/// # Safety
/// `minor` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: Handle, minor: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller guarantee on `minor`.
    on_gpu(device, |g| unsafe { put(minor, g.minor) })
}

/// `nvmlDeviceGetIndex`.
///
/// # Safety
/// `index` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: Handle, index: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller guarantee on `index`.
    on_gpu(device, |g| unsafe { put(index, g.index) })
}

/// `nvmlDeviceGetNumaNodeId`: only where GPU memory is a NUMA node.
///
/// # Safety
/// `node` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(device: Handle, node: *mut c_uint) -> u32 {
    on_gpu(device, |g| match g.numa_node_id {
        // SAFETY: forwarded caller guarantee on `node`.
        Some(n) => unsafe { put(node, n) },
        None => ret::NOT_SUPPORTED,
    })
}

/// Writes the ids in `list` as a bitmask of `size` `unsigned long` words.
///
/// # Safety
/// `set` must be valid for `size` words of writes.
unsafe fn put_mask(list: &str, size: c_uint, set: *mut c_ulong) -> u32 {
    if set.is_null() || size == 0 {
        return ret::INVALID_ARGUMENT;
    }
    let bits = c_ulong::BITS;
    let mut words = vec![0 as c_ulong; size as usize];
    for id in parse_list(list) {
        if let Some(w) = words.get_mut((id / bits) as usize) {
            *w |= 1 << (id % bits);
        }
    }
    // SAFETY: `set` has room for `size` words by the caller's guarantee.
    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), set, words.len()) };
    ret::SUCCESS
}

/// `nvmlDeviceGetCpuAffinity`.
///
/// # Safety
/// `set` must be valid for `size` words.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinity(
    device: Handle,
    size: c_uint,
    set: *mut c_ulong,
) -> u32 {
    // SAFETY: forwarded caller guarantee on `set`/`size`.
    on_gpu(device, |g| unsafe { put_mask(&g.cpu_affinity, size, set) })
}

/// `nvmlDeviceGetCpuAffinityWithinScope` (both scopes give the NUMA node's CPUs).
///
/// # Safety
/// `set` must be valid for `size` words.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinityWithinScope(
    device: Handle,
    size: c_uint,
    set: *mut c_ulong,
    _scope: c_uint,
) -> u32 {
    // SAFETY: forwarded caller guarantee on `set`/`size`.
    on_gpu(device, |g| unsafe { put_mask(&g.cpu_affinity, size, set) })
}

/// `nvmlDeviceGetMemoryAffinity`.
///
/// # Safety
/// `set` must be valid for `size` words.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryAffinity(
    device: Handle,
    size: c_uint,
    set: *mut c_ulong,
    _scope: c_uint,
) -> u32 {
    // SAFETY: forwarded caller guarantee on `set`/`size`.
    on_gpu(device, |g| unsafe {
        put_mask(&g.memory_affinity, size, set)
    })
}

/// `nvmlDeviceGetNvLinkState`: links past the active ones are inactive, past the slots invalid.
///
/// # Safety
/// `active` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: Handle,
    link: c_uint,
    active: *mut c_uint,
) -> u32 {
    on_gpu(device, |g| {
        if link >= g.nvlink_slots {
            return ret::INVALID_ARGUMENT;
        }
        // SAFETY: forwarded caller guarantee on `active`.
        unsafe { put(active, c_uint::from((link as usize) < g.nvlinks.len())) }
    })
}

/// `nvmlDeviceGetNvLinkRemotePciInfo_v2`.
///
/// # Safety
/// `pci` must be null or valid for a write of `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: Handle,
    link: c_uint,
    pci: *mut PciInfo,
) -> u32 {
    on_gpu(device, |g| {
        if link >= g.nvlink_slots {
            return ret::INVALID_ARGUMENT;
        }
        match g.nvlinks.get(link as usize) {
            Some(l) => {
                let info = pci_info(&l.remote_pci_bus_id, l.remote_pci_device_id, 0);
                // SAFETY: forwarded caller guarantee on `pci`.
                unsafe { put(pci, info) }
            }
            None => ret::NOT_SUPPORTED,
        }
    })
}

/// `nvmlDeviceGetTopologyCommonAncestor`.
///
/// # Safety
/// `level` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    a: Handle,
    b: Handle,
    level: *mut c_uint,
) -> u32 {
    with_fixture(|fx| {
        let (Some(ga), Some(gb)) = (gpu(fx, a), gpu(fx, b)) else {
            return ret::INVALID_ARGUMENT;
        };
        match ga.common_ancestor.get(gb.index as usize) {
            // SAFETY: forwarded caller guarantee on `level`.
            Some(&l) => unsafe { put(level, l) },
            None => ret::NOT_SUPPORTED,
        }
    })
}

/// `nvmlDeviceGetTopologyNearestGpus`: the other GPUs at `level` or closer. With a null array
/// (or one too small) only the count is written.
///
/// # Safety
/// `count` must be valid; `devices` null or valid for `*count` handles.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyNearestGpus(
    device: Handle,
    level: c_uint,
    count: *mut c_uint,
    devices: *mut Handle,
) -> u32 {
    with_fixture(|fx| {
        let Some(g) = gpu(fx, device) else {
            return ret::INVALID_ARGUMENT;
        };
        if count.is_null() {
            return ret::INVALID_ARGUMENT;
        }
        let near: Vec<usize> = (0..fx.gpus.len())
            .filter(|&j| j != g.index as usize)
            .filter(|&j| g.common_ancestor.get(j).is_some_and(|&l| l <= level))
            .collect();
        // SAFETY: `count` is non-null and valid by the caller's guarantee.
        let room = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = near.len() as c_uint };
        if devices.is_null() {
            return ret::SUCCESS;
        }
        if room < near.len() {
            return ret::INSUFFICIENT_SIZE;
        }
        for (k, &j) in near.iter().enumerate() {
            // SAFETY: `devices` holds `room >= near.len()` handles.
            unsafe { *devices.add(k) = handle(j) };
        }
        ret::SUCCESS
    })
}

/// `nvmlDeviceGetP2PStatus`: index 2 is NVLink, the others PCIe.
///
/// # Safety
/// `status` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    a: Handle,
    b: Handle,
    index: c_uint,
    status: *mut c_uint,
) -> u32 {
    with_fixture(|fx| {
        let (Some(ga), Some(gb)) = (gpu(fx, a), gpu(fx, b)) else {
            return ret::INVALID_ARGUMENT;
        };
        let table = if index == 2 {
            &ga.p2p_nvlink
        } else {
            &ga.p2p_pci
        };
        match table.get(gb.index as usize) {
            // SAFETY: forwarded caller guarantee on `status`.
            Some(&s) => unsafe { put(status, s) },
            None => ret::NOT_SUPPORTED,
        }
    })
}

/// `nvmlDeviceGetMigMode`: current and pending are the fixture's mode.
///
/// # Safety
/// `current` and `pending` must be null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: Handle,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    on_gpu(device, |g| {
        let m = c_uint::from(g.mig_enabled);
        // SAFETY: forwarded caller guarantee on both pointers.
        let r = unsafe { put(current, m) };
        if r != ret::SUCCESS {
            return r;
        }
        // SAFETY: as above.
        unsafe { put(pending, m) }
    })
}
