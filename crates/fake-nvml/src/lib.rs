//! Fake NVML: serves an emulated host's GPU fixture (`nvml.json` from `nri-align emulate`)
//! through the NVML C ABI, so tests drive the real nvml-wrapper code path without a GPU.
//!
//! The fixture path comes from the environment variable `FAKE_NVML_FIXTURE`, read at
//! `nvmlInit*`. Load the library by path (`Nvml::builder().lib_path(".../libfake_nvml.so")`).
//! Exported: init/shutdown, error strings, driver/NVML/CUDA versions, device count and handles
//! (by index, PCI bus id, UUID), PCI info, UUID, name, minor, index, NUMA node id, CPU and memory
//! affinity, NVLink state and remote PCI info, topology common ancestor and nearest GPUs, P2P
//! status, MIG mode and MIG devices (max count, handle by slot, parent handle, is-MIG, GPU and
//! compute instance ids, and UUID, name and handle-by-UUID on MIG handles). A query the fixture cannot answer returns `NVML_ERROR_NOT_SUPPORTED`; a
//! function not exported makes nvml-wrapper report a missing symbol. No panic crosses the ABI.

pub mod fixture;

use std::ffi::{c_char, c_uint, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use fixture::{parse_bus_id, Fixture, FixtureGpu, FixtureMig};

/// `nvmlReturn_t` values used here.
pub mod ret {
    /// Success.
    pub const SUCCESS: u32 = 0;
    /// `nvmlInit` was not called.
    pub const UNINITIALIZED: u32 = 1;
    /// Bad argument.
    pub const INVALID_ARGUMENT: u32 = 2;
    /// Not supported.
    pub const NOT_SUPPORTED: u32 = 3;
    /// No such device.
    pub const NOT_FOUND: u32 = 6;
    /// Buffer too small.
    pub const INSUFFICIENT_SIZE: u32 = 7;
    /// The fixture is missing or unreadable.
    pub const LIBRARY_NOT_FOUND: u32 = 12;
    /// Anything else (a caught panic).
    pub const UNKNOWN: u32 = 999;
}

/// `nvmlPciInfo_t` (nvml.h, as in nvml-wrapper-sys 0.10).
#[repr(C)]
pub struct PciInfo {
    /// Legacy `dddd:bb:dd.f` form.
    pub bus_id_legacy: [c_char; 16],
    /// Domain.
    pub domain: c_uint,
    /// Bus.
    pub bus: c_uint,
    /// Device.
    pub device: c_uint,
    /// `(device id << 16) | vendor id`.
    pub pci_device_id: c_uint,
    /// Subsystem id.
    pub pci_sub_system_id: c_uint,
    /// `dddddddd:bb:dd.f` form.
    pub bus_id: [c_char; 32],
}

/// Opaque device handle: the GPU index plus one, so no handle is null; a MIG device's handle is
/// `MIG_HANDLE_BASE + gpu index * 256 + slot`, so GPU queries can tell it apart.
type Handle = *mut libc::c_void;

/// Where MIG device handles start (no fixture has this many GPUs).
const MIG_HANDLE_BASE: usize = 1 << 16;

struct State {
    fixture: Fixture,
    inits: u32,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Runs `f` with the loaded fixture, mapping panics to `UNKNOWN` and no fixture to
/// `UNINITIALIZED`.
fn with_fixture(f: impl FnOnce(&Fixture) -> u32) -> u32 {
    catch_unwind(AssertUnwindSafe(|| {
        let guard = match STATE.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match guard.as_ref() {
            Some(s) => f(&s.fixture),
            None => ret::UNINITIALIZED,
        }
    }))
    .unwrap_or(ret::UNKNOWN)
}

/// The GPU behind a GPU handle (never a MIG device's).
fn gpu(fx: &Fixture, h: Handle) -> Option<&FixtureGpu> {
    let v = h as usize;
    if v >= MIG_HANDLE_BASE {
        return None;
    }
    v.checked_sub(1).and_then(|i| fx.gpus.get(i))
}

fn handle(i: usize) -> Handle {
    (i + 1) as Handle
}

/// The parent's index and the MIG device behind a MIG handle; MIG devices exist only while
/// their parent's MIG mode is on.
fn mig(fx: &Fixture, h: Handle) -> Option<(usize, &FixtureGpu, &FixtureMig)> {
    let v = (h as usize).checked_sub(MIG_HANDLE_BASE)?;
    let (i, slot) = (v / 256, (v % 256) as u32);
    let g = fx.gpus.get(i).filter(|g| g.mig_enabled)?;
    let m = g.mig_devices.iter().find(|m| m.index == slot)?;
    Some((i, g, m))
}

fn mig_handle(gpu: usize, slot: u32) -> Handle {
    (MIG_HANDLE_BASE + gpu * 256 + slot as usize) as Handle
}

/// Copies `s` NUL-terminated into `buf` of `len` bytes.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes of writes.
unsafe fn put_str(s: &str, buf: *mut c_char, len: c_uint) -> u32 {
    if buf.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return ret::INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller guarantees `len` writable bytes; we write bytes.len() + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    ret::SUCCESS
}

/// Writes `v` through `out` if it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, v: T) -> u32 {
    if out.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller guarantees it points to a writable T.
    unsafe { out.write(v) };
    ret::SUCCESS
}

fn fill_array(src: &str, dst: &mut [c_char]) {
    let room = dst.len().saturating_sub(1);
    for (d, s) in dst.iter_mut().zip(src.bytes().take(room)) {
        *d = s as c_char;
    }
}

fn pci_info(bus_id: &str, device_id: u32, subsys: u32) -> PciInfo {
    let (domain, bus, dev, func) = parse_bus_id(bus_id).unwrap_or((0, 0, 0, 0));
    let mut info = PciInfo {
        bus_id_legacy: [0; 16],
        domain,
        bus,
        device: dev,
        pci_device_id: device_id,
        pci_sub_system_id: subsys,
        bus_id: [0; 32],
    };
    fill_array(
        &format!("{domain:08X}:{bus:02X}:{dev:02X}.{func:X}"),
        &mut info.bus_id,
    );
    fill_array(
        &format!("{domain:04X}:{bus:02X}:{dev:02X}.{func:X}"),
        &mut info.bus_id_legacy,
    );
    info
}

fn init() -> u32 {
    catch_unwind(|| {
        let mut guard = match STATE.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(s) = guard.as_mut() {
            s.inits += 1;
            return ret::SUCCESS;
        }
        let Some(path) = std::env::var_os("FAKE_NVML_FIXTURE") else {
            return ret::LIBRARY_NOT_FOUND;
        };
        match Fixture::load(std::path::Path::new(&path)) {
            Ok(fixture) => {
                *guard = Some(State { fixture, inits: 1 });
                ret::SUCCESS
            }
            Err(_) => ret::LIBRARY_NOT_FOUND,
        }
    })
    .unwrap_or(ret::UNKNOWN)
}

/// `nvmlInit_v2`: loads the fixture named by `FAKE_NVML_FIXTURE`.
#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> u32 {
    init()
}

