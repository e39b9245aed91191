//! A mixed fleet on one ConfigMap: two daemons on two emulated hosts of different size, each
//! running its own section of the same mounted ConfigMap directory; a section the small host
//! cannot take, at a reload and at a restart, leaves it running (on the configuration in force,
//! then on the last good one) with `/readyz` saying why, never crashed. And `nri-align config
//! check`, which tells the same offline.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use nix::sys::signal::Signal;
use test_support::e2e;

const BIN: &str = env!("CARGO_BIN_EXE_nri-align");

/// A ConfigMap volume as the kubelet writes it: `..TIMESTAMP/KEY` files, `..data` pointing
/// at the current generation, each key a link through `..data`; updated by an atomic swap.
struct Volume {
    dir: PathBuf,
    generation: usize,
}

impl Volume {
    fn new(dir: PathBuf, sections: &[(&str, &str)]) -> Self {
        std::fs::create_dir(&dir).expect("mkdir");
        let mut v = Volume { dir, generation: 0 };
        let gen = v.write_generation(sections);
        symlink(&gen, v.dir.join("..data")).expect("..data");
        v.link_keys(sections);
        v
    }

    fn write_generation(&mut self, sections: &[(&str, &str)]) -> String {
        self.generation += 1;
        let name = format!("..2026_01_01_00_00_{:02}.000000001", self.generation);
        let d = self.dir.join(&name);
        std::fs::create_dir(&d).expect("mkdir");
        for (key, text) in sections {
            std::fs::write(d.join(key), text).expect("write");
            std::fs::set_permissions(d.join(key), std::fs::Permissions::from_mode(0o644))
                .expect("chmod");
        }
        name
    }

    fn link_keys(&self, sections: &[(&str, &str)]) {
        for (key, _) in sections {
            let link = self.dir.join(key);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(format!("..data/{key}"), link).expect("key link");
            }
        }
    }

    /// The kubelet's update: the new generation, then `..data` renamed over (atomic).
    fn swap(&mut self, sections: &[(&str, &str)]) {
        let gen = self.write_generation(sections);
        let tmp = self.dir.join("..data_tmp");
        symlink(&gen, &tmp).expect("tmp link");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap");
        self.link_keys(sections);
    }
}

fn emulate(host: &str, out: &Path) {
    let done = Command::new(BIN)
        .args(["emulate", "--host", host, "--out"])
        .arg(out)
        .output()
        .expect("emulate");
    assert!(done.status.success(), "{done:?}");
}

fn start(dir: &Path, name: &str, root: &Path, config: &Path) -> e2e::PluginProcess {
    let mut cmd = Command::new(BIN);
    cmd.arg("run")
        .arg("--socket")
        .arg(dir.join(format!("{name}-no-runtime.sock")))
        .arg("--state-dir")
        .arg(dir.join(format!("{name}-state")))
        .arg("--config")
        .arg(config)
        .arg("--host-root")
        .arg(root)
        .arg("--node-name")
        .arg(name)
        .env_remove("NODE_NAME")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info");
    let log = dir.join(format!("{name}-{}.log", std::process::id()));
    e2e::PluginProcess::spawn_logged(cmd, log).expect("start nri-align")
}

/// The source the daemon at `addr` reports, and its `/readyz` body.
fn source_and_readyz(addr: &str) -> (String, String) {
    let body = e2e::scrape(addr).expect("metrics");
    let on: Vec<&str> = ["file", "node", "group", "default", "builtin", "last-good"]
        .into_iter()
        .filter(|s| {
            e2e::metric(&body, &format!("nri_align_config_source{{source=\"{s}\"}}")) == Some(1.0)
        })
        .collect();
    assert_eq!(on.len(), 1, "exactly one source in force: {body}");
    let (_, readyz) = e2e::probe(addr, "/readyz").expect("readyz");
    (on[0].to_string(), readyz)
}

const METRICS: &str = "metrics_address: \"127.0.0.1:0\"\n";

