//! The host descriptions of `packaging/hosts/`, built into the binary: what `emulate --list`,
//! `--host NAME`, the tests and the benches use when no directory of [`super::shipped_dirs`] has
//! them, so they all read the same files.

/// `(name, YAML text)` of every shipped description, by name.
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "dgx-a100-mig",
        include_str!("../../../../../packaging/hosts/dgx-a100-mig.yaml"),
    ),
    (
        "dgx-h100",
        include_str!("../../../../../packaging/hosts/dgx-h100.yaml"),
    ),
    (
        "dgx1-v100",
        include_str!("../../../../../packaging/hosts/dgx1-v100.yaml"),
    ),
    (
        "epyc-nps4",
        include_str!("../../../../../packaging/hosts/epyc-nps4.yaml"),
    ),
    (
        "gb200-nvl4-cdmm",
        include_str!("../../../../../packaging/hosts/gb200-nvl4-cdmm.yaml"),
    ),
    (
        "gb200-nvl4-numa",
        include_str!("../../../../../packaging/hosts/gb200-nvl4-numa.yaml"),
    ),
    (
        "grace-hopper",
        include_str!("../../../../../packaging/hosts/grace-hopper.yaml"),
    ),
    (
        "localhost-1n",
        include_str!("../../../../../packaging/hosts/localhost-1n.yaml"),
    ),
    (
        "numa16-1024",
        include_str!("../../../../../packaging/hosts/numa16-1024.yaml"),
    ),
    (
        "pcie-4gpu",
        include_str!("../../../../../packaging/hosts/pcie-4gpu.yaml"),
    ),
    (
        "vm-2s4n",
        include_str!("../../../../../packaging/hosts/vm-2s4n.yaml"),
    ),
    (
        "xeon6-snc3",
        include_str!("../../../../../packaging/hosts/xeon6-snc3.yaml"),
    ),
];

/// The YAML text of the shipped description `name`.
pub fn text(name: &str) -> Option<&'static str> {
    SHIPPED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The names of the shipped descriptions, sorted.
pub fn names() -> Vec<String> {
    SHIPPED.iter().map(|(n, _)| n.to_string()).collect()
}

#[cfg(test)]
#[path = "shipped_tests.rs"]
mod tests;
