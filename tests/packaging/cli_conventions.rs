//! The command line follows the conventions operators expect. `--version` is derived from the
//! code (`0.3.0-dev+REVISION` until a release); every subcommand answers `--help`, lists the
//! values of options that take one of a fixed set, and survives a closed stdout
//! (`| head -c1`); errors say each cause once; the shell completions and the man pages
//! generated from the same clap definition (`nri-align generate`, hidden, which
//! hack/release-assets runs) name every subcommand, and each man page renders with groff
//! without a warning.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_nri-align");
/// The subcommands an operator uses (`generate` is hidden: for packagers).
const SUBCOMMANDS: [&str; 7] = [
    "run",
    "topology",
    "emulate",
    "simulate",
    "verify",
    "placements",
    "config",
];

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
    let want = format!("nri-align {}\n", env!("NRI_ALIGN_VERSION"));
    assert_eq!(text, want);
    // The package version (a release's, from its tag) or the next minor one in development,
    // with the revision as semver build metadata.
    let (package, revision) = (env!("CARGO_PKG_VERSION"), env!("NRI_ALIGN_GIT_REVISION"));
    let version = env!("NRI_ALIGN_VERSION");
    let (core, meta) = version.split_once('+').expect("build metadata");
    assert_eq!(meta, revision);
    let mut parts = package.split('.');
    let (major, minor) = (parts.next().expect("major"), parts.next().expect("minor"));
    let next = format!("{major}.{}.0-dev", minor.parse::<u64>().expect("minor") + 1);
    assert!(core == package || core == next, "{version} from {package}");
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

/// What the bash completion offers for the words `line` (the last one being completed), run
/// in a real bash with the generated script sourced.
fn bash_completes(script: &Path, line: &[&str]) -> String {
    let words = line
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let cword = line.len() - 1;
    let prev = if cword > 0 { line[cword - 1] } else { "" };
    let program = format!(
        "source '{}'; COMP_WORDS=({words}); COMP_CWORD={cword}; \
         _nri__align nri-align '{}' '{prev}'; echo \"${{COMPREPLY[*]}}\"",
        script.display(),
        line[cword]
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .expect("bash");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn bash_completes_past_the_first_word() {
    let dir = tempfile::tempdir().expect("tmp");
    let script = dir.path().join("nri-align.bash");
    std::fs::write(
        &script,
        nri_align(&["generate", "completions", "bash"]).stdout,
    )
    .expect("script");
    assert!(bash_completes(&script, &["nri-align", "conf"]).contains("config"));
    // Before, every word after the first completed nothing (the script's cases were named
    // apart from what its dispatch set).
    let config = bash_completes(&script, &["nri-align", "config", ""]);
    assert!(config.split(' ').any(|w| w == "check"), "{config:?}");
    let run = bash_completes(&script, &["nri-align", "run", "--state-"]);
    assert!(run.contains("--state-dir"), "{run}");
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
    // Every page another names (`nri-align-config(8)` lists `nri-align-config-check(8)`) is
    // written.
    for entry in std::fs::read_dir(dir.path()).expect("pages") {
        let text = std::fs::read_to_string(entry.expect("page").path())
            .expect("page")
            .replace("\\-", "-");
        for (i, _) in text.match_indices("nri-align-") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if text[i + name.len()..].starts_with("(8)") {
                let page = dir.path().join(format!("{name}.8"));
                assert!(
                    page.exists(),
                    "a page names {name}(8), which is not written"
                );
            }
        }
    }
}

/// A reader that closes the pipe after one byte, as `| head -c1` does: the command ends quietly
/// (done, or killed by SIGPIPE as `cat` is), never with a panic.
fn survives_closed_stdout(args: &[&str]) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nri-align");
    let mut first = [0u8; 1];
    let read = child
        .stdout
        .take()
        .expect("stdout")
        .read(&mut first)
        .expect("read");
    // The pipe is closed here (the reader dropped): later writes get EPIPE / SIGPIPE.
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(read, 1, "{args:?} printed nothing: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{args:?}: {stderr}"
    );
    assert!(
        out.status.success() || out.status.signal() == Some(libc_sigpipe()),
        "{args:?}: {:?} {stderr}",
        out.status
    );
}

