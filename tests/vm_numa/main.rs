//! The multi-NUMA proof, run by hack/vm-e2e inside a QEMU guest shaped like
//! `packaging/hosts/vm-2s4n.yaml`: real NUMA nodes with distances, GPU and NIC stand-ins behind
//! PCIe switches on each node, the real containerd and runc, nri-align as an external plugin.
//! Every assertion reads what the container itself reports (`/proc/self/status`, `env`,
//! `ls /dev`), the container's cgroup, and the guest's sysfs, never nri-align's own view.
//!
//! The same tests run in the busybox guest (cgroupfs driver) and in the systemd guest
//! (`hack/vm-e2e --systemd`: runc's systemd driver, pods in the kubelet's slices); pods get the
//! kubelet's cgroup parent for their QoS class under either driver.
//!
//! On any other machine each test prints SKIP and passes: `cargo test` builds this binary, and
//! hack/vm-e2e runs it in the guest with NRI_ALIGN_VM_GUEST=1.

mod cdi;
mod devices;
mod devlinks;
mod guest;
mod hotplug;
mod hotplug_qmp;
mod hugepages;
mod kubepods;
mod moved;
mod quota;
mod resize;
mod spread;
mod unit;

use guest::{guest, list, Facts, Guest, Ids, Seen};
use kubepods::Qos;
use test_support::e2e::ContainerSpec;

/// A container as a device plugin would hand it one GPU: the device node and the UUID.
fn gpu_container(name: &str, minor: u32, facts: &Facts) -> ContainerSpec {
    let node = format!("/dev/nvidia{minor}");
    ContainerSpec::new(name)
        .cpu_millis(1000, Some(1000))
        .memory(64 << 20)
        .device(&node, &node, "rw")
        .env("NVIDIA_VISIBLE_DEVICES", &facts.gpu_uuid[&minor])
}

/// `s` runs wholly on `node`: its CPUs inside the node's, its memory nodes exactly `{node}`,
/// from inside the container and in its cgroup.
fn assert_on_node(what: &str, s: &Seen, node: u32, facts: &Facts) {
    let cpus = &facts.node_cpus[&node];
    assert!(
        !s.cpus.is_empty() && s.cpus.is_subset(cpus),
        "{what}: {} is not within node {node}'s CPUs {}\n  seen: {s}",
        s.cpus_line,
        list(cpus)
    );
    assert_eq!(
        s.mems,
        Ids::from([node]),
        "{what}: {} should be node {node} only\n  seen: {s}",
        s.mems_line
    );
    assert_cgroup_matches(what, s);
}

/// The cgroup's effective cpuset is what the container reports.
fn assert_cgroup_matches(what: &str, s: &Seen) {
    assert_eq!(
        (&s.cg_cpus, &s.cg_mems),
        (&s.cpus, &s.mems),
        "{what}: cgroup {} has cpuset.cpus.effective {} / cpuset.mems.effective {}, the \
         container reports {} / {}",
        s.cgroup.display(),
        list(&s.cg_cpus),
        list(&s.cg_mems),
        list(&s.cpus),
        list(&s.mems)
    );
}

/// The single GPU `s` can use (ls /dev, the device cgroup and the env agree), and its node
/// from sysfs. A GPU node listed but denied by the device cgroup would be tolerated (with a
/// note): that is how a remapped GPU looks on a runtime that honours device rules but not
/// removals.
fn only_gpu(what: &str, s: &Seen, facts: &Facts) -> (u32, u32) {
    assert_eq!(
        s.gpu_usable.len(),
        1,
        "{what}: expected exactly one usable /dev/nvidiaN in the container\n  seen: {s}"
    );
    let minor = *s.gpu_usable.iter().next().expect("one minor");
    assert!(
        s.gpu_minors.contains(&minor),
        "{what}: /dev/nvidia{minor} is usable but not listed\n  seen: {s}"
    );
    let denied: Vec<&u32> = s.gpu_minors.difference(&s.gpu_usable).collect();
    if !denied.is_empty() {
        eprintln!(
            "{what}: note: the runtime kept /dev/nvidia{denied:?} (NRI dropped the removal); \
             the device cgroup denies it"
        );
    }
    assert_eq!(
        s.env.get("NVIDIA_VISIBLE_DEVICES"),
        Some(&facts.gpu_uuid[&minor]),
        "{what}: NVIDIA_VISIBLE_DEVICES does not name /dev/nvidia{minor}'s GPU\n  seen: {s}"
    );
    assert_eq!(
        s.env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0"),
        "{what}: CUDA_VISIBLE_DEVICES\n  seen: {s}"
    );
    (minor, facts.gpu_node[&minor])
}

