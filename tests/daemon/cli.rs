//! `nri-align verify` and `nri-align run` start-up checks, through the real binary, against
//! a fixture host tree (no containerd needed).

use std::fs;
use std::path::Path;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nri-align"))
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, text).expect("write");
}

/// A host tree with one container process (pid 100) on cgroup v1 cpuset `cg_cpus`, and a
/// state dir recording that container on CPUs 1-2 with GPU /dev/nvidia0.
fn fixture(root: &Path, cg_cpus: &str) {
    fixture_named(root, cg_cpus, "ns/p", "app");
}

/// [`fixture`] with the container recorded as `name` of pod `pod` (`namespace/name`).
fn fixture_named(root: &Path, cg_cpus: &str, pod: &str, name: &str) {
    let id = "0123456789abcdef";
    write(
        root,
        "host/proc/self/mountinfo",
        "1 0 0:1 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
    );
    write(
        root,
        "host/proc/100/cgroup",
        &format!("3:cpuset:/k8s.io/{id}\n"),
    );
    write(
        root,
        "host/proc/100/status",
        &format!("Cpus_allowed_list:\t{cg_cpus}\nMems_allowed_list:\t0\n"),
    );
    write(
        root,
        &format!("host/sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.cpus"),
        cg_cpus,
    );
    write(
        root,
        &format!("host/sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.mems"),
        "0",
    );
    write(root, "host/proc/100/root/dev/nvidia0", "");
    let state = serde_json::json!({
        "version": 1,
        "containers": { id: {
            "assignment": {
                "container_id": id, "container_name": name, "pod_uid": "u", "pod_name": pod,
                "cpus": [1, 2], "exclusive": true, "mems": [0], "numa_nodes": [0],
                "memory_bytes": 0, "gpus": ["0000:1b:00.0"], "nics": [], "policy": "best-effort",
                "aligned": true, "reason": "test"
            },
            "applied_cpus": [1, 2],
            "devices": ["/dev/nvidia0"],
            "cgroups_path": format!("/k8s.io/{id}")
        }}
    });
    write(root, "state/state.json", &state.to_string());
    let mut perms = fs::metadata(root.join("state"))
        .expect("stat")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o700);
    fs::set_permissions(root.join("state"), perms).expect("chmod");
}

fn verify(root: &Path, json: bool) -> std::process::Output {
    let mut cmd = bin();
    cmd.arg("verify")
        .arg("--state-dir")
        .arg(root.join("state"))
        .arg("--host-root")
        .arg(root.join("host"));
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("run nri-align")
}

#[test]
fn verify_passes_when_the_container_matches() {
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "1-2");
    let out = verify(t.path(), false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("ok "), "{stdout}");
    assert!(stdout.contains("ns/p/app pids [100]"), "{stdout}");
}

#[test]
fn verify_reports_drift_and_exits_non_zero() {
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "0-3");
    let out = verify(t.path(), true);
    assert!(!out.status.success());
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(checks[0]["verdict"], "drift");
    let problems = checks[0]["problems"].to_string();
    assert!(
        problems.contains("cgroup cpuset.cpus is 0-3, decided 1-2"),
        "{problems}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 of 1 recorded containers drifted"),
        "{stderr}"
    );
}

