//! Stable UUIDs for emulated devices: derived from a seed (the host name and the device's
//! place), so two emulated hosts never share one and the same host always gets the same ones.
//! Both the GPUs (`layout.rs`) and their MIG devices (`mig.rs`) draw from here.

/// The UUID body (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) derived from `seed`.
pub(super) fn uuid_of_seed(seed: &str) -> String {
    let h1 = fnv1a(seed.as_bytes(), 0xcbf2_9ce4_8422_2325);
    let h2 = fnv1a(seed.as_bytes(), 0x6c62_272e_07bb_0142);
    let x = (u128::from(h1) << 64) | u128::from(h2);
    let hex = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn fnv1a(data: &[u8], seed: u64) -> u64 {
    data.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
