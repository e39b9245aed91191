//! Every path of this repository that a comment names exists: Rust comments (`//`, `//!`,
//! `///`) under `src/`, `crates/`, `tests/`, `benches/`, `examples/` and the build scripts, the
//! comments of every `Cargo.toml`, and those of the `hack/` scripts. A comment that points at a
//! moved file sends the reader nowhere, and neither the compiler nor a reviewer reading the
//! diff of the move sees it.
//!
//! What counts as a path (a word of a comment, cut at spaces, backticks, quotes, brackets,
//! commas and `=`, with a `::item` or `:line` suffix and end punctuation dropped):
//! - a word starting with a top-level folder of the repository (`src/`, `hack/`, ...): checked
//!   from the repository root, or from the crate's own folder for a file of `crates/NAME/`;
//! - a word ending in a source extension (`.rs`, `.toml`, `.md`, ...) or in `/`: checked from
//!   the comment's own folder and each folder above it, from `src/` and from the crate's
//!   `src/` (comments name modules as `enforce/adjust.rs` or `host/cgroup/`). A word whose
//!   first folder exists under none of those is another project's path (containerd/nri's
//!   `pkg/api/api.proto`, sysfs's `class/infiniband/`) and is left alone, except a `.rs` one:
//!   Rust files named in this repository's comments are this repository's;
//! - in `Cargo.toml` and `hack/` comments only, also a bare `folder/module` whose first folder
//!   exists there (`enforce/inputs`): those comments name modules without an extension, where
//!   Rust comments say `sysfs/procfs` or `topology/core_id` about the kernel's files.
//!
//! Left out: words that hold `://`, start with `/`, `~`, `$` or `.` (host paths, URLs,
//! variables), name what commands create (`_output/`, `.cache/`, `target/`), and the few other
//! projects' paths that start like ours ([`UPSTREAM`]). A word with a glob or a placeholder in
//! capitals (`tests/e2e_*.rs`, `_output/NAME/`) needs only the folder before it to exist.

use std::path::Path;

use crate::doc_paths::repo;

/// Top-level folders of this repository (and of its crates: `src/`, `tests/`).
const TOPS: [&str; 10] = [
    "src/",
    "crates/",
    "tests/",
    "benches/",
    "examples/",
    "hack/",
    "packaging/",
    "docs/",
    "proto/",
    ".ci/",
];

/// The extensions that make a word a file name.
const EXTENSIONS: [&str; 9] = [
    ".rs", ".toml", ".md", ".yaml", ".yml", ".json", ".proto", ".sh", ".py",
];

/// What commands make (build outputs, caches): not in a checkout, so not checked.
const MADE: [&str; 3] = ["_output/", ".cache/", "target/"];

/// Files named in capitals (a component in capitals is otherwise a placeholder).
const FILES_IN_CAPITALS: [&str; 3] = ["README", "CHANGELOG", "LICENSE"];

/// Other projects' paths cited in comments that start like one of this repository's
/// folders, with the project the comment names.
const UPSTREAM: [(&str, &str); 3] = [
    ("docs/interop/qmp-spec.rst", "QEMU"),
    ("docs/resource-policy/setup.md", "containers/nri-plugins"),
    ("tests/hwloc/linux", "open-mpi/hwloc"),
];

/// How a file writes its comments.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Syntax {
    /// `//`, `///`, `//!`.
    Rust,
    /// `#` (TOML, shell).
    Hash,
}

