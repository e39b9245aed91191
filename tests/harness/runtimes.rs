//! Proves the runtime harness itself works on containerd 1.7, containerd 2.1 and CRI-O: each
//! comes up with NRI on a private socket and is reused by a second `up`, pods and containers
//! run through the CRI client with the kubelet's labels and namespace options, exec sees the
//! container's real cpuset and environment, CRI errors come back with the runtime's message,
//! running containers survive a SIGKILL of the runtime, stop and remove work; and the runtime
//! launches what the harness installs as a pre-launched NRI plugin, with NRI's environment.
//! The plugin-driven e2e tests build on exactly these helpers.

use std::process::Command;
use std::time::Instant;
use test_support::e2e;
use test_support::each_runtime;

use test_support::e2e::{
    host_cpus, repo_root, skip_unless_ready, status_field, wait_until, ContainerSpec, Instance,
    PodSpec, Runtime,
};

/// Highest CPU this process may use: a cpuset that differs from the default on any multi-CPU
/// host.
fn last_cpu() -> String {
    let list = host_cpus();
    let last = list.split(',').next_back().unwrap_or("0");
    last.rsplit('-').next().unwrap_or("0").to_string()
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn harness_round_trip(rt: Runtime) {
    let test = format!("harness_round_trip({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    let mut ctrd = Instance::fresh(rt, "e2e-harness").expect("runtime comes up");
    eprintln!("{test}: {} up in {:?}", ctrd.version(), t0.elapsed());

    // The right build, with NRI listening on the instance's private socket.
    assert!(
        ctrd.version().starts_with(rt.version_prefix()),
        "version {} for {}",
        ctrd.version(),
        rt.name()
    );
    let nri = ctrd.nri_socket();
    assert!(
        nri.starts_with(repo_root()) || nri.starts_with("/tmp"),
        "NRI socket {} is not private",
        nri.display()
    );
    let meta = std::fs::metadata(&nri).expect("NRI socket exists");
    assert!(
        std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()),
        "{} is not a socket",
        nri.display()
    );
    let cri = ctrd.cri();
    let version = cri.ok(&["version"]).expect("CRI version");
    assert!(
        version.contains(&format!("RuntimeName:  {}", rt.cri_name())),
        "{version}"
    );

    // A second `up` reuses the running daemon.
    let pid = ctrd.pid().expect("pid");
    let script = match rt {
        Runtime::Containerd(f) => vec!["hack/containerd-up", f.name(), "e2e-harness"],
        Runtime::Crio => vec!["hack/crio-up", "e2e-harness"],
    };
    let again = Command::new(repo_root().join(script[0]))
        .args(&script[1..])
        .env("CRICTL", e2e::crictl_bin().expect("crictl"))
        .output()
        .expect("run the up script again");
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        ctrd.pid().expect("pid"),
        pid,
        "the up script restarted a healthy daemon"
    );

    // Pod + container, environment and default cpuset.
    let pod = ctrd
        .run_pod(&PodSpec::new("harness").annotation("harness.nri-align.io/marker", "pod-1"))
        .expect("run pod");
    let t1 = Instant::now();
    let plain = ctrd
        .create(
            &pod,
            &ContainerSpec::new("plain").env("HARNESS_VAR", "hello"),
        )
        .expect("create container");
    eprintln!("{test}: CRI create took {:?}", t1.elapsed());
    cri.ok(&["start", &plain]).expect("start");

    let status = cri.proc_status(&plain).expect("exec cat /proc/self/status");
    assert_eq!(
        status_field(&status, "Cpus_allowed_list").as_deref(),
        Some(host_cpus().as_str())
    );
    assert!(status_field(&status, "Mems_allowed_list").is_some_and(|m| !m.is_empty()));
    let env = cri.env(&plain).expect("exec env");
    assert_eq!(
        env.get("HARNESS_VAR").map(String::as_str),
        Some("hello"),
        "{env:?}"
    );

    let inspect = cri.inspect(&plain).expect("inspect");
    assert_eq!(inspect["status"]["state"], "CONTAINER_RUNNING");
    // The kubelet's labels reach the runtime (CRI-O names the container to NRI from them).
    let labels = &inspect["status"]["labels"];
    assert_eq!(labels["io.kubernetes.container.name"], "plain", "{labels}");
    assert_eq!(labels["io.kubernetes.pod.name"], "harness", "{labels}");
    let spec_env = inspect["info"]["runtimeSpec"]["process"]["env"]
        .as_array()
        .expect("runtimeSpec env");
    assert!(
        spec_env.iter().any(|e| e == "HARNESS_VAR=hello"),
        "{spec_env:?}"
    );
    let podinfo = cri.inspectp(&pod.id).expect("inspectp");
    assert_eq!(
        podinfo["status"]["annotations"]["harness.nri-align.io/marker"],
        "pod-1"
    );

    // Exit codes come back from exec; logs are readable.
    let r = cri
        .exec(&plain, &["sh", "-c", "echo out; echo err >&2; exit 7"])
        .expect("exec");
    assert_eq!((r.code, r.stderr.as_str()), (7, "err\n"), "{r:?}");
    // The real crictl drops a failed command's stdout; the project's client keeps it.
    assert!(r.stdout == "out\n" || r.stdout.is_empty(), "{r:?}");
    let talker = ctrd
        .run_container(
            &pod,
            &ContainerSpec::new("talker").command(&[
                "sh",
                "-c",
                "trap 'exit 0' TERM; echo harness-log-line; sleep 3600 & wait",
            ]),
        )
        .expect("run talker");
    assert!(
        wait_until(std::time::Duration::from_secs(10), || cri
            .ok(&["logs", &talker])
            .is_ok_and(|l| l.contains("harness-log-line"))),
        "log line never showed up"
    );

    // An explicit cpuset is what the container runs on, and what the runtime spec says.
    let cpu = last_cpu();
    let pinned = ctrd
        .run_container(&pod, &ContainerSpec::new("pinned").cpuset(&cpu))
        .expect("run pinned");
    let status = cri.proc_status(&pinned).expect("status of pinned");
    assert_eq!(
        status_field(&status, "Cpus_allowed_list"),
        Some(cpu.clone())
    );
    let inspect = cri.inspect(&pinned).expect("inspect pinned");
    assert_eq!(
        inspect["info"]["runtimeSpec"]["linux"]["resources"]["cpu"]["cpus"],
        cpu.as_str()
    );

    // A CRI error comes back with the runtime's message.
    let bad = ctrd.create(
        &pod,
        &ContainerSpec {
            image: Some("localhost/does-not-exist:0".into()),
            ..ContainerSpec::new("bad")
        },
    );
    let msg = bad
        .expect_err("create with a missing image must fail")
        .to_string();
    assert!(msg.contains("does-not-exist"), "{msg}");

    // The runtime killed and started again: running containers survive and answer exec.
    ctrd.kill(nix::sys::signal::Signal::SIGKILL)
        .expect("kill the runtime");
    ctrd.start().expect("the runtime comes back");
    assert_ne!(ctrd.pid().expect("pid"), pid);
    let status = cri
        .proc_status(&pinned)
        .expect("exec after the runtime's restart");
    assert_eq!(status_field(&status, "Cpus_allowed_list"), Some(cpu));
    assert!(nri.exists(), "NRI socket gone after restart");

    // Stop and remove.
    cri.ok(&["stop", &plain]).expect("stop");
    let inspect = cri.inspect(&plain).expect("inspect stopped");
    assert_eq!(inspect["status"]["state"], "CONTAINER_EXITED");
    cri.ok(&["rm", &plain]).expect("rm");
    assert!(
        !cri.containers().expect("ps").contains(&plain),
        "removed container still listed"
    );
    cri.remove_pod(&pod).expect("stopp + rmp");
    assert!(cri.pods().expect("pods").is_empty(), "pod still listed");
    assert!(
        cri.containers().expect("ps").is_empty(),
        "containers of the removed pod still listed"
    );
    eprintln!("{test}: total {:?}", t0.elapsed());
}

