//! Issue 15.6: the command line follows the conventions operators expect. `--version` names
//! the git revision; every subcommand answers `--help`; the shell completions and the man pages
//! generated from the same clap definition (`nri-align generate`, hidden, which
//! hack/release-assets runs) name every subcommand, and each man page renders with groff
//! without a warning.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_nri-align");
/// The subcommands an operator uses (`generate` is hidden: for packagers).
const SUBCOMMANDS: [&str; 5] = ["run", "topology", "emulate", "simulate", "verify"];

fn nri_align(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run nri-align")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn version_names_the_git_revision() {
    let text = stdout(&nri_align(&["--version"]));
    let want = format!(
        "nri-align {} ({})\n",
        env!("CARGO_PKG_VERSION"),
        env!("NRI_ALIGN_GIT_REVISION")
    );
    assert_eq!(text, want);
    // In this checkout the revision is the commit's (build.rs), maybe with -dirty.
    let head = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let revision = env!("NRI_ALIGN_GIT_REVISION");
    match (head, std::env::var("NRI_ALIGN_GIT_REVISION")) {
        // Set when the tests were built: that value wins.
        (_, Ok(forced)) if !forced.is_empty() => assert_eq!(revision, forced.trim()),
        // A commit made after the build would differ; the test binary and nri-align are
        // built together, so compare the shape only when HEAD moved.
        (Some(head), _) => assert!(
            revision == head
                || revision == format!("{head}-dirty")
                || (revision.len() >= 12 && revision[..12].bytes().all(|b| b.is_ascii_hexdigit())),
            "revision {revision}, HEAD {head}"
        ),
        (None, _) => assert_eq!(revision, "unknown"),
    }
    // Subcommands carry it too (clap names them `nri-align-run`).
    assert_eq!(
        stdout(&nri_align(&["run", "--version"])),
        want.replacen("nri-align", "nri-align-run", 1)
    );
}

#[test]
fn every_subcommand_answers_help() {
    let top = stdout(&nri_align(&["--help"]));
    for sub in SUBCOMMANDS {
        assert!(top.contains(&format!("  {sub} ")), "{sub} not in\n{top}");
        let help = stdout(&nri_align(&[sub, "--help"]));
        assert!(
            help.contains(&format!("Usage: nri-align {sub}")),
            "{sub} --help:\n{help}"
        );
    }
    assert!(
        !top.contains("generate"),
        "generate is for packagers:\n{top}"
    );
}

#[test]
fn completions_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&nri_align(&["generate", "completions", shell]));
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
        // An option of `run`, so arguments are completed too.
        assert!(
            script.contains("state-dir"),
            "{shell} completion lacks --state-dir"
        );
    }
}

fn groff_warnings(page: &Path) -> String {
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(page)
        .output()
        .expect("groff (hack/setup installs groff-base)");
    assert!(out.status.success(), "groff {}: {out:?}", page.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn man_pages_exist_for_every_subcommand_and_render_cleanly() {
    let dir = tempfile::tempdir().expect("tmp");
    let listed = stdout(&nri_align(&[
        "generate",
        "man",
        &dir.path().display().to_string(),
    ]));
    let mut pages = vec!["nri-align.8".to_string()];
    pages.extend(SUBCOMMANDS.iter().map(|s| format!("nri-align-{s}.8")));
    for page in &pages {
        let path = dir.path().join(page);
        assert!(listed.contains(&path.display().to_string()), "{listed}");
        let text = std::fs::read_to_string(&path).expect("page");
        assert!(text.contains(".TH "), "{page}: no title");
        assert_eq!(groff_warnings(&path), "", "{page}");
    }
    let main = std::fs::read_to_string(dir.path().join("nri-align.8")).expect("page");
    assert!(
        main.contains(env!("NRI_ALIGN_GIT_REVISION")),
        "the page names the build"
    );
    assert!(!dir.path().join("nri-align-generate.8").exists());
}
