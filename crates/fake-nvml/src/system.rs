//! System-level queries: versions and device enumeration.

use std::ffi::{c_char, c_int, c_uint, CStr};

use crate::{handle, mig_handle, put, put_str, ret, with_fixture, Handle};

/// `nvmlSystemGetDriverVersion`.
///
/// # Safety
/// `version` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller guarantee on `version`/`length`.
    with_fixture(|fx| unsafe { put_str(&fx.driver_version, version, length) })
}

/// `nvmlSystemGetNVMLVersion`.
///
/// # Safety
/// `version` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: forwarded caller guarantee on `version`/`length`.
    with_fixture(|fx| unsafe { put_str(&fx.nvml_version, version, length) })
}

/// `nvmlSystemGetCudaDriverVersion`.
///
/// # Safety
/// `v` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> u32 {
    // SAFETY: forwarded caller guarantee on `v`.
    with_fixture(|fx| unsafe { put(v, fx.cuda_driver_version) })
}

/// `nvmlSystemGetCudaDriverVersion_v2`.
///
/// # Safety
/// `v` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> u32 {
    // SAFETY: forwarded caller guarantee on `v`.
    unsafe { nvmlSystemGetCudaDriverVersion(v) }
}

/// `nvmlDeviceGetCount_v2`.
///
/// # Safety
/// `count` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller guarantee on `count`.
    with_fixture(|fx| unsafe { put(count, fx.gpus.len() as c_uint) })
}

/// `nvmlDeviceGetHandleByIndex_v2`.
///
/// # Safety
/// `device` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Handle) -> u32 {
    with_fixture(|fx| {
        if (index as usize) < fx.gpus.len() {
            // SAFETY: forwarded caller guarantee on `device`.
            unsafe { put(device, handle(index as usize)) }
        } else {
            ret::INVALID_ARGUMENT
        }
    })
}

/// Reads a C string argument.
///
/// # Safety
/// `s` must be null or a valid NUL-terminated string.
unsafe fn arg_str<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated by the caller's guarantee.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: either bus id form, any case.
///
/// # Safety
/// `bus_id` must be a NUL-terminated string; `device` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut Handle,
) -> u32 {
    with_fixture(|fx| {
        // SAFETY: forwarded caller guarantee on `bus_id`.
        let Some(id) = (unsafe { arg_str(bus_id) }) else {
            return ret::INVALID_ARGUMENT;
        };
        match fx.by_bus_id(id) {
            // SAFETY: forwarded caller guarantee on `device`.
            Some(i) => unsafe { put(device, handle(i)) },
            None => ret::NOT_FOUND,
        }
    })
}

/// `nvmlDeviceGetHandleByUUID`: a GPU's UUID, or a MIG device's while its parent has MIG on.
///
/// # Safety
/// `uuid` must be a NUL-terminated string; `device` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut Handle,
) -> u32 {
    with_fixture(|fx| {
        // SAFETY: forwarded caller guarantee on `uuid`.
        let Some(u) = (unsafe { arg_str(uuid) }) else {
            return ret::INVALID_ARGUMENT;
        };
        if let Some(i) = fx.gpus.iter().position(|g| g.uuid == u) {
            // SAFETY: forwarded caller guarantee on `device`.
            return unsafe { put(device, handle(i)) };
        }
        let found = fx.gpus.iter().enumerate().find_map(|(i, g)| {
            let m = g.mig_devices.iter().find(|m| m.uuid == u)?;
            g.mig_enabled.then(|| mig_handle(i, m.index))
        });
        match found {
            // SAFETY: forwarded caller guarantee on `device`.
            Some(h) => unsafe { put(device, h) },
            None => ret::NOT_FOUND,
        }
    })
}
