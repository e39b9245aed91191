//! QEMU arguments for a guest shaped like a description, for the VM end-to-end tests (`hack/vm`,
//! DEVELOPERS.md): `-smp` and `-numa` (memory backends, CPU placement, distances) give the CPU
//! and memory shape; one `pxb-pcie` expander per host bridge of the layout, each with its NUMA
//! node, carries a `pcie-root-port`, then `x3130-upstream` + `xio3130-downstream` switches as
//! described; QEMU's `bochs-display` stands in for each GPU and `e1000e` for each NIC. NVSwitch
//! chips are not emulated. `bochs-display` because it is a display controller of class 0x0380,
//! which the sysfs reader takes for an accelerator: the guest's own PCI tree then places each
//! GPU stand-in (NUMA node, switch, root complex), not only the NVML fixture made from it. The guest firmware renumbers buses, so the guest's NVML fixture is
//! made afterwards from its own sysfs (`nri-align emulate --nvml-from-sysfs`).

use crate::topology::desc::{FuncRole, HostDesc, Layout};

/// The CPU model of the guest; a hot-plugged CPU is a device of its type
/// (`qemu64-x86_64-cpu`, what `query-hotpluggable-cpus` reports).
const CPU_MODEL: &str = "qemu64";

/// The arguments (without the `qemu-system-x86_64` itself, the disk, kernel or console).
pub fn qemu_args(desc: &HostDesc) -> Vec<String> {
    qemu_args_with(desc, false)
}

/// [`qemu_args`], and with `hotplug_cpus` every CPU but the boot CPU is a device of its own
/// (`-smp 1,maxcpus=N` plus one `-device {CPU_MODEL}-x86_64-cpu,id=cpuI,...` each) rather
/// than part of `-smp`: QEMU can unplug only CPUs that were added as devices with an id
/// (`device_del id=cpuI`), and `device_add` with the same arguments plugs one back. The guest
/// sees the same CPUs, numbered the same way (its kernel numbers them in APIC id order, which
/// is QEMU's socket, core, thread order), and `I` is that number.
pub fn qemu_args_with(desc: &HostDesc, hotplug_cpus: bool) -> Vec<String> {
    let Ok(l) = Layout::new(desc) else {
        return Vec::new();
    };
    let mut a: Vec<String> = Vec::new();
    let mut push = |k: &str, v: String| {
        a.push(k.to_string());
        a.push(v);
    };
    let total_mib: u64 = l.nodes.iter().map(|n| n.memory_bytes >> 20).sum();
    push("-machine", "q35".into());
    // TCG's default CPU reports an AMD vendor without topoext, so the guest kernel sees no SMT
    // siblings (every thread its own core); the same model with Intel's vendor makes it read
    // the threads from CPUID leaf 0xB.
    push("-cpu", format!("{CPU_MODEL},vendor=GenuineIntel"));
    push("-m", format!("{total_mib}M"));
    let total = desc.total_cpus();
    let smp = if hotplug_cpus && total > 1 {
        format!("1,maxcpus={total}")
    } else {
        total.to_string()
    };
    push(
        "-smp",
        format!(
            "{smp},sockets={},cores={},threads={}",
            desc.sockets,
            desc.cores_per_numa * desc.numa_per_socket,
            desc.threads_per_core
        ),
    );
    for n in &l.nodes {
        push(
            "-object",
            format!(
                "memory-backend-ram,id=mem{},size={}M",
                n.id,
                n.memory_bytes >> 20
            ),
        );
        push("-numa", format!("node,nodeid={},memdev=mem{}", n.id, n.id));
    }
    cpu_placement(desc, &l, hotplug_cpus, &mut a);
    pci_devices(&l, &mut a);
    a
}

