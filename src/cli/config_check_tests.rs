//! `config check` on hostile files: refused with exit 1 and the file named, never an abort.

use super::*;
use crate::cli::exit_code;

/// Nested aliases (the "billion laughs"): 10^9 strings from under a KiB of text.
fn laughs(key: &str) -> String {
    let mut text = format!("{key}: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        text.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    text
}

fn check_file(file: &Path) -> anyhow::Error {
    check(CheckArgs {
        file: file.to_path_buf(),
        host_root: None,
        host: Some("localhost-1n".into()),
        node: Some("n1".into()),
        labels: Vec::new(),
    })
    .expect_err("refused")
}

#[test]
fn a_config_file_of_aliases_is_refused_naming_it() {
    let t = tempfile::tempdir().expect("tmp");
    let file = t.path().join("bomb.yaml");
    std::fs::write(&file, laughs("policy")).expect("write");
    let err = check_file(&file);
    assert_eq!(exit_code(&err), 1, "{err:#}");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("bomb.yaml") && msg.contains("YAML aliases"),
        "{msg}"
    );
}

#[test]
fn a_configmap_manifest_or_section_of_aliases_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    // The manifest itself: its data strings aliased (each copy would be a whole string).
    let manifest = t.path().join("configmap.yaml");
    let mut text = format!(
        "apiVersion: v1\nkind: ConfigMap\nx: &s \"{}\"\ndata:\n",
        "p".repeat(64 << 10)
    );
    for i in 0..5_000 {
        text.push_str(&format!("  group.g{i}: *s\n"));
    }
    std::fs::write(&manifest, text).expect("write");
    let err = check_file(&manifest);
    assert_eq!(exit_code(&err), 1, "{err:#}");
    assert!(format!("{err:#}").contains("configmap.yaml"), "{err:#}");

    // A mounted ConfigMap whose chosen section is a bomb.
    let dir = t.path().join("mounted");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("default"), laughs("policy")).expect("write");
    let err = check_file(&dir);
    assert_eq!(exit_code(&err), 1, "{err:#}");
    assert!(format!("{err:#}").contains("YAML aliases"), "{err:#}");
}
