//! Rules the house keeps for its docs, checked rather than remembered: the README stays a
//! first page (at most 250 lines), docs/performance.md holds figures and the commands that
//! made them (at most 400 lines: history goes to the CHANGELOG and git), and no user doc or
//! CHANGELOG entry names a tracker number of this project (`#12`, `issue 12`): users have no
//! tracker to look them up in. Upstream references name their project (`kubernetes#84869`,
//! `containerd/nri#123`) and are kept.

use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lines_of(rel: &str) -> usize {
    std::fs::read_to_string(repo().join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .lines()
        .count()
}

#[test]
fn the_readme_and_the_performance_page_stay_within_their_length() {
    for (rel, most) in [("README.md", 250), ("docs/performance.md", 400)] {
        let n = lines_of(rel);
        assert!(
            n <= most,
            "{rel} has {n} lines, more than {most}: move detail to a page of docs/ (the README) \
             or history to the CHANGELOG (performance.md)"
        );
    }
}

/// The tracker numbers in `text`: `#N` not glued to a project name before it, and
/// `issue N` / `issues N`, each with its line number.
fn tracker_numbers(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b != b'#' {
                continue;
            }
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            let ends_word = bytes
                .get(i + 1 + digits)
                .map_or(true, |c| !c.is_ascii_alphanumeric());
            let glued =
                i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || b"/_.-".contains(&bytes[i - 1]));
            if digits > 0 && ends_word && !glued {
                found.push((n + 1, line[i..i + 1 + digits].to_string()));
            }
        }
        let lower = line.to_ascii_lowercase();
        for word in ["issue ", "issues "] {
            let mut from = 0;
            while let Some(at) = lower[from..].find(word) {
                let start = from + at;
                let rest = lower[start + word.len()..].trim_start_matches('#');
                if rest.starts_with(|c: char| c.is_ascii_digit())
                    && (start == 0 || !lower.as_bytes()[start - 1].is_ascii_alphanumeric())
                {
                    found.push((n + 1, line[start..].chars().take(16).collect()));
                }
                from = start + word.len();
            }
        }
    }
    found
}

#[test]
fn no_user_doc_names_a_tracker_number() {
    let mut files = vec![repo().join("README.md"), repo().join("CHANGELOG.md")];
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let path = entry.expect("docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut bad = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for (line, what) in tracker_numbers(&text) {
            bad.push(format!("{}:{line}: {what}", file.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "tracker numbers in user docs (name the upstream project, or say what changed):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_tracker_number_rule_tells_ours_from_upstream_ones() {
    let text =
        "see #12 and issue 7\nkubernetes#84869, containerd/nri#3, colour #1f77b4\n# 1 heading";
    let found: Vec<String> = tracker_numbers(text).into_iter().map(|(_, w)| w).collect();
    assert_eq!(found, vec!["#12".to_string(), "issue 7".to_string()]);
}
