//! `hack/gpu-check` against the fake NVML and a fake `nvidia-smi` that prints NVIDIA's formats
//! for the same fixture (tests/fixtures/gpu-check/nvidia-smi): every fact agrees, the replay
//! admits one pod per GPU, and a skewed `nvidia-smi` is a named disagreement and exit 1. A run
//! on a real GPU host is what this stands in for (docs/e2e.md).

use std::path::Path;
use std::process::{Command, Output};

use nri_align::topology::desc::HostDesc;
use nri_align::topology::emulate::emulate;
use test_support::{nri_align_bin, repo_root};

/// Runs hack/gpu-check on the host emulated under `emulated`, `skew` passed to the fake
/// nvidia-smi.
fn gpu_check(emulated: &Path, skew: &str) -> Output {
    let bin_dir = tempfile::tempdir().expect("tmp");
    std::os::unix::fs::symlink(nri_align_bin(), bin_dir.path().join("nri-align")).expect("link");
    let out = tempfile::tempdir().expect("tmp");
    let lib = test_support::fake_nvml();
    Command::new(repo_root().join("hack/gpu-check"))
        .arg(bin_dir.path())
        .arg("--out")
        .arg(out.path().join("captures"))
        .arg("--host-root")
        .arg(emulated)
        .arg("--nvml-lib")
        .arg(&lib)
        .env("FAKE_NVML_FIXTURE", emulated.join("nvml.json"))
        .env(
            "NVIDIA_SMI",
            repo_root().join("tests/fixtures/gpu-check/nvidia-smi"),
        )
        .env("FAKE_NVIDIA_SMI_SKEW", skew)
        .output()
        .expect("run hack/gpu-check")
}

fn emulated(name: &str) -> (tempfile::TempDir, nri_align::topology::Topology) {
    let desc = HostDesc::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let dir = tempfile::tempdir().expect("tmp");
    emulate(&desc, dir.path()).expect("emulate");
    (dir, desc.to_topology())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_fact_agrees_on_an_nvswitch_host_and_the_replay_admits_one_pod_per_gpu() {
    let (dir, topo) = emulated("dgx-h100");
    let o = gpu_check(dir.path(), "");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(!t.contains("DISAGREE"), "{t}");
    assert!(
        t.contains(&format!("agree gpus {}\n", topo.gpus.len())),
        "{t}"
    );
    for g in &topo.gpus {
        let i = g.index;
        assert!(
            t.contains(&format!("agree gpu{i} bus {}\n", g.pci_bus_id)),
            "{t}"
        );
        let numa = g.numa_node.expect("a node");
        assert!(t.contains(&format!("agree gpu{i} numa {numa}\n")), "{t}");
        assert!(t.contains(&format!("agree gpu{i} mig disabled\n")), "{t}");
    }
    // DGX H100: every pair over NVSwitch, 18 links each (NV18 in topo -m).
    assert!(t.contains("agree nvlink gpu0 gpu7 18\n"), "{t}");
    assert!(
        t.contains(&format!(
            "agree simulate: {n} single-GPU pods admitted, {n} aligned (single-numa-node)",
            n = topo.gpus.len()
        )),
        "{t}"
    );
}

#[test]
fn mig_devices_and_direct_nvlinks_agree() {
    let (dir, topo) = emulated("dgx-a100-mig");
    let o = gpu_check(dir.path(), "");
    let t = text(&o);
    assert!(
        !t.contains("DISAGREE gpu") && !t.contains("DISAGREE nvlink"),
        "{t}"
    );
    assert!(t.contains("agree nvlink gpu0 gpu1 "), "{t}");
    let mig = topo
        .gpus
        .iter()
        .find(|g| g.mig_enabled == Some(true))
        .expect("a MIG GPU");
    assert!(
        t.contains(&format!(
            "agree gpu{} mig-devices {}\n",
            mig.index,
            mig.mig_devices.len()
        )),
        "{t}"
    );
    assert!(
        t.contains(&format!("agree gpu{} mig enabled\n", mig.index)),
        "{t}"
    );
}

#[test]
fn a_disagreeing_nvidia_smi_is_named_and_fails_the_check() {
    let (dir, topo) = emulated("dgx-h100");
    let numa = topo.gpus[1].numa_node.expect("a node");
    let o = gpu_check(dir.path(), "numa:1");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "DISAGREE gpu1 numa: nri-align {numa}, nvidia-smi {}\n",
            numa + 1
        )),
        "{t}"
    );
    assert_eq!(t.matches("DISAGREE").count(), 1, "{t}");
    // One GPU fewer in nvidia-smi: the count and each of the last GPU's facts.
    let o = gpu_check(dir.path(), "gpus");
    let t = text(&o);
    let n = topo.gpus.len();
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "DISAGREE gpus: nri-align {n}, nvidia-smi {}\n",
            n - 1
        )),
        "{t}"
    );
    assert!(t.contains(&format!("unchecked gpu{} bus", n - 1)), "{t}");
    // NUMA Affinity N/A (a VM): not a disagreement, the fact is left unchecked.
    let o = gpu_check(dir.path(), "numa-na");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(
        t.contains("unchecked gpu0 numa 0 (nvidia-smi does not show it)"),
        "{t}"
    );
}