/// The systemd guest runs nri-align as the shipped unit (tests/vm_numa/unit.rs): started with
/// `--no-block` before the runtime it stayed `activating`, and became `active` once registered
/// (checked when the guest started; the notes show what systemd said). Here: `systemctl
/// reload` with a bad config keeps the same daemon active and the journal says why, a good
/// config is taken back, and a container created through CRI is placed by that daemon.
#[test]
fn t0_the_systemd_unit_runs_nri_align_and_survives_a_bad_reload() {
    let Some(g) = guest("t0") else { return };
    let unit::Daemon::Unit { before, after } = &g.plugin else {
        eprintln!("SKIP t0: nri-align runs as the systemd unit in the systemd guest only");
        return;
    };
    eprintln!("unit before the runtime: {before}\nunit once registered: {after}");
    let pid = unit::main_pid();
    unit::write_config("policy: no-such-policy\n").expect("write the bad config");
    unit::reload().expect("systemctl reload");
    let rejected = Guest::wait(60, || {
        unit::journal().contains("configuration not reloaded")
    });
    let journal = unit::journal();
    assert!(
        rejected,
        "no rejection in the journal after the reload:\n{journal}"
    );
    let line = journal
        .lines()
        .find(|l| l.contains("configuration not reloaded"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains("no-such-policy"),
        "the journal's reason does not name the bad value: {line}"
    );
    assert_eq!(
        unit::is_active(),
        "active",
        "after a bad reload: {}",
        unit::show()
    );
    assert_eq!(
        unit::main_pid(),
        pid,
        "the daemon was restarted: {}",
        unit::show()
    );
    eprintln!("bad reload, journal: {line}");

    unit::write_config(guest::PLUGIN_CONFIG).expect("write the config back");
    unit::reload().expect("systemctl reload");
    assert!(
        Guest::wait(60, || unit::journal().contains(
            "configuration file is back to the configuration in force"
        )),
        "the good config was not taken back:\n{}",
        unit::journal()
    );

    let pod = g.pod("unit-placed", Qos::Guaranteed, &[]);
    let id = g.run(
        &pod,
        &ContainerSpec::new("app")
            .cpu_millis(1000, Some(1000))
            .memory(32 << 20),
    );
    let s = g.seen(&id);
    let cpus = s.decision.get("cpus").map(|c| guest::ids(c));
    assert_eq!(
        cpus.as_ref(),
        Some(&s.cpus),
        "the container's CPUs are not the unit's decision\n  seen: {s}"
    );
    assert_eq!(s.cpus.len(), 1, "one exclusive CPU\n  seen: {s}");
    let node = *node_holding(&g.facts, &s.cpus);
    assert_on_node("unit-placed", &s, node, &g.facts);
    assert!(
        unit::journal().contains("unit-placed"),
        "the unit's journal does not show the decision:\n{}",
        unit::journal()
    );
    eprintln!("placed by the unit's daemon (pid {pid}): {s}");
}

/// The node whose CPUs hold `cpus` (they must be on one).
fn node_holding<'a>(facts: &'a Facts, cpus: &Ids) -> &'a u32 {
    let nodes: Vec<&u32> = facts
        .node_cpus
        .iter()
        .filter(|(_, c)| cpus.is_subset(c))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(nodes.len(), 1, "CPUs {} are not on one node", list(cpus));
    nodes[0]
}