/// SIGPIPE's number on Linux (every architecture nri-align builds for).
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn every_subcommand_survives_a_closed_stdout() {
    let dir = tempfile::tempdir().expect("tmp");
    let workload =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workloads/dgx1-training.yaml");
    let workload = workload.display().to_string();
    // Large outputs, so that writes go on after the reader is gone.
    survives_closed_stdout(&[
        "simulate",
        "--host",
        "dgx1-v100",
        "--json",
        "--workload",
        &workload,
    ]);
    survives_closed_stdout(&["simulate", "--host", "dgx1-v100", "--workload", &workload]);
    survives_closed_stdout(&["topology", "--host", "dgx-h100", "--json"]);
    survives_closed_stdout(&["topology", "--host", "dgx-h100"]);
    survives_closed_stdout(&["emulate", "--list"]);
    survives_closed_stdout(&["generate", "completions", "bash"]);
    let configmap =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/kubernetes/configmap.yaml");
    survives_closed_stdout(&[
        "config",
        "check",
        &configmap.display().to_string(),
        "--host",
        "dgx-h100",
    ]);
    for sub in SUBCOMMANDS {
        survives_closed_stdout(&[sub, "--help"]);
    }
    // verify and placements over a state with many records (their own tests check content).
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    let containers: serde_json::Map<String, serde_json::Value> = (0..2000)
        .map(|i| {
            let id = format!("{i:064x}");
            let rec = serde_json::json!({
                "assignment": {
                    "container_id": id, "container_name": "app", "pod_uid": "u",
                    "pod_name": format!("ns/p{i}"), "cpus": [1, 2], "exclusive": true,
                    "mems": [0], "numa_nodes": [0], "memory_bytes": 0, "gpus": [], "nics": [],
                    "policy": "best-effort", "aligned": true, "reason": "test"
                },
                "cgroups_path": format!("/k8s.io/{id}")
            });
            (id, rec)
        })
        .collect();
    let doc = serde_json::json!({"version": 1, "containers": containers});
    std::fs::write(state.join("state.json"), doc.to_string()).expect("state");
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let host = dir.path().join("host");
    std::fs::create_dir_all(host.join("sys/fs/cgroup")).expect("host");
    std::fs::create_dir_all(host.join("proc/self")).expect("proc");
    std::fs::write(
        host.join("proc/self/mountinfo"),
        "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    )
    .expect("mountinfo");
    let (state, host) = (state.display().to_string(), host.display().to_string());
    for json in [true, false] {
        for sub in ["verify", "placements"] {
            let mut args = vec![sub, "--state-dir", &state, "--host-root", &host];
            if json {
                args.push("--json");
            }
            survives_closed_stdout(&args);
        }
    }
}

#[test]
fn options_with_a_fixed_set_of_values_list_them() {
    let help = stdout(&nri_align(&["simulate", "--help"]));
    // A value enum with documented values lists each with its help (`- nri-align: ...`).
    assert!(
        help.contains("- nri-align: ") && help.contains("- kubelet: "),
        "--strategy values not in\n{help}"
    );
    for values in [
        "[possible values: preferred, lowest]",
        "[possible values: shared, sriov, per-nic]",
    ] {
        assert!(help.contains(values), "{values} not in\n{help}");
    }
    let out = nri_align(&["simulate", "--host", "dgx1-v100", "--strategy", "kubelt"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: nri-align, kubelet"));
}

#[test]
fn errors_say_their_cause_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("nope");
    let out = nri_align(&["topology", "--hwloc-xml", &missing.display().to_string()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn verify_documents_its_exit_statuses() {
    let help = stdout(&nri_align(&["verify", "--help"]));
    for line in [
        "0  every recorded container",
        "1  at least one container drifted",
        "2  could not check",
    ] {
        assert!(help.contains(line), "{line} not in\n{help}");
    }
}