/// Each CPU's node and place (socket, core, thread), the hot-pluggable CPUs as devices, and
/// the nodes' distances.
fn cpu_placement(desc: &HostDesc, l: &Layout, hotplug_cpus: bool, a: &mut Vec<String>) {
    let mut push = |k: &str, v: String| {
        a.push(k.to_string());
        a.push(v);
    };
    let cores_per_pkg = desc.cores_per_numa * desc.numa_per_socket;
    let mut seen = std::collections::HashSet::new();
    let mut cpu_devices = Vec::new();
    for c in &l.cpus {
        // Thread number within the core: QEMU places by (socket, core, thread), not by id.
        let thread = l
            .cpus
            .iter()
            .filter(|o| o.core_index == c.core_index && o.id < c.id)
            .count();
        if seen.insert((c.core_index, thread)) {
            let core = c.core_index % cores_per_pkg.max(1);
            push(
                "-numa",
                format!(
                    "cpu,node-id={},socket-id={},core-id={core},thread-id={thread}",
                    c.node, c.package
                ),
            );
            // The guest's number of this CPU: its rank in socket, core, thread order.
            let index = (c.package * cores_per_pkg + core) as usize
                * desc.threads_per_core as usize
                + thread;
            if hotplug_cpus && index != 0 {
                cpu_devices.push(format!(
                    "{CPU_MODEL}-x86_64-cpu,id=cpu{index},socket-id={},core-id={core},\
                     thread-id={thread}",
                    c.package
                ));
            }
        }
    }
    for d in cpu_devices {
        push("-device", d);
    }
    for (i, n) in l.nodes.iter().enumerate() {
        for (j, d) in n.distances.iter().enumerate() {
            if i != j {
                push("-numa", format!("dist,src={i},dst={j},val={d}"));
            }
        }
    }
}

/// One expander per host bridge with its root ports, switches and the GPU and NIC stand-ins
/// (a host bridge holding an NVSwitch is left out: NVSwitch chips are not emulated).
fn pci_devices(l: &Layout, a: &mut Vec<String>) {
    let mut push = |k: &str, v: String| {
        a.push(k.to_string());
        a.push(v);
    };
    let mut chassis = 0;
    let mut nic = 0;
    for (h, hb) in l.host_bridges.iter().enumerate() {
        let funcs: Vec<usize> = (0..l.funcs.len())
            .filter(|&i| l.funcs[i].host_bridge == h)
            .collect();
        if funcs
            .iter()
            .any(|&i| matches!(l.funcs[i].role, FuncRole::NvSwitch(_)))
        {
            continue;
        }
        // Expanders take root bus numbers 0x10 apart so each has room for its subtree.
        push(
            "-device",
            format!(
                "pxb-pcie,id=pxb{h},bus_nr={},numa_node={},bus=pcie.0",
                0x10 * (h + 1),
                hb.numa_node
            ),
        );
        for &i in &funcs {
            let f = &l.funcs[i];
            let parent = f.parent.map(|p| format!("f{p}"));
            let bus = parent.unwrap_or_else(|| format!("pxb{h}"));
            let dev = match f.role {
                FuncRole::RootPort => {
                    chassis += 1;
                    format!("pcie-root-port,id=f{i},bus={bus},chassis={chassis},slot=0")
                }
                FuncRole::SwitchUpstream => format!("x3130-upstream,id=f{i},bus={bus}"),
                FuncRole::SwitchDownstream => {
                    chassis += 1;
                    format!("xio3130-downstream,id=f{i},bus={bus},chassis={chassis},slot=0")
                }
                FuncRole::Gpu(_) => {
                    // The smallest framebuffer keeps four stand-ins cheap for the host.
                    format!("bochs-display,id=f{i},bus={bus},addr=0,vgamem=4M")
                }
                FuncRole::Nic(_) => {
                    nic += 1;
                    push("-netdev", format!("user,id=net{nic}"));
                    format!("e1000e,id=f{i},bus={bus},addr=0,netdev=net{nic}")
                }
                FuncRole::NvSwitch(_) => continue,
            };
            push("-device", dev);
        }
    }
}
