//! A container's devices are read once, in `src/enforce/inputs/`, into one typed value
//! (`DeviceClaims`), and the runtime's cpusets once, when the view is made
//! (`src/enforce/nri/convert.rs`, `RuntimeIds`); the adjustment (`src/enforce/adjust.rs`) and
//! the engine (`src/enforce/engine/`) read those values and never the container's env, device
//! nodes, CDI names or cpuset text again. A second reading drifts from the first (the create path once re-derived where
//! a device came from in four places, with two GPU-node parsers): this fails as soon as one
//! of those files calls a device parser or reads an env variable.
//!
//! Test files are left out: they build containers and fake hosts, which needs the parsers.

use std::path::{Path, PathBuf};

/// What only `src/enforce/inputs/` (and `src/host/`, the conversions) may call: the device
/// parsers of `k8s_devices` and the host's, the reading of env variables, and id-list parsing.
const FORBIDDEN: [&str; 10] = [
    "k8s_devices::",
    "env_var(",
    "parse_visible_devices",
    "split_cdi_name",
    "split_replica_id",
    "parse_gpu_ref",
    "parse_device_node",
    "nvidia_minor",
    "uverbs_name",
    "parse_list",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The non-test `.rs` files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("source folder is readable");
    for entry in entries {
        let path = entry.expect("source folder entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The `file:line: text` of each line of `text` that names a forbidden call, comments left
/// out (they may say what is not done here).
fn offences(name: &str, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            FORBIDDEN.iter().any(|f| code.contains(f))
        })
        .map(|(n, line)| format!("{name}:{}: {}", n + 1, line.trim()))
        .collect()
}

#[test]
fn the_adjustment_and_the_engine_read_devices_only_through_inputs() {
    let root = repo();
    let mut files = vec![root.join("src/enforce/adjust.rs")];
    sources(&root.join("src/enforce/engine"), &mut files);
    // The engine is a dozen files: finding few means the scan is broken, not the code.
    assert!(files.len() > 10, "only {} files scanned", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("source is readable");
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        found.extend(offences(&name, &text));
    }
    assert!(
        found.is_empty(),
        "device, env or cpuset parsing outside src/enforce/inputs/ and the conversions \
         (read DeviceClaims and RuntimeIds instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_a_call_and_skips_comments() {
    let text = "let x = c.env_var(\"A\");\n// never nvidia_minor here\nlet y = 1;\n";
    assert_eq!(
        offences("f.rs", text),
        ["f.rs:1: let x = c.env_var(\"A\");"]
    );
    let call = "k8s_devices::nvidia::parse_device_node(p)";
    assert_eq!(offences("g.rs", call).len(), 1);
}
