//! What the host gives: sysfs/procfs files under a root, and hwloc XML captures.

use std::path::{Path, PathBuf};

use nri_align::topology::hwloc::import_str;
use nri_align::topology::read_host;

use crate::harness::{check_error, fuzz, Outcome};

/// Regular files under `dir`, relative to `root`, sorted.
fn files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files(root, &entry.path(), out);
        } else if kind.is_file() {
            out.push(entry.path().strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// One file of a real sysfs/procfs snapshot (`tests/fixtures/sysfs/sparse-offline`: two
/// nodes, offline and isolated CPUs) replaced at a time. An input is the file's path relative
/// to the root on its first line, then the new content; a path that names no file of the tree
/// picks one by its hash, so mutated paths still land somewhere.
#[test]
fn fuzz_sysfs_reader() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/sparse-offline");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // cp -a keeps the symlinks the reader follows (cpuN/node*, PCI devices).
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success(), "copying {}", fixture.display());
    let mut tree = Vec::new();
    files(&root, &root, &mut tree);
    tree.sort();
    read_host(&root).expect("the unmodified snapshot reads");

    // sysfs files are a page at most; longer ones only slow the run.
    fuzz("sysfs", 1024 + 128, |input| {
        let (path, content) = match input.iter().position(|b| *b == b'\n') {
            Some(i) => (&input[..i], &input[i + 1..]),
            None => (input, &[][..]),
        };
        let path = String::from_utf8_lossy(path);
        let rel = tree
            .iter()
            .find(|p| p.as_os_str() == path.as_ref())
            .unwrap_or_else(|| {
                let hash = path
                    .bytes()
                    .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                &tree[hash % tree.len()]
            });
        let file = root.join(rel);
        let original = std::fs::read(&file).unwrap();
        std::fs::write(&file, content).unwrap();
        let result = read_host(&root);
        std::fs::write(&file, original).unwrap();
        match result {
            Ok(topo) => {
                assert!(!topo.cpus.is_empty(), "a topology without CPUs");
                Outcome::Accepted
            }
            Err(err) => {
                check_error("sysfs", &err.to_string());
                Outcome::Rejected
            }
        }
    });
}

/// hwloc XML captures (lstopo's format), real and hostile: deep nesting, huge ids and counts.
#[test]
fn fuzz_hwloc_importer() {
    fuzz("hwloc", 64 << 10, |input| {
        let xml = String::from_utf8_lossy(input);
        match import_str(&xml, "fuzz.xml") {
            Ok(topo) => {
                assert!(!topo.cpus.is_empty(), "a topology without CPUs");
                Outcome::Accepted
            }
            Err(err) => {
                check_error("hwloc", &err.to_string());
                Outcome::Rejected
            }
        }
    });
}
