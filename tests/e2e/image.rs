//! The container image, run the way the DaemonSet runs it, on containerd 2.1 and on CRI-O.
//! `hack/build-image` packs this test's nri-align binary into an OCI archive, the runtime imports
//! it (`ctr images import`; CRI-O's copyimg through hack/crio-up), and CRI runs it with the
//! DaemonSet's arguments, environment, security context and every one of its mounts, read from
//! the kustomization as `kubectl kustomize` renders it (each hostPath stands in for the node's
//! directory, the ConfigMap is laid out the way the kubelet writes one; the securityContext is
//! translated to CRI as the kubelet does: no privilege, every capability dropped, no_new_privs,
//! the runtime's default seccomp profile, a read-only root). The containerized nri-align dials
//! the runtime's NRI socket through the mount, registers, and places a container created after
//! it, as seen from inside that container; its decision lands in the state dir on the host. The
//! probes the DaemonSet declares answer through the host network as the kubelet would call
//! them, `--version` in the image names the revision of its label, swapping the ConfigMap's
//! `..data` as the kubelet does reloads the configuration without a restart or a signal, and
//! the running daemon holds no capability, not even in its bounding set.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use test_support::e2e;

use serde_json::{json, Value};
use test_support::e2e::daemonset::{Mount, NodeAgent, Source};
use test_support::e2e::{
    log_events, metric, nri_align_bin, repo_root, scrape, skip_unless_ready, status_field,
    wait_probe, wait_until, ContainerSpec, Instance, PodSpec, Runtime, UpOptions,
};

const MIB: i64 = 1 << 20;

/// The line of the ConfigMap's config the test changes: a port of its own on loopback, so two
/// runs on one machine never collide (the manifest test checks the shipped value).
const SHIPPED_METRICS: &str = "metrics_address: \"0.0.0.0:9464\"";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A ConfigMap volume as the kubelet's atomic writer lays it out: the data in a timestamped
/// directory, `..data` pointing at it, and each key a symlink through `..data`.
fn configmap_volume(dir: &Path, data: &[(String, String)]) {
    let stamp = dir.join("..2026_01_01_00_00_00.000000001");
    fs::create_dir_all(&stamp).expect("mkdir configmap");
    for (key, text) in data {
        fs::write(stamp.join(key), text).expect("write configmap key");
        std::os::unix::fs::symlink(format!("..data/{key}"), dir.join(key)).expect("key link");
    }
    std::os::unix::fs::symlink(stamp.file_name().expect("stamp name"), dir.join("..data"))
        .expect("..data link");
}

/// The kubelet's update of a ConfigMap volume: the new data in a new timestamped directory, a
/// `..data_tmp` link to it renamed over `..data` (atomic), the old directory removed.
fn swap_configmap(dir: &Path, data: &[(String, String)]) {
    let old = fs::read_link(dir.join("..data")).expect("..data");
    let stamp = dir.join("..2026_01_01_00_05_00.000000002");
    fs::create_dir_all(&stamp).expect("mkdir generation");
    for (key, text) in data {
        fs::write(stamp.join(key), text).expect("write configmap key");
    }
    std::os::unix::fs::symlink(
        stamp.file_name().expect("stamp name"),
        dir.join("..data_tmp"),
    )
    .expect("tmp link");
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    fs::remove_dir_all(dir.join(old)).expect("remove the old generation");
}