/// Both daemons share the ConfigMap: `node.big` (4 reserved CPUs, restricted) on the 8-CPU
/// host, `default` on the 2-CPU one. A `node.small` section naming CPUs the small host lacks
/// is refused at the reload (the default stays in force) and, after a restart, leaves the
/// daemon on the last good configuration; it never exits.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a running daemon, step by step: each step checks what the steps before left in its state and its answers"
)]
fn two_hosts_one_configmap_each_runs_its_section_and_the_small_one_falls_back() {
    let t = tempfile::tempdir().expect("tmp");
    let (small_root, big_root) = (t.path().join("small"), t.path().join("big"));
    emulate("localhost-1n", &small_root);
    emulate("vm-2s4n", &big_root);
    let default = format!("{METRICS}policy: none\n");
    let big = format!("{METRICS}policy: restricted\nreserved_cpus: \"0-3\"\n");
    let small_bad = format!("{METRICS}policy: single-numa-node\nreserved_cpus: \"0-3\"\n");
    let mut volume = Volume::new(
        t.path().join("configmap"),
        &[("default", &default), ("node.big", &big)],
    );

    let mut big_d = start(t.path(), "big", &big_root, &volume.dir);
    let mut small_d = start(t.path(), "small", &small_root, &volume.dir);
    let (big_addr, small_addr) = (
        big_d.metrics_address().expect("big metrics"),
        small_d.metrics_address().expect("small metrics"),
    );
    let (source, readyz) = source_and_readyz(&big_addr);
    assert_eq!(source, "node", "{readyz}\n{}", big_d.output());
    assert!(!readyz.contains("degraded: config"), "{readyz}");
    assert!(
        big_d.output().contains("section=node.big"),
        "{}",
        big_d.output()
    );
    let (source, readyz) = source_and_readyz(&small_addr);
    assert_eq!(source, "default", "{readyz}\n{}", small_d.output());
    assert!(!readyz.contains("degraded: config"), "{readyz}");

    // The ConfigMap gains a section for the small node that it cannot take.
    volume.swap(&[
        ("default", &default),
        ("node.big", &big),
        ("node.small", &small_bad),
    ]);
    assert!(
        small_d.wait_for_output("configuration not reloaded", Duration::from_secs(20)),
        "{}",
        small_d.output()
    );
    let (source, readyz) = source_and_readyz(&small_addr);
    assert_eq!(source, "default", "{readyz}");
    assert!(
        readyz.contains("degraded: config: ")
            && readyz.contains("not online (2-3)")
            && readyz.contains("keeping the configuration in force (default)"),
        "{readyz}"
    );
    assert!(small_d.exited().is_none(), "{}", small_d.output());
    // The big node's section did not change: nothing there to reload or report.
    assert!(!source_and_readyz(&big_addr).1.contains("degraded: config"));

    // Restarted on that ConfigMap (a rollout, a node reboot), the small daemon starts on the
    // last good configuration (the default section it ran with) instead of crash-looping.
    small_d.stop(Signal::SIGTERM);
    assert!(
        small_d.exited().is_some_and(|s| s.success()),
        "{}",
        small_d.output()
    );
    let mut small_d = start(t.path(), "small", &small_root, &volume.dir);
    let small_addr = small_d.metrics_address().expect("small metrics");
    let (source, readyz) = source_and_readyz(&small_addr);
    assert_eq!(source, "last-good", "{readyz}\n{}", small_d.output());
    assert!(
        readyz.contains("degraded: config: node.small: reserved_cpus 0-3 includes CPUs that are not online (2-3)")
            && readyz.contains("running on the last good configuration"),
        "{readyz}"
    );
    let kept = std::fs::read_to_string(t.path().join("small-state/config-last-good.yaml"))
        .expect("last good kept");
    assert!(kept.ends_with(&default), "{kept}");

    // The section fixed: the reload applies it and the degradation ends.
    let small_ok = format!("{METRICS}policy: single-numa-node\n");
    volume.swap(&[
        ("default", &default),
        ("node.big", &big),
        ("node.small", &small_ok),
    ]);
    assert!(
        small_d.wait_for_output("configuration reloaded", Duration::from_secs(20)),
        "{}",
        small_d.output()
    );
    let (source, readyz) = source_and_readyz(&small_addr);
    assert_eq!(source, "node", "{readyz}");
    assert!(!readyz.contains("degraded: config"), "{readyz}");
    for d in [&mut big_d, &mut small_d] {
        d.stop(Signal::SIGTERM);
        assert!(d.exited().is_some_and(|s| s.success()), "{}", d.output());
    }
}

fn check(file: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["config", "check"])
        .arg(file)
        .args(args)
        .env_remove("NODE_NAME")
        .output()
        .expect("config check")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `config check` chooses the section as the daemon does and checks it against the host;