#[test]
fn verify_without_state_says_so() {
    let t = tempfile::tempdir().expect("tmp");
    let out = bin()
        .arg("verify")
        .arg("--state-dir")
        .arg(t.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no decisions recorded"));
}

#[test]
fn run_rejects_a_config_with_an_unknown_key_by_name() {
    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "c.yaml", "policy: none\nreserved_cpu: \"0\"\n");
    let out = bin()
        .arg("run")
        .arg("--config")
        .arg(t.path().join("c.yaml"))
        .arg("--state-dir")
        .arg(t.path().join("s"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown field `reserved_cpu`"), "{stderr}");
}

#[test]
fn verify_exit_statuses_tell_clean_drift_and_could_not_check_apart() {
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "1-2");
    assert_eq!(verify(t.path(), false).status.code(), Some(0));
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "0-3");
    assert_eq!(verify(t.path(), false).status.code(), Some(1));
    // No state dir at all: nothing was checked, which is not a drift.
    let t = tempfile::tempdir().expect("tmp");
    let out = bin()
        .arg("verify")
        .arg("--state-dir")
        .arg(t.path().join("absent"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("state dir") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

/// The DaemonSet has the host's cgroup hierarchy but its own PID namespace: the container's
/// process is not in its /proc, and `cgroup.procs` lists it as `0`.
#[test]
fn verify_in_its_own_pid_namespace_finds_containers_through_their_cgroup() {
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "1-2");
    fs::remove_dir_all(t.path().join("host/proc/100")).expect("hide the process");
    write(
        t.path(),
        "host/sys/fs/cgroup/cpuset/k8s.io/0123456789abcdef/cgroup.procs",
        "0\n",
    );
    let out = verify(t.path(), false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.starts_with("ok "), "{stdout}");
    assert!(
        stdout.contains("unchecked: 1 process(es) in its cgroup, none visible"),
        "{stdout}"
    );

    // No cgroup hierarchy to look in: unknown, and exit 2, never an all-clear.
    write(t.path(), "host/proc/self/mountinfo", "");
    let out = verify(t.path(), true);
    assert_eq!(out.status.code(), Some(2));
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(checks[0]["verdict"], "unknown");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 of 1 recorded containers could not be checked"),
        "{stderr}"
    );
}

/// `placements --svg` of the fixture in `dir`: the container's GPU, memory node and
/// exclusive CPUs drawn as its own, and named in the legend.
fn picture_marks_the_container(dir: &Path) {
    let svg = dir.join("placements.svg");
    let out = bin()
        .arg("placements")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--host", "dgx-h100", "--svg"])
        .arg(&svg)
        .output()
        .expect("run nri-align");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&svg).expect("picture");
    let doc = roxmltree::Document::parse(&text).expect("valid SVG");
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("GPU") && t.contains("0000:1b:00.0") && t.ends_with("ns/p/app")),
        "the container's GPU is drawn as its own"
    );
    assert!(
        titles.contains(&"memory of node 0: ns/p/app"),
        "its memory node is marked"
    );
    let legend = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("legend"))
        .expect("legend");
    let legend: String = legend.descendants().filter_map(|n| n.text()).collect();
    assert!(legend.contains("ns/p/app"), "{legend}");
    // Its exclusive CPUs are drawn as its own.
    for cpu in [1, 2] {
        let own = format!("CPU {cpu}: ns/p/app");
        assert!(titles.contains(&own.as_str()), "{own}");
    }
}

