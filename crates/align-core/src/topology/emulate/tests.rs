use super::*;
use crate::topology::CpuSet;

#[test]
fn masks_match_the_kernel_format() {
    let set: CpuSet = [0, 1].into_iter().collect();
    assert_eq!(mask_string(&set, 2), "3");
    let set: CpuSet = (0..72).collect();
    assert_eq!(mask_string(&set, 72), "ff,ffffffff,ffffffff");
    let set: CpuSet = [32].into_iter().collect();
    assert_eq!(mask_string(&set, 64), "00000001,00000000");
}

#[test]
fn nvml_fixture_follows_the_guest_sysfs() {
    let desc = HostDesc::load("localhost-1n").expect("localhost-1n");
    // A "guest" whose firmware put the two GPUs elsewhere.
    let guest = HostDesc::from_yaml(
        "name: guest\nsockets: 1\ncores_per_numa: 2\nmemory_per_numa: 1Gi\n\
             gpus: [{numa_node: 0, pci_bus_id: \"0000:41:00.0\"},\
                    {numa_node: 0, pci_bus_id: \"0000:43:00.0\"}]\n",
    )
    .expect("guest");
    let dir = tempfile::tempdir().expect("tempdir");
    emulate(&guest, dir.path()).expect("emulate guest");
    let fx = nvml_fixture::fixture_from_sysfs(&desc, &dir.path().join("sys")).expect("fixture");
    let ids: Vec<&str> = fx.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
    assert_eq!(ids, ["00000000:41:00.0", "00000000:43:00.0"]);
    assert_eq!(fx.gpus[1].cpu_affinity, "0-1");
    assert_eq!(fx.gpus[0].uuid, layout_uuid(&desc, 0));
    // Too few stand-ins is an error, not a short fixture.
    let big = HostDesc::load("pcie-4gpu").expect("pcie-4gpu");
    let err = nvml_fixture::fixture_from_sysfs(&big, &dir.path().join("sys"));
    assert!(matches!(
        err,
        Err(EmulateError::MissingGpus { want: 4, found: 2 })
    ));
}

fn layout_uuid(desc: &HostDesc, i: usize) -> String {
    crate::topology::desc::gpu_uuid(desc, i)
}

#[test]
fn qemu_args_shape_the_guest_like_the_description() {
    let desc = HostDesc::load("vm-2s4n").expect("vm-2s4n");
    let args = qemu::qemu_args(&desc);
    let values = |flag: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    };
    assert_eq!(values("-smp"), ["8,sockets=2,cores=2,threads=2"]);
    assert_eq!(values("-cpu"), ["qemu64,vendor=GenuineIntel"]);
    assert_eq!(values("-m"), ["2304M"]);
    let numa = values("-numa");
    assert_eq!(numa.iter().filter(|a| a.starts_with("node,")).count(), 5);
    assert!(numa.contains(&"cpu,node-id=1,socket-id=0,core-id=1,thread-id=1"));
    assert!(numa.contains(&"dist,src=0,dst=2,val=21"));
    assert_eq!(numa.iter().filter(|a| a.starts_with("dist,")).count(), 20);
    let devices = values("-device");
    let count = |p: &str| devices.iter().filter(|d| d.starts_with(p)).count();
    assert_eq!(
        (
            count("pxb-pcie"),
            count("x3130-upstream"),
            count("bochs-display,"),
            count("e1000e,")
        ),
        (4, 4, 4, 4)
    );
    assert!(devices
        .iter()
        .any(|d| d.starts_with("pxb-pcie,") && d.contains("numa_node=3")));
}

#[test]
fn hotplug_cpus_are_devices_in_the_same_slots() {
    let desc = HostDesc::load("vm-2s4n").expect("vm-2s4n");
    let plain = qemu::qemu_args(&desc);
    let args = qemu::qemu_args_with(&desc, true);
    let values = |a: &[String], flag: &str| -> Vec<String> {
        a.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .collect()
    };
    assert_eq!(
        values(&args, "-smp"),
        ["1,maxcpus=8,sockets=2,cores=2,threads=2"]
    );
    // The NUMA shape is the plain guest's: every possible CPU keeps its node.
    assert_eq!(values(&args, "-numa"), values(&plain, "-numa"));
    let cpus: Vec<String> = values(&args, "-device")
        .into_iter()
        .filter(|d| d.starts_with("qemu64-x86_64-cpu,"))
        .collect();
    assert_eq!(cpus.len(), 7, "{cpus:?}");
    // CPU 5 of the sequential guest: socket 1, its first core, second thread.
    assert!(
        cpus.contains(&"qemu64-x86_64-cpu,id=cpu5,socket-id=1,core-id=0,thread-id=1".to_string())
    );
    assert!(!cpus.iter().any(|d| d.contains("id=cpu0,")));
}

#[test]
fn relative_links_climb_to_the_common_parent() {
    assert_eq!(
        relative(
            Path::new("bus/pci/devices"),
            "devices/pci0000:00/0000:00:01.0"
        ),
        PathBuf::from("../../../devices/pci0000:00/0000:00:01.0")
    );
    assert_eq!(
        relative(
            Path::new("devices/system/node/node0"),
            "devices/system/cpu/cpu3"
        ),
        PathBuf::from("../../cpu/cpu3")
    );
}