/// The files whose comments are checked, relative to the repository, with their syntax.
fn sources(root: &Path) -> Vec<(String, Syntax)> {
    let mut files = Vec::new();
    for top in ["src", "crates", "tests", "benches", "examples"] {
        rust_files(root, &root.join(top), &mut files);
    }
    files.push(("build.rs".to_string(), Syntax::Rust));
    files.push(("Cargo.toml".to_string(), Syntax::Hash));
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let manifest = entry.expect("crates/ entry").path().join("Cargo.toml");
        if manifest.is_file() {
            files.push((relative(root, &manifest), Syntax::Hash));
        }
    }
    for entry in std::fs::read_dir(root.join("hack")).expect("hack/") {
        let path = entry.expect("hack/ entry").path();
        let is_doc = path.extension().is_some_and(|e| e == "md");
        if path.is_file() && !is_doc {
            files.push((relative(root, &path), Syntax::Hash));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The `.rs` files under `dir`; the fixture trees (symlink loops of sysfs snapshots) and
/// symlinks are not entered.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<(String, Syntax)>) {
    for entry in std::fs::read_dir(dir).expect("source folder is readable") {
        let entry = entry.expect("source folder entry");
        let kind = entry.file_type().expect("file type");
        let path = entry.path();
        if kind.is_dir() && entry.file_name() != "fixtures" {
            rust_files(root, &path, out);
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            out.push((relative(root, &path), Syntax::Rust));
        }
    }
}

/// The comments of `text`, with their line numbers. A Rust `//` counts where the code before
/// it on the line holds no open string (an even number of `"`) and it is not a URL's `://`.
fn comments(text: &str, syntax: Syntax) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let comment = match syntax {
            Syntax::Rust => line
                .match_indices("//")
                .map(|(i, _)| i)
                .find(|&i| {
                    let before = &line[..i];
                    before.matches('"').count() % 2 == 0 && !before.ends_with(':')
                })
                .map(|i| &line[i..]),
            Syntax::Hash => {
                let t = line.trim_start();
                (t.starts_with('#') && !t.starts_with("#!")).then_some(t)
            }
        };
        if let Some(c) = comment {
            found.push((n + 1, c));
        }
    }
    found
}