#[test]
fn t1_single_numa_node_gpu_pods_land_wholly_on_their_gpus_nodes() {
    let Some(g) = guest("t1") else { return };
    let f = &g.facts;
    let mut nodes = Vec::new();
    // What a device plugin would allocate: GPU 0 to the first pod, GPU 1 to the second.
    for (name, minor) in [("gpu-a", 0), ("gpu-b", 1)] {
        let pod = g.pod(
            name,
            Qos::Guaranteed,
            &[("policy", "single-numa-node"), ("nics", "1")],
        );
        let id = g.run(&pod, &gpu_container("cuda", minor, f));
        let s = g.seen(&id);
        let (gpu, node) = only_gpu(name, &s, f);
        eprintln!("{name}: /dev/nvidia{gpu} on node {node}: {s}");
        assert_on_node(name, &s, node, f);
        let nics = s.nics();
        assert_eq!(nics.len(), 1, "{name}: expected one NIC\n  seen: {s}");
        assert_eq!(
            f.nic_node.get(&nics[0]),
            Some(&node),
            "{name}: NIC {} is not on the GPU's node {node} (sysfs: {:?})",
            nics[0],
            f.nic_node
        );
        nodes.push(node);
    }
    assert_ne!(
        nodes[0], nodes[1],
        "the second GPU pod landed on the first one's node"
    );
    let (ok, out) = g.verify();
    assert!(ok, "nri-align verify reports drift:\n{out}");
}

#[test]
fn t2_pod_too_big_for_one_node_is_rejected_or_spans_the_closest_nodes() {
    let Some(g) = guest("t2") else { return };
    let f = &g.facts;
    let per_node = f.node_cpus.values().map(|c| c.len()).max().unwrap_or(0) as i64;
    let wide = || {
        ContainerSpec::new("wide")
            .cpu_millis(2 * per_node * 1000, Some(2 * per_node * 1000))
            .memory(128 << 20)
    };

    let strict = g.pod(
        "big-strict",
        Qos::Guaranteed,
        &[("policy", "single-numa-node")],
    );
    let msg = g
        .ctrd
        .create(&strict, &wide())
        .expect_err("single-numa-node must reject a pod wider than a node")
        .to_string();
    eprintln!("big-strict rejected: {msg}");
    for want in [
        "cannot align default/big-strict/wide under policy single-numa-node",
        "cpu does not fit one NUMA node",
        &format!("asked cpu {}", 2 * per_node),
        "best candidate node",
        "would fit: reduce cpu to",
    ] {
        assert!(msg.contains(want), "rejection lacks {want:?}: {msg}");
    }

    let loose = g.pod("big-loose", Qos::Guaranteed, &[("policy", "best-effort")]);
    let id = g.run(&loose, &wide());
    let s = g.seen(&id);
    eprintln!("big-loose: {s}");
    let nodes = f.nodes_of(&s.cpus);
    assert_eq!(
        (s.cpus.len() as i64, nodes.len()),
        (2 * per_node, 2),
        "big-loose: expected {} CPUs over two nodes\n  seen: {s}",
        2 * per_node
    );
    let v: Vec<u32> = nodes.iter().copied().collect();
    assert_eq!(
        f.dist(v[0], v[1]),
        f.closest_pair_distance(),
        "big-loose spans nodes {} at distance {}, not the closest pair",
        list(&nodes),
        f.dist(v[0], v[1])
    );
    assert_eq!(
        s.mems, nodes,
        "big-loose: memory nodes should be its CPUs' nodes\n  seen: {s}"
    );
    assert_cgroup_matches("big-loose", &s);
}