/// What stands in for each of the manifest's mounts on this test host. A hostPath this test
/// does not know fails the test: a mount added to the DaemonSet must be added here too.
fn stand_in(m: &Mount, ctrd: &Instance, work: &Path, metrics: &str) -> PathBuf {
    match &m.source {
        Source::HostPath(p) => match p.as_str() {
            // The instance's private NRI socket directory (its socket is nri.sock too).
            "/var/run/nri" => ctrd
                .nri_socket()
                .parent()
                .expect("socket dir")
                .to_path_buf(),
            "/sys/fs/cgroup" | "/dev" => PathBuf::from(p),
            "/var/lib/nri-align" => work.join("state"),
            // No kubelet here: its directory when a kubelet runs, else an empty stand-in.
            "/var/lib/kubelet/pod-resources" if Path::new(p).is_dir() => PathBuf::from(p),
            "/var/lib/kubelet/pod-resources" => work.join("pod-resources"),
            // CDI spec dirs: none on a test host; empty stand-ins.
            // The links nri-align makes go to a stand-in. The mount point must exist in the
            // host's /dev (read-only in the container): udev makes /dev/char on every real
            // host; this test machine has no udev.
            "/dev/char" => {
                fs::create_dir_all("/dev/char").expect("mkdir /dev/char");
                work.join("dev-char")
            }
            "/etc/cdi" => work.join("cdi-etc"),
            "/var/run/cdi" => work.join("cdi-run"),
            other => panic!("no stand-in for hostPath {other}: add one to tests/e2e/image.rs"),
        },
        Source::ConfigMap { name, data } => {
            let data: Vec<(String, String)> = data
                .iter()
                .map(|(k, v)| {
                    assert!(
                        v.contains(SHIPPED_METRICS),
                        "{name}/{k} lacks {SHIPPED_METRICS}"
                    );
                    (k.clone(), v.replace(SHIPPED_METRICS, metrics))
                })
                .collect();
            let dir = work.join(format!("configmap-{name}"));
            configmap_volume(&dir, &data);
            dir
        }
    }
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `Name:\tvalue` of /proc/PID/status.
fn proc_status(pid: u64, key: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field(&text, key)
}

/// One test per runtime the DaemonSet is meant for: containerd 2.1 and CRI-O.
mod image_runs_as_the_daemonset_runs_it_and_places_containers {
    use test_support::e2e::Runtime;

    #[test]
    fn containerd_2_1() {
        super::image_suite(Runtime::CONTAINERD_2_1);
    }

    #[test]
    fn crio() {
        super::image_suite(Runtime::Crio);
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn image_suite(runtime: Runtime) {
    let test = format!(
        "image_runs_as_the_daemonset_runs_it_and_places_containers::{}",
        runtime.name()
    );
    let test = test.as_str();
    if skip_unless_ready(runtime, test) {
        return;
    }
    // The DaemonSet as `kubectl kustomize packaging/kubernetes` renders it (its files where no
    // kubectl is installed): security context, mounts, arguments and image reference.
    let agent = NodeAgent::load().expect("the DaemonSet parses");

    // 1. The image, from this test's own binary (the release build is the same code;
    // NRI_ALIGN_IMAGE_BINARY=target/release/nri-align tests that one), under the DaemonSet's
    // reference, imported by the runtime as it comes up.
    let t0 = Instant::now();
    let scratch = tempfile::tempdir().expect("tmp");
    let archive = scratch.path().join("nri-align.oci.tar");
    let binary = std::env::var_os("NRI_ALIGN_IMAGE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(nri_align_bin);
    run(
        Command::new(repo_root().join("hack/build-image"))
            .arg("--binary")
            .arg(&binary)
            .arg("--out")
            .arg(&archive)
            .arg("--kustomization")
            .arg(scratch.path().join("kubernetes"))
            .args(["--ref", &agent.image]),
        "hack/build-image",
    );
    let built = t0.elapsed();
    let t1 = Instant::now();
    let options = UpOptions {
        images: vec![(archive.clone(), agent.image.clone())],
        ..UpOptions::default()
    };
    let ctrd = Instance::fresh_with(runtime, "e2e-image", options).expect("runtime comes up");
    let cri = ctrd.cri();
    let work = ctrd.dir().join("image-test");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).expect("mkdir work");
    eprintln!(
        "{test}: image built in {built:?} ({} MiB); {} up with it imported in {:?}",
        fs::metadata(&archive).map(|m| m.len() >> 20).unwrap_or(0),
        runtime.name(),
        t1.elapsed()
    );

    // What CRI reports of the image: the Containerfile's labels and default user.
    let image: Value =
        serde_json::from_str(&cri.ok(&["inspecti", &agent.image]).expect("inspecti"))
            .expect("inspecti JSON");
    let config = &image["info"]["imageSpec"]["config"];
    let labels = &config["Labels"];
    // The version label is the binary's whole version (`0.4.0-dev+REVISION` between releases).
    let binary_version = run(
        Command::new(&binary).arg("--version"),
        "nri-align --version",
    );
    assert_eq!(
        labels["org.opencontainers.image.version"].as_str(),
        binary_version.strip_prefix("nri-align "),
        "{image}"
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.title"], "nri-align");
    let head = run(
        Command::new("git")
            .arg("-C")
            .arg(repo_root())
            .args(["rev-parse", "HEAD"]),
        "git rev-parse",
    );
    assert!(
        labels["org.opencontainers.image.revision"]
            .as_str()
            .is_some_and(|r| r.starts_with(&head)),
        "{labels}"
    );
    assert_eq!(config["User"], "65534:65534", "non-root unless asked");
    assert_eq!(config["Entrypoint"], json!(["/usr/bin/nri-align"]));

    // 2. nri-align's pod and container, from the manifest.
    let port = free_port();
    let metrics = format!("metrics_address: \"127.0.0.1:{port}\"");
    let mut mounts = Vec::new();
    for m in &agent.mounts {
        let host = stand_in(m, &ctrd, &work, &metrics);
        fs::create_dir_all(&host).expect("stand-in dir");
        mounts.push(json!({
            "container_path": m.container_path,
            "host_path": host,
            "readonly": m.readonly,
        }));
    }
    assert_eq!(mounts.len(), agent.mounts.len());
    let node_name = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let envs: Vec<Value> = agent
        .env
        .iter()
        .map(|name| match name.as_str() {
            "NODE_NAME" => json!({"key": name, "value": node_name}),
            other => panic!("no value for env {other}: add one to tests/e2e/image.rs"),
        })
        .collect();
    assert!(agent.host_network, "the DaemonSet uses the host network");
    // The rendered securityContext, translated as the kubelet does (capabilities, no_new_privs,
    // seccomp, user, read-only root).
    let security = agent
        .cri_security_context()
        .expect("the securityContext translates to CRI");
    eprintln!("{test}: security context {security}");
    let container = json!({
        "metadata": {"name": "nri-align", "attempt": 0},
        // As the kubelet sends it (CRI-O checks its signature policy against the latter).
        "image": {"image": agent.image, "user_specified_image": agent.image},
        "args": agent.args,
        "envs": envs,
        "mounts": mounts,
        "log_path": "nri-align.log",
        "linux": {"security_context": security},
    });
    let pod = ctrd
        .pod_value(
            &PodSpec::new("nri-align").namespace("nri-align"),
            agent.privileged,
        )
        .expect("pod config");
    let pod = ctrd
        .run_pod_value("nri-align", &pod)
        .expect("nri-align pod");
    let agent_id = ctrd
        .run_container_value(&pod, &container)
        .expect("nri-align container starts");
    // Like crictl, the client prints the container's stderr (where nri-align logs) on stderr.
    let logs = || {
        cri.run(&["logs", &agent_id])
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(30), || !log_events(
            &logs(),
            "registered"
        )
        .is_empty()),
        "the containerized nri-align did not register:\n{}\ncontainerd:\n{}",
        logs(),
        ctrd.log_tail(30)
    );
    let out = logs();
    assert_eq!(
        log_events(&out, "registering with the runtime")[0]["plugin"],
        "50-nri-align",
        "{out}"
    );
    // The ConfigMap is read as sections: with no API access in this test the node's name
    // alone chooses, and the shipped ConfigMap has only `default`.
    let chosen = log_events(&out, "configuration section chosen");
    assert_eq!(chosen[0]["section"], "default", "{out}");
    assert_eq!(chosen[0]["dir"], "/etc/nri-align", "{out}");

    // The DaemonSet's probes, as the kubelet calls them: the port is the container's `metrics`
    // port on the host network.
    let addr = format!("127.0.0.1:{port}");
    let manifest = &agent.daemonset["spec"]["template"]["spec"]["containers"][0];
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &manifest[probe]["httpGet"];
        assert_eq!(get["port"], "metrics", "{probe}: {get}");
        let path = get["path"]
            .as_str()
            .unwrap_or_else(|| panic!("{probe}: {get}"));
        let (code, body) = wait_probe(&addr, path, 200, Duration::from_secs(30));
        assert_eq!(code, 200, "{probe} probe {path}: {body}\n{}", logs());
        eprintln!("{test}: {probe} probe {path}: {}", body.trim());
    }
    // --version in the image names the revision its label carries.
    let version = cri
        .exec(&agent_id, &["/usr/bin/nri-align", "--version"])
        .expect("exec --version");
    let revision = version
        .stdout
        .trim()
        // `nri-align 0.3.0-dev+REVISION`: the revision is the semver build metadata.
        .rsplit_once('+')
        .map(|(_, r)| r)
        .unwrap_or_default()
        .trim_end_matches("-dirty")
        .to_string();
    assert!(
        revision.len() >= 12
            && labels["org.opencontainers.image.revision"]
                .as_str()
                .is_some_and(|l| l.starts_with(&revision)),
        "--version {:?} vs label {}",
        version.stdout,
        labels["org.opencontainers.image.revision"]
    );

    // 3. A Guaranteed container created now is placed: one exclusive CPU and its node's
    // memory, seen from inside it.
    let app_pod = ctrd.run_pod(&PodSpec::new("app")).expect("app pod");
    let app = ctrd
        .run_container(
            &app_pod,
            &ContainerSpec::new("pinned")
                .cpu_millis(1000, Some(1000))
                .memory(64 * MIB),
        )
        .expect("app container");
    let status = cri.proc_status(&app).expect("status");
    let cpus = status_field(&status, "Cpus_allowed_list").unwrap_or_default();
    assert!(
        cpus.parse::<u32>().is_ok(),
        "one exclusive CPU, got {cpus:?}; nri-align:\n{}",
        logs()
    );
    let env = cri.env(&app).expect("env");
    let decision = env.get("NRI_ALIGN_DECISION").cloned().unwrap_or_default();
    assert!(
        decision.contains(&format!("cpus={cpus} exclusive=true")),
        "{env:?}"
    );

    // Its decision is in the state dir on the host (the hostPath mount), and in the metrics
    // served on the address of the ConfigMap's config.
    let state_dir = agent
        .mount("/var/lib/nri-align")
        .map(|m| stand_in_path(m, &work))
        .expect("state mount");
    let state = e2e::align::read_state(&state_dir).expect("state on the host");
    assert!(state.contains_key(&app), "{app} not in {:?}", state.keys());
    let body = scrape(&format!("127.0.0.1:{port}")).expect("metrics");
    assert!(
        metric(
            &body,
            "nri_align_admissions_total{policy=\"best-effort\",aligned=\"true\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{body}"
    );

    // 4. A refused container fails its creation with nri-align's message (what
    // `kubectl describe pod` shows as CreateContainerError).
    let bad_pod = ctrd
        .run_pod(&PodSpec::new("bad").annotation("policy.nri-align.io/pod", "sometimes"))
        .expect("bad pod");
    let refused = ctrd
        .create(&bad_pod, &ContainerSpec::new("refused"))
        .expect_err("refused")
        .to_string();
    assert!(
        refused.contains("nri-align: invalid annotation policy.nri-align.io/pod"),
        "{refused}"
    );
    let line = refused
        .lines()
        .find(|l| l.contains("nri-align: invalid"))
        .unwrap_or_default();
    eprintln!(
        "{test}: the runtime's error for a refused container: {}",
        line.trim()
    );

    // 4b. The kubelet swaps in a new version of the ConfigMap: nri-align reloads it by itself
    // (no signal, no restart), and the next container follows it (its namespace is exempt now:
    // no decision, no adjustment).
    let Some((cm_dir, cm_data)) = agent.mounts.iter().find_map(|m| match &m.source {
        Source::ConfigMap { name, data } => Some((work.join(format!("configmap-{name}")), data)),
        Source::HostPath(_) => None,
    }) else {
        panic!("the DaemonSet mounts no ConfigMap");
    };
    let swapped: Vec<(String, String)> = cm_data
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace(SHIPPED_METRICS, &metrics)
                .replace("exempt_namespaces: []", "exempt_namespaces: [swapped-in]");
            assert!(
                v.contains("swapped-in"),
                "{k} has no `exempt_namespaces: []` line"
            );
            (k.clone(), v)
        })
        .collect();
    swap_configmap(&cm_dir, &swapped);
    assert!(
        wait_until(Duration::from_secs(30), || log_events(
            &logs(),
            "configuration reloaded"
        )
        .iter()
        .any(|e| e.get("trigger").is_some_and(|t| t == "file changed"))),
        "the swapped ConfigMap was not reloaded:\n{}",
        logs()
    );
    let exempt_pod = ctrd
        .run_pod(&PodSpec::new("exempt").namespace("swapped-in"))
        .expect("exempt pod");
    let exempt = ctrd
        .run_container(&exempt_pod, &ContainerSpec::new("untouched"))
        .expect("exempt container");
    assert!(
        !cri.env(&exempt)
            .expect("env")
            .contains_key("NRI_ALIGN_DECISION"),
        "a container of an exempt namespace was placed:\n{}",
        logs()
    );

    // 5. The running daemon: the security context took effect (no capability, not even in
    // the bounding set; no_new_privs; a seccomp filter), and its memory (the DaemonSet's
    // requests and limits are set from this).
    let info = cri.inspect(&agent_id).expect("inspect nri-align");
    let pid = info["info"]["pid"].as_u64().expect("pid of nri-align");
    let threads: BTreeMap<String, String> = fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|e| e.ok())
        .map(|e| {
            let tid = e.file_name().to_string_lossy().into_owned();
            let caps = status_field(
                &fs::read_to_string(e.path().join("status")).unwrap_or_default(),
                "CapEff",
            )
            .unwrap_or_default();
            (tid, caps)
        })
        .collect();
    let main_caps = proc_status(pid, "CapEff").unwrap_or_default();
    assert_eq!(
        main_caps, "0000000000000000",
        "main thread keeps capabilities"
    );
    let dropped_all = security["capabilities"]["drop_capabilities"]
        .as_array()
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    if dropped_all {
        assert_eq!(
            proc_status(pid, "CapBnd").as_deref(),
            Some("0000000000000000"),
            "the bounding set keeps capabilities"
        );
    }
    if security["no_new_privs"] == json!(true) {
        assert_eq!(proc_status(pid, "NoNewPrivs").as_deref(), Some("1"));
    }
    if security.get("seccomp").is_some() {
        // 2: a seccomp filter (the runtime's default profile) is in force.
        assert_eq!(proc_status(pid, "Seccomp").as_deref(), Some("2"));
    }
    let workers_with_caps: Vec<_> = threads
        .iter()
        .filter(|(_, c)| c.as_str() != "0000000000000000")
        .collect();
    eprintln!(
        "{test}: nri-align pid {pid}: VmRSS {}, VmHWM {}, {} threads, threads with capabilities: {:?}",
        proc_status(pid, "VmRSS").unwrap_or_default(),
        proc_status(pid, "VmHWM").unwrap_or_default(),
        threads.len(),
        workers_with_caps
    );
    assert!(
        workers_with_caps.is_empty(),
        "threads with capabilities: {workers_with_caps:?}"
    );
}

/// The host directory standing in for a hostPath mount (same rule as [`stand_in`]).
fn stand_in_path(m: &Mount, work: &Path) -> PathBuf {
    match &m.source {
        Source::HostPath(p) if p == "/var/lib/nri-align" => work.join("state"),
        other => panic!("stand_in_path only knows the state dir, not {other:?}"),
    }
}
