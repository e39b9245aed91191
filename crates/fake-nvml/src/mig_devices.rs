//! MIG devices: the queries a reader walks to map each MIG device to its parent GPU
//! (`nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex`, then UUID and
//! `nvmlDeviceGetDeviceHandleFromMigDeviceHandle` on each handle), with the answers nvml.h
//! documents: slots past the maximum are `INVALID_ARGUMENT`, an empty slot is `NOT_FOUND`, and
//! a GPU without MIG mode on has no MIG devices.

use std::ffi::c_uint;

use crate::{gpu, handle, mig, mig_handle, put, ret, with_fixture, Handle};

/// `nvmlDeviceGetMaxMigDeviceCount`: `NOT_SUPPORTED` on a GPU the fixture gives no MIG slots.
///
/// # Safety
/// `count` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: Handle, count: *mut c_uint) -> u32 {
    with_fixture(|fx| match gpu(fx, device) {
        Some(g) if g.max_mig_devices > 0 => {
            // SAFETY: forwarded caller guarantee on `count`.
            unsafe { put(count, g.max_mig_devices) }
        }
        Some(_) => ret::NOT_SUPPORTED,
        None => ret::INVALID_ARGUMENT,
    })
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`.
///
/// # Safety
/// `out` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: Handle,
    index: c_uint,
    out: *mut Handle,
) -> u32 {
    with_fixture(|fx| {
        let Some(g) = gpu(fx, device) else {
            return ret::INVALID_ARGUMENT;
        };
        if g.max_mig_devices == 0 {
            return ret::NOT_SUPPORTED;
        }
        if index >= g.max_mig_devices {
            return ret::INVALID_ARGUMENT;
        }
        if !g.mig_enabled || !g.mig_devices.iter().any(|m| m.index == index) {
            return ret::NOT_FOUND;
        }
        // The GPU's position in the fixture: its handle minus one (`gpu` checked it).
        let position = (device as usize).saturating_sub(1);
        // SAFETY: forwarded caller guarantee on `out`.
        unsafe { put(out, mig_handle(position, index)) }
    })
}

/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: the parent GPU of a MIG handle.
///
/// # Safety
/// `out` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    device: Handle,
    out: *mut Handle,
) -> u32 {
    with_fixture(|fx| match mig(fx, device) {
        // SAFETY: forwarded caller guarantee on `out`.
        Some((i, _, _)) => unsafe { put(out, handle(i)) },
        None => ret::INVALID_ARGUMENT,
    })
}

/// `nvmlDeviceIsMigDeviceHandle`.
///
/// # Safety
/// `is_mig` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: Handle, is_mig: *mut c_uint) -> u32 {
    with_fixture(|fx| {
        let v = match (gpu(fx, device), mig(fx, device)) {
            (Some(_), _) => 0,
            (None, Some(_)) => 1,
            (None, None) => return ret::INVALID_ARGUMENT,
        };
        // SAFETY: forwarded caller guarantee on `is_mig`.
        unsafe { put(is_mig, v) }
    })
}

/// `nvmlDeviceGetGpuInstanceId`: only on MIG handles.
///
/// # Safety
/// `id` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: Handle, id: *mut c_uint) -> u32 {
    with_fixture(|fx| match (gpu(fx, device), mig(fx, device)) {
        (Some(_), _) => ret::NOT_SUPPORTED,
        // SAFETY: forwarded caller guarantee on `id`.
        (None, Some((_, _, m))) => unsafe { put(id, m.gpu_instance_id) },
        (None, None) => ret::INVALID_ARGUMENT,
    })
}

/// `nvmlDeviceGetComputeInstanceId`: only on MIG handles.
///
/// # Safety
/// `id` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: Handle, id: *mut c_uint) -> u32 {
    with_fixture(|fx| match (gpu(fx, device), mig(fx, device)) {
        (Some(_), _) => ret::NOT_SUPPORTED,
        // SAFETY: forwarded caller guarantee on `id`.
        (None, Some((_, _, m))) => unsafe { put(id, m.compute_instance_id) },
        (None, None) => ret::INVALID_ARGUMENT,
    })
}
