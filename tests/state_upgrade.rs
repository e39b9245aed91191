//! Issue 15: a state file written by 0.1.0 (tests/fixtures/state-0.1.0, from a real run) is read
//! by this version. Through the binary (`nri-align verify --json`), so the check does not depend
//! on where the state code lives: every record comes back with its pod and container. Part 2
//! adds the engine-level check that the records are restored (docs/plan-issue-15-daemon.md).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn state_written_by_0_1_0_is_read() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-0.1.0");
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::copy(fixture.join("state.json"), dir.path().join("state.json")).expect("copy");
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["verify", "--json", "--state-dir"])
        .arg(dir.path())
        .output()
        .expect("run nri-align verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("verify JSON");
    let mut seen: Vec<(String, String)> = report
        .as_array()
        .expect("one entry per record")
        .iter()
        .map(|e| {
            (
                e["pod"].as_str().unwrap_or_default().to_string(),
                e["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    seen.sort();
    let want = [
        ("fixture/batch", "worker"),
        ("fixture/train", "cuda"),
        ("fixture/web", "nginx"),
    ]
    .map(|(p, n)| (p.to_string(), n.to_string()));
    assert_eq!(seen, want);
}
