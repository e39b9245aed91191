use super::*;

#[test]
fn only_cpu_memory_and_node_events_wake_the_follower() {
    assert!(is_topology_event(
        b"offline@/devices/system/cpu/cpu3\0ACTION=offline\0"
    ));
    assert!(is_topology_event(
        b"online@/devices/system/memory/memory40\0"
    ));
    assert!(is_topology_event(b"add@/devices/system/node/node2\0"));
    assert!(!is_topology_event(
        b"add@/devices/pci0000:00/0000:00:1f.2\0"
    ));
    assert!(!is_topology_event(b"libudev\0\xfe\xed"));
    assert!(!is_topology_event(b""));
}