/// `nvmlInitWithFlags`: flags are ignored.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> u32 {
    init()
}

/// `nvmlShutdown`: drops the fixture after the last matching init.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> u32 {
    catch_unwind(|| {
        let mut guard = match STATE.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match guard.as_mut() {
            None => ret::UNINITIALIZED,
            Some(s) if s.inits > 1 => {
                s.inits -= 1;
                ret::SUCCESS
            }
            Some(_) => {
                *guard = None;
                ret::SUCCESS
            }
        }
    })
    .unwrap_or(ret::UNKNOWN)
}

/// `nvmlErrorString`: a static message per code.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: u32) -> *const c_char {
    let s: &'static CStr = match result {
        ret::SUCCESS => c"Success",
        ret::UNINITIALIZED => c"Uninitialized",
        ret::INVALID_ARGUMENT => c"Invalid Argument",
        ret::NOT_SUPPORTED => c"Not Supported",
        ret::NOT_FOUND => c"Not Found",
        ret::INSUFFICIENT_SIZE => c"Insufficient Size",
        ret::LIBRARY_NOT_FOUND => {
            c"NVML Shared Library Not Found (FAKE_NVML_FIXTURE unset or unreadable)"
        }
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

mod device;
mod mig_devices;
mod system;

/// Exports NVML functions the fixture has no data for: each answers `NOT_SUPPORTED`, as a real
/// driver does for a feature the GPU lacks, so callers take their "not available" path instead
/// of failing on a missing symbol.
macro_rules! not_supported {
    ($($name:ident($($ty:ty),*);)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: not in the fixture.")]
            #[no_mangle]
            pub extern "C" fn $name($(_: $ty),*) -> u32 {
                ret::NOT_SUPPORTED
            }
        )*
    };
}

not_supported! {
    nvmlDeviceGetMemoryInfo(Handle, *mut libc::c_void);
    nvmlDeviceGetBrand(Handle, *mut c_uint);
    nvmlDeviceGetSerial(Handle, *mut c_char, c_uint);
    nvmlDeviceGetBoardId(Handle, *mut c_uint);
    nvmlDeviceGetMultiGpuBoard(Handle, *mut c_uint);
    nvmlDeviceGetNvLinkVersion(Handle, c_uint, *mut c_uint);
    nvmlDeviceGetNvLinkCapability(Handle, c_uint, c_uint, *mut c_uint);
    nvmlDeviceGetPersistenceMode(Handle, *mut c_uint);
    nvmlDeviceGetComputeMode(Handle, *mut c_uint);
    nvmlDeviceGetArchitecture(Handle, *mut c_uint);
    nvmlDeviceGetCudaComputeCapability(Handle, *mut libc::c_int, *mut libc::c_int);
}

/// `nvmlInit` (v1): same as `nvmlInit_v2`.
#[no_mangle]
pub extern "C" fn nvmlInit() -> u32 {
    init()
}
