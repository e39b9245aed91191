//! The conversion of what real runtimes answered (tests/fixtures/cri: crictl's JSON of
//! containerd 1.7.24's, 2.1.9's and CRI-O 1.34.11's messages, captured by its capture.sh).

use std::path::PathBuf;

use cri_client::proto as cri;
use protobuf::MessageFull;

use super::spec::{container_view, live_state, pod_view, Source};
use crate::enforce::container::ContainerState;

const RUNTIMES: [&str; 3] = ["containerd-1.7", "containerd-2.1", "crio-1.34"];

fn fixture(runtime: &str, what: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cri")
        .join(format!("{runtime}-{what}.json"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str(&text).expect("json")
}

/// crictl prints the messages in protobuf's JSON mapping, but its `inspect` turns timestamps
/// into RFC 3339 text and absent messages into `null`; those fields are not read here.
fn message<M: MessageFull>(mut v: serde_json::Value) -> M {
    if let Some(o) = v.as_object_mut() {
        for k in ["createdAt", "startedAt", "finishedAt"] {
            o.remove(k);
        }
        o.retain(|_, v| !v.is_null());
    }
    let opts = protobuf_json_mapping::ParseOptions {
        ignore_unknown_fields: true,
        ..Default::default()
    };
    protobuf_json_mapping::parse_from_str_with_options(&v.to_string(), &opts).expect("message")
}

/// The runtime's answers: the listed container, its verbose status, the listed pod.
fn answers(
    runtime: &str,
) -> (
    cri::Container,
    cri::ContainerStatusResponse,
    cri::ListPodSandboxResponse,
) {
    let ps = fixture(runtime, "ps");
    let listed: cri::ListContainersResponse = message(ps);
    let inspect = fixture(runtime, "inspect");
    let status = cri::ContainerStatusResponse {
        status: protobuf::MessageField::some(message(inspect["status"].clone())),
        // On the wire, `info` holds one key whose value is the JSON document crictl expands.
        info: [("info".to_string(), inspect["info"].to_string())].into(),
        ..Default::default()
    };
    let pods: cri::ListPodSandboxResponse = message(fixture(runtime, "pods"));
    (listed.containers[0].clone(), status, pods)
}

#[test]
fn each_runtime_s_verbose_status_gives_the_spec_nri_would_describe() {
    for runtime in RUNTIMES {
        let (listed, status, pods) = answers(runtime);
        let state = live_state(listed.state.enum_value().expect("state")).expect("live");
        assert_eq!(state, ContainerState::Running, "{runtime}");
        let (c, source) = container_view(&listed, state, &status);
        assert_eq!(source, Source::RuntimeSpec, "{runtime}");
        assert_eq!(c.name, "app", "{runtime}");
        assert_eq!(c.pod_sandbox_id, pods.items[0].id, "{runtime}");
        assert_eq!(c.resources.cpuset_cpus, "0", "{runtime}");
        assert_eq!(c.resources.memory_limit, Some(268_435_456), "{runtime}");
        assert_eq!(c.resources.cpu_quota, Some(100_000), "{runtime}");
        assert_eq!(c.resources.cpu_period, Some(100_000), "{runtime}");
        assert_eq!(c.resources.cpu_shares, Some(1024), "{runtime}");
        assert_eq!(
            c.env_var("NVIDIA_VISIBLE_DEVICES"),
            Some("none"),
            "{runtime}"
        );
        let dev = c
            .devices
            .iter()
            .find(|d| d.path == "/dev/fixture0")
            .unwrap_or_else(|| panic!("{runtime}: {:?}", c.devices));
        assert_eq!(
            (dev.kind.as_str(), dev.major, dev.minor),
            ("c", 1, 3),
            "{runtime}"
        );
        assert!(
            c.cgroups_path.contains(&c.id),
            "{runtime}: {}",
            c.cgroups_path
        );
        assert!(c.pid > 0, "{runtime}");
        assert_eq!(
            c.annotations
                .get("fixture.nri-align.io/note")
                .map(String::as_str),
            Some("container-annotation"),
            "{runtime}: the container's own annotations, wherever the runtime keeps them"
        );
        let pod = pod_view(&pods.items[0]);
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
            ("default", "fixture", "fixture-uid-1"),
            "{runtime}"
        );
        assert_eq!(
            pod.annotations
                .get("nri-align.io/policy")
                .map(String::as_str),
            Some("single-numa-node"),
            "{runtime}"
        );
    }
}

#[test]
fn without_a_usable_spec_the_status_resources_are_used() {
    for runtime in RUNTIMES {
        let (listed, mut status, _) = answers(runtime);
        for info in [
            None,
            Some("not json"),
            Some(r#"{"pid":"x","runtimeSpec":7}"#),
        ] {
            status.info = info
                .map(|i| [("info".to_string(), i.to_string())].into())
                .unwrap_or_default();
            let (c, source) = container_view(&listed, ContainerState::Running, &status);
            assert_eq!(source, Source::StatusOnly, "{runtime} {info:?}");
            assert_eq!(c.resources.cpuset_cpus, "0", "{runtime} {info:?}");
            assert_eq!(c.resources.memory_limit, Some(268_435_456));
            assert_eq!(c.resources.cpu_quota, Some(100_000));
            assert!(c.devices.is_empty() && c.env.is_empty());
        }
    }
}

#[test]
fn exited_and_unknown_containers_hold_nothing() {
    assert_eq!(live_state(cri::ContainerState::CONTAINER_EXITED), None);
    assert_eq!(live_state(cri::ContainerState::CONTAINER_UNKNOWN), None);
    assert_eq!(
        live_state(cri::ContainerState::CONTAINER_CREATED),
        Some(ContainerState::Created)
    );
}

#[test]
fn the_socket_follows_the_config_then_the_runtime() {
    use super::socket_for;
    use std::path::Path;
    assert_eq!(
        socket_for(None, "containerd").as_deref(),
        Some(Path::new(super::CONTAINERD_SOCKET))
    );
    assert_eq!(
        socket_for(None, "cri-o").as_deref(),
        Some(Path::new(super::CRIO_SOCKET))
    );
    assert_eq!(socket_for(None, "other"), None);
    assert_eq!(socket_for(Some(Path::new("")), "containerd"), None);
    assert_eq!(
        socket_for(Some(Path::new("/x/cri.sock")), "cri-o").as_deref(),
        Some(Path::new("/x/cri.sock"))
    );
}