#[test]
fn t3_pod_scope_keeps_a_pods_containers_together() {
    let Some(g) = guest("t3") else { return };
    let f = &g.facts;
    let sidecar = || ContainerSpec::new("sidecar").cpu_millis(250, None);
    let mut sidecars = Vec::new();
    for (name, scope, minor) in [("scoped", "pod", 2), ("unscoped", "container", 3)] {
        // The sidecar has a request and no limit: the pod is Burstable.
        let pod = g.pod(
            name,
            Qos::Burstable,
            &[("policy", "single-numa-node"), ("scope", scope)],
        );
        let main = g.seen(&g.run(&pod, &gpu_container("main", minor, f)));
        let (_, node) = only_gpu(name, &main, f);
        assert_on_node(&format!("{name}/main"), &main, node, f);
        let side = g.seen(&g.run(&pod, &sidecar()));
        eprintln!("{name}: main {main}\n{name}: sidecar {side}");
        assert_cgroup_matches(&format!("{name}/sidecar"), &side);
        sidecars.push((node, side));
    }
    let (node, side) = &sidecars[0];
    assert_on_node("scoped/sidecar (scope pod)", side, *node, f);
    // The unscoped pod's exclusive CPU shrank the shared pool after the scoped sidecar
    // started; when nri-align re-pins shared containers, that one must stay on its pod's node.
    let again = g.seen(&side.id);
    assert_on_node(
        "scoped/sidecar after the shared pool changed",
        &again,
        *node,
        f,
    );
    // The control: in container scope the same sidecar runs on the shared pool of every node,
    // so keeping it on the pod's node above is the scope's doing.
    let (_, side) = &sidecars[1];
    assert!(
        f.nodes_of(&side.cpus).len() > 1,
        "unscoped/sidecar (scope container) should use the shared pool of all nodes\n  seen: {side}"
    );
}

#[test]
fn t4_memory_is_allocated_on_the_chosen_node() {
    let Some(g) = guest("t4") else { return };
    let f = &g.facts;
    const FILL: u64 = 64 << 20;
    // dd fills a 64 MiB buffer from /dev/zero, then blocks forever writing it into a pipe
    // nobody reads: the memory stays allocated while the test looks.
    let writer = gpu_container("writer", 3, f).memory(256 << 20).command(&[
        "sh",
        "-c",
        "dd if=/dev/zero bs=64M count=1 2>/dev/null | sleep 3600",
    ]);
    let pod = g.pod("mem", Qos::Guaranteed, &[("policy", "single-numa-node")]);
    let id = g.run(&pod, &writer);
    let s = g.seen(&id);
    let (_, node) = only_gpu("mem", &s, f);
    assert_on_node("mem", &s, node, f);
    let filled = Guest::wait(180, || {
        Guest::anon_by_node(&s.cgroup)
            .get(&node)
            .copied()
            .unwrap_or(0)
            >= FILL
    });
    let stat = Guest::anon_by_node(&s.cgroup);
    let pages = Guest::numa_maps_anon(&s.cgroup);
    eprintln!("mem on node {node}: memory.numa_stat anon {stat:?}, numa_maps anon pages {pages:?}");
    assert!(
        filled,
        "memory.numa_stat never showed {FILL} bytes of anon memory on node {node}: {stat:?}"
    );
    let elsewhere: u64 = stat
        .iter()
        .filter(|(n, _)| **n != node)
        .map(|(_, b)| b)
        .sum();
    assert!(
        elsewhere < 4 << 20,
        "{elsewhere} bytes of the container's anon memory are off node {node}: {stat:?}"
    );
    let page = 4096;
    let on: u64 = pages.get(&node).copied().unwrap_or(0) * page;
    let off: u64 = pages
        .iter()
        .filter(|(n, _)| **n != node)
        .map(|(_, p)| p * page)
        .sum();
    assert!(
        on >= FILL && off < 4 << 20,
        "numa_maps of the container's processes: {on} bytes on node {node}, {off} elsewhere \
         ({pages:?})"
    );
    // What `verify` tells the operator: at least 90 % of it on its node, not flagged.
    let checks = g.verify_json();
    let check = checks
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not in verify's report: {checks}"));
    let memory = &check["memory"];
    assert!(
        memory["local_percent"].as_u64().unwrap_or(0) >= 90
            && memory["bytes_per_node"][node.to_string()]
                .as_u64()
                .unwrap_or(0)
                >= FILL
            && check["remote_memory"].is_null(),
        "verify: at least 90 % and {FILL} bytes on node {node}, not flagged: {check}"
    );
}