/// The pre-launched-plugin hook: the runtime starts what the harness drops into the instance's
/// private plugin directory, with the NRI launch environment.
fn prelaunched_hook(rt: Runtime) {
    let test = format!("prelaunched_hook({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let opts = e2e::UpOptions {
        registration_timeout: Some("1s".into()),
        ..Default::default()
    };
    let mut ctrd = Instance::fresh_with(rt, "e2e-prelaunch", opts).expect("runtime comes up");
    let probe_out = ctrd.dir().join("probe.env");
    let script = ctrd.dir().join("probe.sh");
    // The runtime replaces the environment, so the script carries its output path inline.
    std::fs::write(
        &script,
        format!("#!/bin/sh\nenv > '{}'\n", probe_out.display()),
    )
    .expect("write probe");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod probe");
    ctrd.install_prelaunched_plugin("07", "harness-probe", &script, Some("probe: config\n"))
        .expect("install plugin");
    assert!(ctrd
        .plugin_config_path()
        .join("07-harness-probe.conf")
        .is_file());

    // Plugins in the plugin directory are launched when the runtime starts.
    ctrd.kill(nix::sys::signal::Signal::SIGTERM)
        .expect("stop the runtime");
    let restarted = ctrd.start();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || probe_out.is_file()),
        "the runtime never launched the plugin; log:\n{}",
        ctrd.log_tail(30)
    );
    let env = e2e::parse_env_file(&std::fs::read_to_string(&probe_out).expect("read probe env"));
    assert_eq!(
        env.get("NRI_PLUGIN_NAME").map(String::as_str),
        Some("harness-probe"),
        "{env:?}"
    );
    assert_eq!(
        env.get("NRI_PLUGIN_IDX").map(String::as_str),
        Some("07"),
        "{env:?}"
    );
    assert_eq!(
        env.get("NRI_PLUGIN_SOCKET").map(String::as_str),
        Some("3"),
        "{env:?}"
    );

    if rt.fails_on_unregistered_launched_plugin() {
        // NRI v0.6.1 treats a pre-launched plugin that does not register as fatal: containerd
        // 1.7 exits at start-up ("failed to start NRI interface: failed to register plugin").
        let e = restarted.expect_err("containerd 1.7 must refuse to start with a broken plugin");
        assert!(e.to_string().contains("failed to register plugin"), "{e}");
    } else {
        // NRI v0.8 and later drop the plugin and carry on.
        restarted.expect("the runtime starts despite the broken plugin");
        assert!(ctrd.cri().ok(&["version"]).is_ok());
    }

    // Without the plugin, the instance starts again on its state.
    std::fs::remove_file(ctrd.plugin_path().join("07-harness-probe")).expect("remove plugin");
    if ctrd
        .pid()
        .is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    {
        ctrd.kill(nix::sys::signal::Signal::SIGTERM)
            .expect("stop the runtime");
    }
    ctrd.start().expect("the runtime starts without the plugin");
    assert!(ctrd.cri().ok(&["version"]).is_ok());
}

each_runtime!(harness_round_trip, prelaunched_hook);
