//! The keys a configuration file takes, for the hint an unknown key gets: serde names the key
//! it refuses and lists the valid ones, but an operator who typed `polcy` wants to read
//! `policy` back, not scan thirty names. `tests.rs` checks this list against what the parser
//! accepts and what `config show` writes, so the three cannot drift apart.

/// Every top-level key of a configuration file, in the order `config show` writes them (it
/// leaves out the PodResources details when the lookup is off).
pub const CONFIG_KEYS: [&str; 36] = [
    "policy",
    "scope",
    "reserved_cpus",
    "gpu_mode",
    "scheduler_choice",
    "numa_choice",
    "allow_device_annotations",
    "full_pcpus_only",
    "exclusive_headroom",
    "mempolicy",
    "cpu_spread",
    "resize_shrink",
    "exempt_namespaces",
    "exclusive_annotation_namespaces",
    "isolated_namespaces",
    "podresources_socket",
    "podresources_resources",
    "podresources_timeout_ms",
    "trust_visible_devices_env",
    "pod_budgets",
    "trusted_schedulers",
    "cri_socket",
    "cdi_spec_dirs",
    "leave_to_others",
    "create_dev_char_links",
    "state_dir",
    "state_fsync",
    "exclusive_cpu_quota",
    "replace_offlined_cpus",
    "verify_remote_memory_threshold",
    "metrics_address",
    "log_format",
    "log_level",
    "plugin_idx",
    "evict_refused_after",
    "nrt",
];

/// The keys of the `nrt` section.
pub const NRT_KEYS: [&str; 6] = [
    "publish",
    "node_name",
    "gpu_resource",
    "rdma_nic_resource",
    "resync_seconds",
    "take_over_foreign",
];

/// For a YAML error that refuses an unknown key, the valid key nearest to it:
/// `"; did you mean `policy`?"`; empty otherwise.
pub fn nearest_key_hint(serde_message: &str) -> String {
    let Some(rest) = serde_message.split("unknown field `").nth(1) else {
        return String::new();
    };
    let Some(given) = rest.split('`').next() else {
        return String::new();
    };
    let best = CONFIG_KEYS
        .iter()
        .chain(NRT_KEYS.iter())
        .map(|k| (strsim::damerau_levenshtein(given, k), *k))
        .min();
    match best {
        // A third of the name may be wrong (two letters of a short one): beyond that the
        // nearest key is a guess, not the one meant.
        Some((d, k)) if d > 0 && d <= (given.len() / 3).max(2) => {
            format!("; did you mean `{k}`?")
        }
        _ => String::new(),
    }
}