#[test]
fn t5_gpu_device_stays_usable_after_the_runtime_rewrites_the_cpuset() {
    let Some(g) = guest("t5") else { return };
    let f = &g.facts;
    // A Burstable pod holding GPU 0 on shared CPUs (a request, no limit): its cpuset is the
    // shared pool, which nri-align rewrites in the running container (NRI UpdateContainer ->
    // runc update) whenever an exclusive allocation shrinks the pool. On cgroup v2 the device
    // rules are an eBPF program that runc (and, with the systemd driver, systemd) replaces on
    // every update: a program rebuilt without the GPU's rule cuts the container off its GPU
    // ("Failed to initialize NVML: Unknown Error"), one rebuilt without the deny rules opens
    // every device.
    let minor = 0;
    let other = *f
        .gpu_node
        .keys()
        .find(|m| **m != minor)
        .expect("a second GPU");
    let pod = g.pod("gpu-shared", Qos::Burstable, &[("policy", "best-effort")]);
    let node = format!("/dev/nvidia{minor}");
    // MKNOD: the probe makes fresh device nodes (CRI-O's default capabilities leave it out).
    let spec = ContainerSpec::new("cuda")
        .capability("MKNOD")
        .cpu_millis(500, None)
        .memory(64 << 20)
        .device(&node, &node, "rw")
        .env("NVIDIA_VISIBLE_DEVICES", &f.gpu_uuid[&minor]);
    let id = g.run(&pod, &spec);
    let before = g.seen(&id);
    // The device rules as the runtime spec has them and as systemd was told them (systemd
    // guest): when a check below fails, these say which layer lost the GPU's rule.
    let rules = |s: &Seen| {
        format!(
            "spec rules {:?}; scope {}",
            s.spec_device_rules,
            g.scope_devices(&s.id)
        )
    };
    eprintln!("gpu-shared before: {before}\n  {}", rules(&before));
    let check_devices = |when: &str, s: &Seen| {
        assert_eq!(
            s.gpu_usable,
            Ids::from([minor]),
            "gpu-shared {when}: /dev/nvidia{minor} must be usable, and only it\n  seen: {s}\n  {}",
            rules(s)
        );
        assert_eq!(
            g.may_open_char(&id, minor),
            Ok(true),
            "gpu-shared {when}: a fresh node 195:{minor} must open"
        );
        assert_eq!(
            g.may_open_char(&id, other),
            Ok(false),
            "gpu-shared {when}: the device cgroup must still deny GPU {other} (195:{other})"
        );
    };
    check_devices("before any update", &before);

    // Exclusive CPUs, one Guaranteed pod at a time, until one of them came out of the shared
    // container's CPUs and nri-align moved it.
    let mut after = before.clone();
    for i in 0..3 {
        let name = format!("excl-{i}");
        let p = g.pod(&name, Qos::Guaranteed, &[("policy", "single-numa-node")]);
        let c = ContainerSpec::new("busy")
            .cpu_millis(1000, Some(1000))
            .memory(32 << 20);
        let excl = g.seen(&g.run(&p, &c));
        eprintln!("{name}: {excl}");
        after = g.seen(&id);
        if after.cpus != before.cpus {
            assert!(
                after.cpus.is_disjoint(&excl.cpus),
                "gpu-shared still shares CPUs with {name}'s exclusive ones\n  gpu-shared: \
                 {after}\n  {name}: {excl}"
            );
            break;
        }
    }
    eprintln!("gpu-shared after: {after}\n  {}", rules(&after));
    assert_ne!(
        after.cpus, before.cpus,
        "three exclusive allocations never changed the shared container's cpuset: the pool \
         update did not reach it\n  before: {before}\n  after: {after}"
    );
    assert_cgroup_matches("gpu-shared after the update", &after);
    check_devices("after its cpuset was updated", &after);
    let (ok, out) = g.verify();
    assert!(
        ok,
        "nri-align verify reports drift after the update:\n{out}"
    );
}