/// The words of a comment that may be paths: a `/` in them, suffixes and end punctuation
/// dropped, nothing a path does not hold.
fn words(comment: &str) -> Vec<&str> {
    comment
        .split(|c: char| c.is_whitespace() || "`'\"(),;[]=|".contains(c))
        .filter(|w| w.contains('/') && !w.contains("://"))
        .map(|w| w.split("::").next().unwrap_or(w))
        .map(|w| w.split(':').next().unwrap_or(w))
        .map(|w| w.trim_end_matches(['.', ',', ';', ':', '!', '?']))
        .filter(|w| !w.starts_with(['/', '~', '$', '.']) || w.starts_with(".ci/"))
        .filter(|w| !w.starts_with("//"))
        .filter(|w| {
            w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./*{}<>".contains(c))
        })
        .filter(|w| !MADE.iter().any(|m| w.starts_with(m)))
        .collect()
}

/// The part of `path` that must exist: all of it, or the folder before its first glob or
/// placeholder (`*`, `{`, `<`, a component in capitals such as `NAME`).
fn must_exist(path: &str) -> &str {
    let mut end = 0;
    for part in path.split('/') {
        let stem = part.split('.').next().unwrap_or(part);
        let placeholder = stem.len() > 1
            && !FILES_IN_CAPITALS.contains(&stem)
            && stem
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '-' || c == '_');
        if part.contains(['*', '{', '<']) || placeholder {
            return &path[..end];
        }
        end += part.len() + 1;
    }
    path
}

/// The folders a comment of `file` names paths from: its own folder and each one above it
/// (the root last but one), the crate's `src/`, the root crate's `src/`.
fn bases(file: &str) -> Vec<String> {
    let mut bases = Vec::new();
    let mut dir = Path::new(file).parent();
    while let Some(d) = dir {
        let d = d.display().to_string();
        bases.push(if d.is_empty() { d } else { d + "/" });
        dir = Path::new(bases.last().expect("pushed").trim_end_matches('/')).parent();
        if bases.last().is_some_and(String::is_empty) {
            break;
        }
    }
    if let Some(krate) = crate_folder(file) {
        bases.push(format!("{krate}src/"));
    }
    bases.push("src/".to_string());
    bases
}

/// `crates/NAME/` for a file of a member crate.
fn crate_folder(file: &str) -> Option<String> {
    let rest = file.strip_prefix("crates/")?;
    let name = rest.split('/').next()?;
    Some(format!("crates/{name}/"))
}

/// What a word of a comment of `file` is.
#[derive(Debug, PartialEq)]
enum Named {
    /// A path of this repository that exists.
    Exists,
    /// A path of this repository that does not.
    Missing,
    /// Not a path of this repository (prose, another project's, a host path).
    NotOurs,
}

fn judge(root: &Path, file: &str, syntax: Syntax, word: &str) -> Named {
    let found = |bases: &[String], also_rs: bool| {
        let want = must_exist(word);
        let glob = want.len() < word.len();
        bases.iter().any(|b| {
            root.join(format!("{b}{want}")).exists()
                || (also_rs && !glob && root.join(format!("{b}{want}.rs")).is_file())
        })
    };
    let verdict = |ok: bool| if ok { Named::Exists } else { Named::Missing };
    if TOPS.iter().any(|t| word.starts_with(t)) {
        if UPSTREAM.iter().any(|(p, _)| word.starts_with(p)) {
            return Named::NotOurs;
        }
        let mut from = vec![String::new()];
        from.extend(crate_folder(file));
        return verdict(found(&from, false));
    }
    let file_name = EXTENSIONS.iter().any(|e| word.ends_with(e));
    let folder = word.ends_with('/');
    let module = syntax == Syntax::Hash && !file_name && !folder;
    if !(file_name || folder || module) {
        return Named::NotOurs;
    }
    let from = bases(file);
    let first = word.split('/').next().unwrap_or(word);
    let anchored = from
        .iter()
        .any(|b| root.join(format!("{b}{first}")).is_dir());
    if !anchored && !word.ends_with(".rs") {
        return Named::NotOurs;
    }
    verdict(found(&from, module))
}

#[test]
fn every_path_a_comment_names_exists() {
    let root = repo();
    let mut checked = 0;
    let mut missing = Vec::new();
    // This file's self-test holds missing paths on purpose.
    let own = "tests/packaging/comment_paths.rs";
    for (file, syntax) in sources(&root).into_iter().filter(|(f, _)| f != own) {
        let text = std::fs::read_to_string(root.join(&file)).expect("source is readable");
        for (line, comment) in comments(&text, syntax) {
            for word in words(comment) {
                match judge(&root, &file, syntax, word) {
                    Named::Exists => checked += 1,
                    Named::Missing => missing.push(format!("{file}:{line}: {word}")),
                    Named::NotOurs => {}
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named in comments that do not exist (fix the comment, or list another \
         project's path in UPSTREAM):\n{}",
        missing.join("\n")
    );
    // Comments name hundreds of files: finding few means the scan is broken, not the tree.
    assert!(checked > 200, "only {checked} paths found in comments");
}

#[test]
fn the_detector_tells_our_paths_from_prose_and_other_projects() {
    let root = repo();
    let rust = "// see `src/lib.rs:12`, enforce/adjust.rs and host/nope.rs; cpus/mems\n\
                let s = \"a // b\"; // crates/align-core/src/lib.rs::topology, https://x.io/a.rs\n\
                //! containerd/nri `pkg/api/api.proto`, class/infiniband/, /sys/bus/, _output/x/\n\
                //! tests/e2e_*.rs, hack/NAME, src/enforce/gone, no_such/thing.rs\n";
    let named: Vec<(usize, &str, Named)> = comments(rust, Syntax::Rust)
        .into_iter()
        .flat_map(|(n, c)| words(c).into_iter().map(move |w| (n, w)))
        .map(|(n, w)| (n, w, judge(&root, "src/config/mod.rs", Syntax::Rust, w)))
        .collect();
    let expect = [
        (1, "src/lib.rs", Named::Exists),
        (1, "enforce/adjust.rs", Named::Exists),
        (1, "host/nope.rs", Named::Missing),
        (1, "cpus/mems", Named::NotOurs),
        (2, "crates/align-core/src/lib.rs", Named::Exists),
        (3, "containerd/nri", Named::NotOurs),
        (3, "pkg/api/api.proto", Named::NotOurs),
        (3, "class/infiniband/", Named::NotOurs),
        (4, "tests/e2e_*.rs", Named::Exists),
        (4, "hack/NAME", Named::Exists),
        (4, "src/enforce/gone", Named::Missing),
        (4, "no_such/thing.rs", Named::Missing),
    ];
    assert_eq!(named, expect);
    // In Cargo.toml and hack/ comments a bare module path counts; `src/` of a crate is its own.
    let hash =
        "# the CRI (enforce/backfill), enforce/inputs, read/write\n\"# not a comment src/x.rs\"";
    let named: Vec<(&str, Named)> = comments(hash, Syntax::Hash)
        .into_iter()
        .flat_map(|(_, c)| words(c))
        .map(|w| (w, judge(&root, "Cargo.toml", Syntax::Hash, w)))
        .collect();
    assert_eq!(
        named,
        [
            ("enforce/backfill", Named::Missing),
            ("enforce/inputs", Named::Exists),
            ("read/write", Named::NotOurs),
        ]
    );
    let own = judge(
        &root,
        "crates/cri-client/build.rs",
        Syntax::Rust,
        "src/lib.rs",
    );
    assert_eq!(own, Named::Exists);
    assert_eq!(
        judge(&root, "Cargo.toml", Syntax::Hash, "tests/hwloc/linux"),
        Named::NotOurs
    );
}