/// exit 0 usable (the effective configuration printed, every key), 1 not usable, 2 could not
/// check.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "`config check` against one ConfigMap on two hosts, case after case: each section choice with its exit status and output"
)]
fn config_check_chooses_the_section_and_checks_it_against_the_host() {
    let t = tempfile::tempdir().expect("tmp");
    let manifest = t.path().join("configmap.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nri-align-config}\ndata:\n  \
         default: |\n    policy: none\n  \
         node.big: |\n    policy: restricted\n    reserved_cpus: \"0-3\"\n  \
         group.gpu: |\n    gpu_mode: remap\n",
    )
    .expect("write");
    // A host without GPUs, described inline.
    let cpu_only = t.path().join("cpu-only.yaml");
    std::fs::write(
        &cpu_only,
        "name: cpu-only\nsockets: 1\ncores_per_numa: 8\nthreads_per_core: 1\nmemory_per_numa: 8Gi\n",
    )
    .expect("write");
    let cpu_only = cpu_only.to_str().expect("utf-8");

    let ok = check(&manifest, &["--host", "vm-2s4n", "--node", "big"]);
    let (out, err) = text(&ok);
    assert_eq!(ok.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("# node big, no group: section node.big"),
        "{out}"
    );
    assert!(out.contains("usable"), "{out}");
    // The effective configuration is a configuration file, every key present.
    let effective = nri_align::config::Config::parse(&out, "stdout").expect("parses");
    assert_eq!(effective.placement.reserved_cpus.to_string(), "0-3");
    assert!(out.contains("\nnrt:\n  publish: true\n"), "{out}");

    // The same section on the 2-CPU host: CPUs it does not have.
    let small = check(&manifest, &["--host", "localhost-1n", "--node", "big"]);
    let (out, err) = text(&small);
    assert_eq!(small.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("NOT usable") && err.contains("not online (2-3)"),
        "{out}{err}"
    );

    // A node without a section of its own takes its group's: remap on a GPU-less host fails,
    // on a GPU host it is usable; a group without a section is not replaced by the default.
    let gpu = "nri-align.io/config-group=gpu";
    let remap = check(
        &manifest,
        &["--host", cpu_only, "--node", "w1", "--labels", gpu],
    );
    let (out, err) = text(&remap);
    assert_eq!(remap.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("gpu_mode remap needs GPUs and this host has none"),
        "{err}"
    );
    let remap = check(
        &manifest,
        &["--host", "vm-2s4n", "--node", "w1", "--labels", gpu],
    );
    assert_eq!(remap.status.code(), Some(0), "{:?}", text(&remap));
    assert!(text(&remap).0.contains("gpu_mode: remap"));
    let labels = "kubernetes.io/os=linux,nri-align.io/config-group=cpu";
    let nogroup = check(
        &manifest,
        &["--host", cpu_only, "--node", "w1", "--labels", labels],
    );
    let (out, err) = text(&nogroup);
    assert_eq!(nogroup.status.code(), Some(1), "{out}{err}");
    assert!(err.contains("no group.cpu section"), "{err}");
    let default = check(&manifest, &["--host", cpu_only, "--node", "w1"]);
    let (out, _) = text(&default);
    assert!(
        default.status.success() && out.contains("section default") && out.contains("policy: none"),
        "{out}"
    );

    // A plain file is checked as `run --config FILE` would take it, on the emulated host's
    // tree; what cannot be read is exit 2.
    let root = t.path().join("root");
    emulate("localhost-1n", &root);
    let plain = t.path().join("plain.yaml");
    std::fs::write(&plain, "reserved_cpus: \"1\"\n").expect("write");
    let root_arg = root.to_str().expect("utf-8");
    let p = check(&plain, &["--host-root", root_arg]);
    assert_eq!(p.status.code(), Some(0), "{:?}", text(&p));
    assert!(text(&p).0.contains("a plain configuration file"));
    let missing = check(&t.path().join("missing.yaml"), &["--host", cpu_only]);
    let (_, err) = text(&missing);
    assert_eq!(missing.status.code(), Some(2), "{err}");
    assert!(
        err.contains("could not check") && err.contains("missing.yaml"),
        "{err}"
    );
    let bad_label = check(&plain, &["--host", cpu_only, "--labels", "novalue"]);
    assert_eq!(bad_label.status.code(), Some(2), "{:?}", text(&bad_label));
}