#[test]
fn placements_lists_what_runs_where() {
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "1-2");
    let run = |json: bool| {
        let mut cmd = bin();
        cmd.arg("placements")
            .arg("--state-dir")
            .arg(t.path().join("state"))
            .arg("--host-root")
            .arg(t.path().join("host"));
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("run nri-align")
    };
    let out = run(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text.lines().nth(1).expect("one row");
    for field in [
        "0123456789abc",
        "ns/p",
        "app",
        "best-effort",
        "1-2",
        "0000:1b:00.0",
    ] {
        assert!(row.contains(field), "{field} not in {row}");
    }
    let out = run(true);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(rows[0]["pod"], "ns/p");
    assert_eq!(rows[0]["cpus"], "1-2");
    assert_eq!(rows[0]["mems"], "0");
    assert_eq!(rows[0]["gpus"][0], "0000:1b:00.0");
    // Dated by its cgroup, which the fixture made just now.
    let since = rows[0]["since"].as_str().expect("since");
    assert!(since.len() == 20 && since.ends_with('Z'), "{since}");

    // The same as a picture of the host: the container's GPU in its colour, named in the legend.
    picture_marks_the_container(t.path());

    // A missing state dir: exit 2, the daemon's --state-dir named.
    let out = bin()
        .args(["placements", "--state-dir"])
        .arg(t.path().join("absent"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn names_with_terminal_escapes_are_printed_escaped() {
    let t = tempfile::tempdir().expect("tmp");
    // What a runtime may hand over as names: a colour change and a carriage return that would
    // overwrite the start of the line.
    fixture_named(t.path(), "0-3", "ns/\x1b[31mred", "fake\rok      ");
    let placements = bin()
        .arg("placements")
        .arg("--state-dir")
        .arg(t.path().join("state"))
        .arg("--host-root")
        .arg(t.path().join("host"))
        .output()
        .expect("run nri-align");
    assert!(placements.status.success());
    let verify = verify(t.path(), false);
    assert_eq!(verify.status.code(), Some(1), "the fixture drifted");
    for out in [placements, verify] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("ns/\\x1b[31mred") && text.contains("fake\\rok"),
            "{text:?}"
        );
        let raw: Vec<char> = text
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(raw.is_empty(), "{raw:?} in {text:?}");
    }
}

/// `thread stat` text whose field 39 (the CPU it last ran on) is `cpu`.
fn thread_stat(cpu: u32) -> String {
    let mut f: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
    f[0] = "S".into();
    f[36] = cpu.to_string();
    format!("100 (app) {}\n", f.join(" "))
}

#[test]
fn verify_says_where_memory_lives_and_flags_it_off_its_nodes() {
    let t = tempfile::tempdir().expect("tmp");
    fixture(t.path(), "1-2");
    // No memory hierarchy mounted: its process's numa_maps say 1 MiB on node 0 (its node),
    // 3 MiB on node 1; two threads last ran on CPU 1 (its cpuset), one on CPU 5.
    write(
        t.path(),
        "host/proc/100/numa_maps",
        "00400000 default file=/app mapped=256 N0=256 kernelpagesize_kB=4\n\
         7f0000000000 default anon=768 dirty=768 N1=768 kernelpagesize_kB=4\n",
    );
    for (tid, cpu) in [(100, 1), (101, 1), (102, 5)] {
        write(
            t.path(),
            &format!("host/proc/100/task/{tid}/stat"),
            &thread_stat(cpu),
        );
    }
    let out = verify(t.path(), false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // A report, not drift: the exit status stays 0.
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "memory: 4.0 MiB resident, 25% on its nodes 0 (N0 1.0 MiB, N1 3.0 MiB; numa-maps)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("threads: 2 last ran inside its cpuset 1-2, 1 outside (last on CPUs 5)"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("REMOTE-MEMORY: 75% of its resident memory is off its nodes (threshold 50%)"),
        "{stdout}"
    );
    let out = verify(t.path(), true);
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(checks[0]["memory"]["local_percent"], 25);
    assert_eq!(checks[0]["memory"]["bytes_per_node"]["1"], 3 << 20);
    assert_eq!(checks[0]["threads"][0]["outside"], 1);
    assert_eq!(checks[0]["remote_memory"]["remote_percent"], 75);
    // The threshold from the configuration file, and the flag over it.
    write(
        t.path(),
        "nri-align.yaml",
        "verify_remote_memory_threshold: 80\n",
    );
    let threshold = |extra: &[&str]| {
        let mut cmd = bin();
        cmd.arg("verify")
            .arg("--state-dir")
            .arg(t.path().join("state"))
            .arg("--host-root")
            .arg(t.path().join("host"))
            .arg("--config")
            .arg(t.path().join("nri-align.yaml"))
            .args(extra);
        String::from_utf8_lossy(&cmd.output().expect("run").stdout).into_owned()
    };
    let text = threshold(&[]);
    assert!(!text.contains("REMOTE-MEMORY"), "{text}");
    let text = threshold(&["--remote-memory-threshold", "10"]);
    assert!(text.contains("(threshold 10%)"), "{text}");
}
