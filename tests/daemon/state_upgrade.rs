//! Upgrades keep what runs: a state file written by 0.1.0 (tests/fixtures/state-0.1.0, from a real
//! run) is read by this version. Through the binary only (`nri-align verify --json`, `nri-align
//! run`), so the checks do not depend on where the state code lives: `verify` lists every record
//! with its pod and container, and `run` started on that state dir restores every record into its
//! engine and keeps them (the upgrade of a running node).

use std::path::PathBuf;
use std::process::Command;
use test_support::e2e;

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

/// The fixture's records: id -> record.
fn fixture_records() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-0.1.0/state.json"),
    )
    .expect("fixture");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    doc["containers"].as_object().expect("containers").clone()
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// Under `root` (an emulated host), the three containers of the fixture as running processes:
/// `/proc/PID/cgroup` in their cgroup (cgroup v1, as on the machine that wrote the file),
/// their status, their `/dev`, and the cpuset hierarchy with the cpusets they were given.
fn fixture_containers_running_under(root: &std::path::Path) -> Vec<(String, u32)> {
    write(
        &root.join("proc/self/mountinfo"),
        "30 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpuset\n",
    );
    let mut pids = Vec::new();
    for (n, (id, rec)) in fixture_records().iter().enumerate() {
        let pid = 4000 + u32::try_from(n).expect("small");
        let cgroup = rec["cgroups_path"].as_str().expect("cgroups_path");
        let cpus = rec["applied_cpus"]
            .as_array()
            .expect("applied_cpus")
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let proc = root.join(format!("proc/{pid}"));
        write(
            &proc.join("cgroup"),
            &format!("4:cpuset:{cgroup}\n2:memory:{cgroup}\n"),
        );
        write(
            &proc.join("status"),
            &format!("Name:\tsh\nPid:\t{pid}\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0\n"),
        );
        std::fs::create_dir_all(proc.join("root/dev")).expect("dev");
        for dev in rec["devices"].as_array().expect("devices") {
            let name = dev.as_str().expect("device").trim_start_matches("/dev/");
            write(&proc.join("root/dev").join(name), "");
        }
        let cg = root
            .join("sys/fs/cgroup/cpuset")
            .join(cgroup.trim_start_matches('/'));
        write(&cg.join("cpuset.cpus"), &format!("{cpus}\n"));
        write(&cg.join("cpuset.mems"), "0\n");
        pids.push((id.clone(), pid));
    }
    pids
}

/// The upgrade itself: `nri-align run` of this version starts on the state dir 0.1.0 left,
/// on the host it was written on (emulated `localhost-1n` with the fixture's containers still
/// running), restores every record into its engine (the free CPUs and GPUs it reports count
/// them: CPU 0 and GPU 0000:03:00.0 stay held), drops none, and `verify` then finds every
/// container placed as recorded.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a running daemon, step by step: each step checks what the steps before left in its state and its answers"
)]
fn nri_align_run_on_a_0_1_0_state_dir_restores_every_record() {
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().join("root");
    let bin = env!("CARGO_BIN_EXE_nri-align");
    let out = Command::new(bin)
        .args(["emulate", "--host", "localhost-1n", "--out"])
        .arg(&root)
        .output()
        .expect("emulate");
    assert!(out.status.success(), "{out:?}");
    let running = fixture_containers_running_under(&root);
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir state");
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-0.1.0/state.json"),
        state.join("state.json"),
    )
    .expect("copy");
    let config = dir.path().join("c.yaml");
    e2e::write_private(&config, "metrics_address: \"127.0.0.1:0\"\n").expect("config");

    let mut cmd = Command::new(bin);
    cmd.arg("run")
        .arg("--socket")
        .arg(dir.path().join("no-runtime.sock"))
        .arg("--state-dir")
        .arg(&state)
        .arg("--config")
        .arg(&config)
        .arg("--host-root")
        .arg(&root)
        .arg("--nvml-lib")
        .arg(e2e::EmulatedHost::nvml_lib().expect("fake NVML"))
        .env("FAKE_NVML_FIXTURE", root.join("nvml.json"))
        .env("RUST_LOG", "info");
    let mut daemon =
        e2e::PluginProcess::spawn_logged(cmd, dir.path().join("run.log")).expect("start");
    assert!(
        daemon.wait_for_output("previous decisions restored", Duration::from_secs(20)),
        "{}",
        daemon.output()
    );
    let log = daemon.output();
    let restored = &e2e::log_events(&log, "previous decisions restored")[0];
    assert_eq!(
        (restored["restored"].as_str(), restored["dropped"].as_str()),
        ("3", "0"),
        "{log}"
    );
    assert!(!log.contains("released: no process left"), "{log}");
    assert!(!log.contains("not restored"), "{log}");
    // What the engine holds: CPU 0 exclusive to train/cuda and one of the two GPUs.
    let addr = daemon.metrics_address().expect("metrics");
    let body = e2e::scrape(&addr).expect("metrics");
    assert_eq!(
        e2e::metric(&body, "nri_align_free_cpus{numa_node=\"0\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        e2e::metric(&body, "nri_align_free_gpus{numa_node=\"0\"}"),
        Some(1.0),
        "{body}"
    );
    daemon.stop(nix::sys::signal::Signal::SIGTERM);
    assert!(
        daemon.exited().is_some_and(|s| s.success()),
        "{}",
        daemon.output()
    );

    // The state file still has every record, and every container is where it was put.
    let out = Command::new(bin)
        .args(["verify", "--json", "--state-dir"])
        .arg(&state)
        .arg("--host-root")
        .arg(&root)
        .output()
        .expect("verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("verify JSON");
    let entries = report.as_array().expect("entries");
    assert_eq!(entries.len(), 3, "{stdout}");
    for (id, pid) in running {
        let e = entries
            .iter()
            .find(|e| e["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not in {stdout}"));
        assert_eq!(e["verdict"], "ok", "{e}");
        assert_eq!(e["pids"], serde_json::json!([pid]), "{e}");
    }
}
