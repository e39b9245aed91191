//! What a rescan takes over from the scan before it: the devices of every spec file whose
//! bytes have not changed since (the same length and 64-bit hash: a file rewritten in place
//! within one clock tick keeps its size and times, so those cannot tell), as the very `Arc`s
//! the index in force holds. A rescan so never holds two full indexes at once: the index it
//! builds shares every unchanged device with the one it replaces, and only the changed files'
//! devices are new (the total caps bound those). It also saves parsing and mapping every
//! unchanged file again, most of a rescan's work; reading the bytes is cheap beside it.
//!
//! The host side of an unchanged spec (its nodes' sysfs links and host numbers) is so read
//! when its file is first read or changes, not at every rescan: a device added to a running
//! host comes with its spec's next write (NVIDIA's CDI refresh regenerates `nvidia.yaml` on
//! driver and device changes, a DRA driver writes a claim's spec when it prepares the claim).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use twox_hash::XxHash64;

use super::CdiDevice;

/// A spec file's content, as far as reuse goes: its length and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: usize,
    hash: u64,
}

impl Stamp {
    pub(super) fn of(bytes: &[u8]) -> Stamp {
        Stamp {
            len: bytes.len(),
            hash: XxHash64::oneshot(0, bytes),
        }
    }
}

/// The devices each spec file of a scan gave, with the file's stamp then.
pub type FileDevices = HashMap<PathBuf, (Stamp, Vec<Arc<CdiDevice>>)>;
