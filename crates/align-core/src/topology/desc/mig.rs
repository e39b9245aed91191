//! MIG devices of a described GPU: what the description says (`mig_devices:`) and the ids an
//! emulated host gives them, the same for the topology built from the description and for the
//! NVML fixture, so a topology read back through NVML equals the described one.

use super::uuid::uuid_of_seed;
use super::HostDesc;
use crate::topology::MigDevice;

// Described with the rest of a GPU (`GpuDesc::mig_devices`); the ids are made here.
pub use super::MigDesc;

/// Slots of a MIG-capable GPU (`nvmlDeviceGetMaxMigDeviceCount` on A100 and H100).
pub const MIG_SLOTS: u32 = 7;

/// The UUID of MIG device `slot` of GPU `gpu` (the position in `mig_devices` is the slot).
pub fn mig_uuid(desc: &HostDesc, gpu: usize, slot: usize) -> String {
    let given = desc
        .gpus
        .get(gpu)
        .and_then(|g| g.mig_devices.get(slot))
        .and_then(|m| m.uuid.clone());
    given.unwrap_or_else(|| {
        // A GPU UUID of a seed no GPU has, with the MIG prefix.
        let body = uuid_of_seed(&format!("{}/{gpu}/mig/{slot}", desc.name));
        format!("MIG-{body}")
    })
}

/// The MIG devices of GPU `gpu` as the topology holds them (none unless MIG mode is on).
pub fn mig_devices(desc: &HostDesc, gpu: usize) -> Vec<MigDevice> {
    let Some(g) = desc.gpus.get(gpu).filter(|g| g.mig) else {
        return Vec::new();
    };
    g.mig_devices
        .iter()
        .enumerate()
        .map(|(slot, m)| MigDevice {
            index: slot as u32,
            uuid: mig_uuid(desc, gpu, slot),
            profile: Some(m.profile.clone()),
        })
        .collect()
}

/// Checks the MIG devices of GPU `i`.
pub(super) fn check(i: usize, mig: bool, devices: &[MigDesc]) -> Result<(), String> {
    if devices.is_empty() {
        return Ok(());
    }
    if !mig {
        return Err(format!("gpus[{i}].mig_devices needs mig: true"));
    }
    if devices.len() > MIG_SLOTS as usize {
        return Err(format!(
            "gpus[{i}].mig_devices: at most {MIG_SLOTS} MIG devices per GPU"
        ));
    }
    for (j, m) in devices.iter().enumerate() {
        let profile_ok = !m.profile.is_empty()
            && m.profile.len() <= 32
            && m.profile
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'+');
        if !profile_ok {
            return Err(format!(
                "gpus[{i}].mig_devices[{j}].profile {:?} must look like 1g.10gb",
                crate::untrusted::excerpt(&m.profile)
            ));
        }
        if let Some(u) = &m.uuid {
            let body_ok = u.len() <= 64
                && u.strip_prefix("MIG-").is_some_and(|b| {
                    !b.is_empty() && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                });
            if !body_ok {
                return Err(format!(
                    "gpus[{i}].mig_devices[{j}].uuid {:?} must look like MIG-xxxxxxxx-...",
                    crate::untrusted::excerpt(u)
                ));
            }
        }
    }
    Ok(())
}
