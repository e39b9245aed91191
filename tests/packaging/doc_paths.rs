//! Every repository path the user docs name in backticks exists. A doc that points at a file
//! that was renamed or moved sends the reader nowhere, and nothing else notices: the compiler
//! checks the walk in the crate docs, this checks `README.md` and `docs/*.md`.
//!
//! A path is a word inside an inline code span that starts with one of the repository's
//! top-level folders (`src/`, `crates/`, `tests/`, `hack/`, `packaging/`). A `:line` or
//! `::item` suffix is dropped; a word with a glob (`tests/e2e_*.rs`) needs only its folder to
//! exist. Fenced code blocks are left out: they hold commands and their output, where a path
//! may be one the command creates.

use std::path::{Path, PathBuf};

const ROOTS: [&str; 5] = ["src/", "crates/", "tests/", "hack/", "packaging/"];

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The user docs: `README.md` and every `docs/*.md`.
fn docs() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let dir = std::fs::read_dir(root.join("docs")).expect("docs/ is readable");
    for entry in dir {
        let path = entry.expect("docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The inline code spans of `text`, with their line numbers, fenced blocks left out.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Between an odd and the next even backtick of a line: a Markdown code span does not
        // cross lines in these docs.
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 {
                spans.push((n + 1, part.to_string()));
            }
        }
    }
    spans
}

/// The repository paths a code span names, as written and as to be checked.
fn paths_in(span: &str) -> Vec<String> {
    span.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')' || c == '=')
        .filter(|w| ROOTS.iter().any(|r| w.starts_with(r)))
        .map(|w| {
            let w = w.split("::").next().unwrap_or(w);
            let w = w.split(':').next().unwrap_or(w);
            w.trim_end_matches(['.', ';']).to_string()
        })
        .collect()
}

/// Whether `path` (relative to the repository) exists; with a glob, whether its folder does.
fn exists(root: &Path, path: &str) -> bool {
    match path.find(['*', '{', '<']) {
        Some(i) => {
            let dir = &path[..path[..i].rfind('/').map_or(0, |j| j + 1)];
            root.join(dir).is_dir()
        }
        None => root.join(path).exists(),
    }
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = repo();
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).expect("doc is readable");
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        for (line, span) in code_spans(&text) {
            for path in paths_in(&span) {
                checked += 1;
                if !exists(&root, &path) {
                    missing.push(format!("{name}:{line}: `{path}`"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
    // The docs name dozens of files: finding none means the scan is broken, not the docs.
    assert!(checked > 20, "only {checked} paths found in the docs");
}

#[test]
fn the_scan_finds_paths_and_strips_suffixes() {
    let spans = code_spans(
        "see `src/lib.rs:12` and `crates/align-core/src/lib.rs::placement`\n```\n`src/nope.rs`\n```\n",
    );
    let paths: Vec<String> = spans.iter().flat_map(|(_, s)| paths_in(s)).collect();
    assert_eq!(paths, ["src/lib.rs", "crates/align-core/src/lib.rs"]);
    let root = repo();
    assert!(exists(&root, "tests/e2e_*.rs"));
    assert!(!exists(&root, "src/no_such_file.rs"));
}

/// docs/usage.md lists the shipped host descriptions by name: exactly those of
/// `packaging/hosts/` (which the binary builds in), so a new host is never missing there.
#[test]
fn docs_usage_names_every_shipped_host_description() {
    let usage = std::fs::read_to_string(repo().join("docs/usage.md")).expect("docs/usage.md");
    let start = usage
        .find("Shipped descriptions")
        .expect("the host list of docs/usage.md");
    let end = usage[start..]
        .find("See `docs/emulated-hosts.md`")
        .map_or(usage.len(), |e| start + e);
    let listed: std::collections::BTreeSet<String> = code_spans(&usage[start..end])
        .into_iter()
        .map(|(_, word)| word)
        .filter(|w| !w.contains(' ') && !w.contains('/'))
        .collect();
    let shipped: std::collections::BTreeSet<String> =
        std::fs::read_dir(repo().join("packaging/hosts"))
            .expect("packaging/hosts")
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".yaml").map(String::from)
            })
            .collect();
    assert_eq!(listed, shipped, "docs/usage.md's host list");
}
