//! The alert rules of `packaging/monitoring/alerts.yaml` as an operator meets them: each has a
//! `runbook_url`, an absolute link into this project's docs at the release the rules ship with
//! (Cargo.toml's `repository`, `/blob/vRELEASE/`), which leads to a heading of that doc in this
//! checkout; each rule's unit tests (`alerts_test.yaml`) see it fire and see it stay quiet; and
//! promtool itself checks the rules and runs those tests (hack/check-monitoring: Debian's
//! promtool, unpacked under .cache/).

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use serde_json::Value;
use test_support::e2e::repo_root;

fn yaml(file: &str) -> Value {
    let path = repo_root().join("packaging/monitoring").join(file);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every alerting rule of alerts.yaml.
fn rules() -> Vec<Value> {
    let rules: Vec<Value> = yaml("alerts.yaml")["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r.get("alert").is_some())
        .collect();
    assert!(rules.len() >= 8, "{rules:?}");
    rules
}

/// The release these rules ship with: the release line of this build's `nri-align --version`
/// (`0.4.0` for `0.4.0-dev+REV` and `0.4.0+REV`), the manifests' image tag too.
fn release() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .arg("--version")
        .output()
        .expect("nri-align --version");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version = line.strip_prefix("nri-align ").expect("version line");
    let core = version.split('+').next().unwrap_or_default();
    core.split('-').next().unwrap_or_default().to_string()
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of every heading of a Markdown text (outside code blocks).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.insert(anchor(&line[hashes..]));
        }
    }
    out
}

#[test]
fn every_runbook_url_is_an_absolute_versioned_link_to_a_heading_of_the_docs() {
    assert_eq!(anchor("NriAlignRefusalsRising"), "nrialignrefusalsrising");
    assert_eq!(anchor(" 8. Uninstall"), "8-uninstall");
    let prefix = format!(
        "{}/blob/v{}/",
        env!("CARGO_PKG_REPOSITORY").trim_end_matches('/'),
        release()
    );
    assert!(prefix.starts_with("https://"), "{prefix}");
    for rule in rules() {
        let name = rule["alert"].as_str().expect("alert name");
        let annotations = &rule["annotations"];
        assert!(
            annotations.get("runbook").is_none(),
            "{name}: `runbook` is no annotation Alertmanager or Grafana knows: runbook_url"
        );
        let url = annotations["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let rest = url
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{name}: {url} is not under {prefix}"));
        let (path, fragment) = rest
            .split_once('#')
            .unwrap_or_else(|| panic!("{name}: {url} names no anchor"));
        let file = repo_root().join(path);
        let text = fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{name}: {url}: {}: {e}", file.display()));
        assert!(
            anchors(&text).contains(fragment),
            "{name}: {path} has no heading with the anchor #{fragment}"
        );
    }
}

/// Each rule's unit tests hold a time it fires and a time it is quiet: promtool compares the
/// whole list of alerts at an eval_time, so an empty list proves it quiet there, and a list
/// with the rule's own labels proves it fires.
#[test]
fn every_rule_is_tested_firing_and_quiet() {
    let tests = yaml("alerts_test.yaml");
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .collect();
    for rule in rules() {
        let name = rule["alert"].as_str().expect("alert name");
        let mine: Vec<&&Value> = cases.iter().filter(|c| c["alertname"] == name).collect();
        let fires = mine.iter().any(|c| {
            c["exp_alerts"]
                .as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(|x| x["exp_labels"].is_object()))
        });
        let quiet = mine
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(fires, "{name}: no unit test sees it fire");
        assert!(quiet, "{name}: no unit test sees it stay quiet");
    }
}

#[test]
fn promtool_checks_the_rules_and_runs_their_unit_tests() {
    let out = Command::new(repo_root().join("hack/check-monitoring"))
        .output()
        .expect("run hack/check-monitoring");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rules = rules().len();
    assert!(
        stdout.contains(&format!("SUCCESS: {rules} rules found")),
        "{stdout}"
    );
    assert!(
        stdout.contains("Unit Testing:  alerts_test.yaml\n  SUCCESS"),
        "{stdout}"
    );
}
