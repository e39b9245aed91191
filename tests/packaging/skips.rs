//! Skips are seen and counted, and CI forbids them: every skip goes through
//! `test_support::skip` (written where the run's output shows it, a failure where
//! `NRI_ALIGN_FORBID_SKIPS=1`), `.ci/run` sets that variable, and the skips a full run may
//! still print are listed in `hack/skips-expected` with why. A test that skips passes having
//! asserted nothing: one that skips unseen in CI is a test that does not exist.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.rs` files under `dir`, recursively (`target`, hidden folders and links left out).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("folder is readable") {
        let entry = entry.expect("folder entry");
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Not followed through links: the fake sysfs trees of the fixtures link in circles.
        if entry.file_type().expect("file type").is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The `(where, pattern, why)` lines of `hack/skips-expected`.
fn expected() -> Vec<(String, String, String)> {
    let text =
        std::fs::read_to_string(repo().join("hack/skips-expected")).expect("hack/skips-expected");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                f.len(),
                3,
                "hack/skips-expected: want WHERE<TAB>PATTERN<TAB>WHY: {l:?}"
            );
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

#[test]
fn ci_forbids_skips() {
    let run = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    assert!(
        run.lines()
            .any(|l| l.trim() == "export NRI_ALIGN_FORBID_SKIPS=1"),
        ".ci/run must export NRI_ALIGN_FORBID_SKIPS=1"
    );
    let test = std::fs::read_to_string(repo().join("hack/test")).expect("hack/test");
    assert!(
        test.contains("hack/skips-expected") && test.contains("NRI_ALIGN_FORBID_SKIPS"),
        "hack/test must count the skips against hack/skips-expected"
    );
}

#[test]
fn every_expected_skip_says_where_and_why() {
    let places = [
        "host",
        "busybox",
        "systemd-containerd",
        "systemd-crio",
        "guests",
    ];
    let rows = expected();
    assert!(!rows.is_empty(), "hack/skips-expected lists nothing");
    for (place, pattern, why) in rows {
        assert!(places.contains(&place.as_str()), "unknown place {place:?}");
        assert!(
            pattern.starts_with("^SKIP "),
            "{pattern:?} must match from `^SKIP `"
        );
        assert!(
            why.split_whitespace().count() >= 5,
            "say why {pattern:?} is expected: {why:?}"
        );
    }
}

/// The test sources that print a `SKIP ` line themselves instead of calling
/// `test_support::skip`. Only the guest suite may: its skips are structural (a test of the
/// systemd guest in the busybox guest) and each is listed in `hack/skips-expected`.
#[test]
fn skips_go_through_the_one_function() {
    let root = repo();
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "only {} files scanned", files.len());
    let mut offences = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap_or(file);
        if rel.starts_with("tests/vm_numa")
            || rel == Path::new("crates/test-support/src/skip.rs")
            || rel == Path::new("tests/packaging/skips.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("\"SKIP ") || code.contains("\\nSKIP ") {
                offences.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "print skips with test_support::skip::skip (seen in every run, failing in CI):\n{}",
        offences.join("\n")
    );
}

/// Each skip the guest suite can print is listed: a new one fails here until it is either
/// listed with why or made to run.
#[test]
fn every_guest_skip_is_listed() {
    let mut files = Vec::new();
    rust_files(&repo().join("tests/vm_numa"), &mut files);
    let rows = expected();
    let mut unlisted = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for line in text.lines() {
            let Some(at) = line.find("\"SKIP ") else {
                continue;
            };
            // The literal up to its first placeholder or closing quote: what every run prints.
            let literal = &line[at + 1..];
            let end = literal[1..]
                .find(['"', '{'])
                .map_or(literal.len(), |e| e + 1);
            let printed = &literal[..end];
            if printed.starts_with("SKIP {") {
                // `SKIP {test}: ...` outside a guest: the host's line, listed as `SKIP vm_numa (`.
                continue;
            }
            let listed = rows.iter().any(|(_, pattern, _)| {
                let fixed = pattern.trim_start_matches('^').replace('\\', "");
                printed.starts_with(fixed.trim_end())
            });
            if !listed {
                unlisted.push(format!("{}: {printed}", file.display()));
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "guest skips not in hack/skips-expected:\n{}",
        unlisted.join("\n")
    );
}
