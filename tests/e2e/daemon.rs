//! Health, a ConfigMap's config and a config that cannot be read, on every
//! real runtime (containerd 1.7, 2.1, CRI-O), with nri-align as the external plugin the
//! DaemonSet and the systemd unit run:
//! - `/readyz` turns 200 once nri-align registered and synchronized, 503 with the reason while
//!   the runtime is down, 200 again after it restarted; `/healthz` stays 200 throughout (a
//!   runtime restart must not make the kubelet kill nri-align), and the connection metrics
//!   count the reconnection;
//! - the configuration is a ConfigMap volume laid out as the kubelet writes it: swapping
//!   `..data` atomically reloads it without a signal and moves a running shared container; a
//!   bad version keeps the running config and says why; a FIFO in its place is refused at
//!   once, containers are still placed, and SIGTERM still stops the daemon.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;
use test_support::e2e;
use test_support::each_runtime;

use nix::sys::signal::Signal;
use test_support::e2e::suite::{burstable, Enforced};
use test_support::e2e::{
    log_events, metric, probe, scrape, wait_probe, wait_until, PodSpec, Runtime,
};

const METRICS: &str = "metrics_address: \"127.0.0.1:0\"\n";
const WAIT: Duration = Duration::from_secs(30);

fn health_follows_the_runtime(rt: Runtime) {
    let Some(mut e) = Enforced::builder(rt, "health", "e2e-health")
        .config(METRICS)
        .start()
    else {
        return;
    };
    let addr = e.plugin.metrics_address().expect("metrics endpoint");
    let (code, body) = wait_probe(&addr, "/readyz", 200, WAIT);
    assert_eq!(code, 200, "{body}\n{}", e.plugin.output());
    assert!(
        body.starts_with(&format!(
            "ready: registered and synchronized with {}",
            rt.cri_name()
        )),
        "{body}"
    );
    assert_eq!(
        probe(&addr, "/healthz").expect("healthz"),
        (200, "ok\n".into())
    );
    let m = scrape(&addr).expect("metrics");
    assert_eq!(metric(&m, "nri_align_runtime_connected"), Some(1.0), "{m}");
    assert_eq!(
        metric(&m, "nri_align_runtime_connections_total"),
        Some(1.0),
        "{m}"
    );

    // The runtime dies: not ready, saying why; alive all along.
    e.rt.kill(Signal::SIGKILL).expect("kill the runtime");
    let (code, body) = wait_probe(&addr, "/readyz", 503, WAIT);
    assert_eq!(code, 503, "{body}\n{}", e.plugin.output());
    assert!(
        body.starts_with("not ready: connecting to ") && body.contains("nri.sock"),
        "{body}"
    );
    for _ in 0..5 {
        assert_eq!(probe(&addr, "/healthz").expect("healthz").0, 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    let m = scrape(&addr).expect("metrics");
    assert_eq!(metric(&m, "nri_align_runtime_connected"), Some(0.0), "{m}");

    // Back: ready again after the new registration and Synchronize.
    e.rt.start().expect("the runtime comes back");
    let (code, body) = wait_probe(&addr, "/readyz", 200, WAIT);
    assert_eq!(code, 200, "{body}\n{}", e.plugin.output());
    assert_eq!(probe(&addr, "/healthz").expect("healthz").0, 200);
    let m = scrape(&addr).expect("metrics");
    assert_eq!(metric(&m, "nri_align_runtime_connected"), Some(1.0), "{m}");
    assert_eq!(
        metric(&m, "nri_align_runtime_connections_total"),
        Some(2.0),
        "{m}"
    );
    // And it places containers again.
    let pod = e.rt.run_pod(&PodSpec::new("after")).expect("pod");
    let id = e.run(&pod, &burstable("a"));
    assert!(e.live(&id).env.contains_key("NRI_ALIGN_DECISION"));
}

/// A ConfigMap volume as the kubelet's atomic writer makes it (see tests/e2e/image.rs).
struct ConfigMapVolume {
    dir: PathBuf,
    generation: usize,
}

impl ConfigMapVolume {
    fn new(dir: &Path, text: &str) -> Self {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("mkdir");
        let mut v = ConfigMapVolume {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        let first = v.generation_dir(|p| e2e::write_private(p, text).expect("write"));
        symlink(first, dir.join("..data")).expect("..data");
        symlink("..data/config.yaml", v.path()).expect("key link");
        v
    }

    fn path(&self) -> PathBuf {
        self.dir.join("config.yaml")
    }

    /// A new `..TIMESTAMP` directory whose `config.yaml` `make` creates; returns its name.
    fn generation_dir(&mut self, make: impl FnOnce(&Path)) -> String {
        self.generation += 1;
        let name = format!(
            "..2026_03_01_12_00_{:02}.{:09}",
            self.generation, self.generation
        );
        std::fs::create_dir(self.dir.join(&name)).expect("mkdir generation");
        make(&self.dir.join(&name).join("config.yaml"));
        name
    }

    /// The kubelet's swap: a new generation, `..data_tmp` renamed over `..data`, the old
    /// generation removed.
    fn swap_with(&mut self, make: impl FnOnce(&Path)) {
        let old = std::fs::read_link(self.dir.join("..data")).expect("..data");
        let new = self.generation_dir(make);
        symlink(&new, self.dir.join("..data_tmp")).expect("tmp link");
        std::fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data")).expect("swap");
        std::fs::remove_dir_all(self.dir.join(old)).expect("remove old");
    }

    fn swap(&mut self, text: &str) {
        self.swap_with(|p| e2e::write_private(p, text).expect("write"));
    }
}

fn config_follows_a_swapped_configmap(rt: Runtime) {
    let Some(mut e) = Enforced::builder(rt, "configmap", "e2e-configmap")
        .config(METRICS)
        .start()
    else {
        return;
    };
    // Restart nri-align on a ConfigMap volume (the harness started it on a plain file).
    let mut vol = ConfigMapVolume::new(&e.rt.dir().join("configmap"), METRICS);
    e.plugin.stop(Signal::SIGTERM);
    e.run.config = Some(vol.path());
    e.plugin = e.run.start(&e.rt).expect("nri-align on the ConfigMap");
    let addr = e.plugin.metrics_address().expect("metrics");
    assert_eq!(wait_probe(&addr, "/readyz", 200, WAIT).0, 200);

    let online = e.online();
    let last = *online.last().expect("a CPU");
    let pod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&pod, &burstable("s1"));
    e.wait_cpus(&s1, &online);
    let reloads = |p: &e2e::PluginProcess| {
        log_events(&p.output(), "configuration reloaded")
            .into_iter()
            .filter(|l| l.get("trigger").is_some_and(|t| t == "file changed"))
            .count()
    };

    // The kubelet swaps in a version that reserves the last CPU: reloaded without a signal;
    // the running shared container follows with the next event.
    vol.swap(&format!("{METRICS}reserved_cpus: \"{last}\"\n"));
    assert!(
        wait_until(WAIT, || reloads(&e.plugin) == 1),
        "{}",
        e.plugin.output()
    );
    let without_last: Vec<u32> = online.iter().copied().filter(|c| *c != last).collect();
    let s2 = e.run(&pod, &burstable("s2"));
    e.wait_cpus(&s2, &without_last);
    e.wait_cpus(&s1, &without_last);

    // A bad version: the running config stays (s3 still avoids the reserved CPU), the log
    // says why, once, and the metrics show it.
    vol.swap(&format!("{METRICS}policy: sometimes\n"));
    assert!(
        e.plugin.wait_for_output("configuration not reloaded", WAIT),
        "{}",
        e.plugin.output()
    );
    assert!(e.plugin.output().contains("unknown variant `sometimes`"));
    let s3 = e.run(&pod, &burstable("s3"));
    e.wait_cpus(&s3, &without_last);
    let m = scrape(&addr).expect("metrics");
    assert_eq!(
        metric(&m, "nri_align_config_last_reload_successful"),
        Some(0.0),
        "{m}"
    );

    // A FIFO in place of the file (a hostile or broken volume): refused at once by the watch
    // and by SIGHUP; NRI calls go on; SIGTERM still stops nri-align.
    vol.swap_with(|p| {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo")
    });
    // The watch first (a SIGHUP that came first would report this version, and the watch,
    // which reports a bad version once, would then stay quiet), then SIGHUP, which always
    // reports.
    assert!(
        e.plugin
            .wait_for_output("it is a FIFO, not a regular file", WAIT),
        "{}",
        e.plugin.output()
    );
    e.plugin.signal(Signal::SIGHUP);
    assert!(
        wait_until(WAIT, || e
            .plugin
            .output()
            .matches("it is a FIFO, not a regular file")
            .count()
            >= 2),
        "{}",
        e.plugin.output()
    );
    let s4 = e.run(&pod, &burstable("s4"));
    e.wait_cpus(&s4, &without_last);
    assert_eq!(probe(&addr, "/healthz").expect("healthz").0, 200);
    e.plugin.signal(Signal::SIGTERM);
    assert!(
        wait_until(Duration::from_secs(10), || e.plugin.exited().is_some()),
        "nri-align still running 10 s after SIGTERM:\n{}",
        e.plugin.output()
    );
}

each_runtime!(
    health_follows_the_runtime,
    config_follows_a_swapped_configmap
);
