//! What arrives on the NRI socket: the multiplexer's frames, the ttrpc messages inside them and
//! the NRI requests inside those, down to the placement request a CreateContainer becomes.

use std::sync::Arc;

use nri_align::enforce::inputs::build_request;
use nri_align::enforce::nri::convert::{container_view, pod_view};
use nri_align::placement::{Allocator, PlacementConfig};
use nri_align::topology::testing::TopologyBuilder;
use nri_protocol::api::{self, Message};
use nri_protocol::mux::framing::{RequestFraming, TTRPC_HEADER_LEN};
use nri_protocol::mux::{read_frame, HEADER_LEN, MAX_READ_PAYLOAD};

use crate::harness::{check_error, fuzz, Outcome};

/// Futures over in-memory bytes never wait: one current-thread runtime serves every input.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// The multiplexer's reader over any byte stream: frames come out as announced, a bad header
/// is a bounded error before anything is allocated for it.
#[test]
fn fuzz_mux_decoder() {
    let rt = runtime();
    fuzz("mux", 64 << 10, |input| {
        rt.block_on(async {
            let mut rest = input;
            let mut frames = 0;
            loop {
                let before = rest;
                match read_frame(&mut rest).await {
                    Ok(Some((id, payload))) => {
                        frames += 1;
                        assert!(payload.len() <= MAX_READ_PAYLOAD);
                        // The frame is exactly the bytes it was read from.
                        let used = before.len() - rest.len();
                        assert_eq!(used, HEADER_LEN + payload.len());
                        assert_eq!(&before[..4], &id.to_be_bytes());
                        assert_eq!(&before[HEADER_LEN..used], &payload[..]);
                    }
                    Ok(None) => {
                        return if frames > 0 {
                            Outcome::Accepted
                        } else {
                            Outcome::Rejected
                        };
                    }
                    Err(err) => {
                        check_error("mux", &err.to_string());
                        return Outcome::Rejected;
                    }
                }
            }
        })
    });
}

/// The ttrpc stream of the Plugin service: the plugin's framing check, ttrpc's own message
/// reader and request decoding, then the NRI message each method carries. A CreateContainer
/// goes on through the plugin's conversion into a placement decision.
#[test]
fn fuzz_ttrpc_nri_messages() {
    let rt = runtime();
    let topo = Arc::new(TopologyBuilder::new().sockets(2).numa_per_socket(2).build());
    let config = PlacementConfig {
        allow_device_annotations: true,
        ..PlacementConfig::default()
    };
    fuzz("ttrpc", 64 << 10, |input| {
        // The plugin's check and ttrpc's reader must agree on where messages are.
        let mut framing = RequestFraming::new();
        let framed = framing.feed(input);
        if let Err(err) = &framed {
            check_error("framing", &err.to_string());
        }
        let mut accepted = false;
        let mut rest = input;
        while rest.len() >= TTRPC_HEADER_LEN {
            let Ok(msg) = rt.block_on(ttrpc::proto::GenMessage::read_from(&mut rest)) else {
                break;
            };
            let Ok(req) = ttrpc::proto::Request::parse_from_bytes(&msg.payload) else {
                continue;
            };
            accepted |= decode_nri(&req.method, &req.payload, &topo, &config);
        }
        if framed.is_ok() && accepted {
            Outcome::Accepted
        } else {
            Outcome::Rejected
        }
    });
}

/// Decodes `payload` as the request of Plugin-service `method`; a decoded message must encode
/// and decode back to itself. Returns whether it decoded.
fn decode_nri(
    method: &str,
    payload: &[u8],
    topo: &Arc<nri_align::topology::Topology>,
    config: &PlacementConfig,
) -> bool {
    fn round_trip<M: Message + PartialEq>(payload: &[u8]) -> Option<M> {
        let m = M::parse_from_bytes(payload).ok()?;
        let bytes = m.write_to_bytes().unwrap();
        assert!(
            M::parse_from_bytes(&bytes).unwrap() == m,
            "re-encoded message differs"
        );
        Some(m)
    }
    match method {
        "Configure" => round_trip::<api::ConfigureRequest>(payload).is_some(),
        "Synchronize" => round_trip::<api::SynchronizeRequest>(payload).is_some(),
        "UpdateContainer" => round_trip::<api::UpdateContainerRequest>(payload).is_some(),
        "StopContainer" => round_trip::<api::StopContainerRequest>(payload).is_some(),
        "RemoveContainer" => round_trip::<api::RemoveContainerRequest>(payload).is_some(),
        "PostStartContainer" => round_trip::<api::PostStartContainerRequest>(payload).is_some(),
        "UpdatePodSandbox" => round_trip::<api::UpdatePodSandboxRequest>(payload).is_some(),
        "StateChange" => round_trip::<api::StateChangeEvent>(payload).is_some(),
        "CreateContainer" => {
            let Some(req) = round_trip::<api::CreateContainerRequest>(payload) else {
                return false;
            };
            let (Some(pod), Some(container)) = (req.pod.as_ref(), req.container.as_ref()) else {
                return true;
            };
            match build_request(topo, &pod_view(pod), &container_view(container)) {
                Ok(request) => {
                    let mut alloc = Allocator::new(topo.clone(), config.clone());
                    if let Err(err) = alloc.place(&request) {
                        check_error("placement", &err.to_string());
                    }
                }
                Err(err) => check_error("request", &err.to_string()),
            }
            true
        }
        _ => false,
    }
}

/// A ttrpc request message (header and payload) calling `method` of the Plugin service.
fn ttrpc_request(stream: u32, method: &str, message: &impl Message) -> Vec<u8> {
    let req = ttrpc::proto::Request {
        service: "nri.pkg.api.v1alpha1.Plugin".into(),
        method: method.into(),
        payload: message.write_to_bytes().unwrap(),
        timeout_nano: 2_000_000_000,
        ..Default::default()
    };
    let payload = req.write_to_bytes().unwrap();
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&payload);
    out
}

/// A pod and a container as a kubelet makes them: a 2-CPU guaranteed container with 1 GiB,
/// a GPU from the environment, placement annotations.
fn pod_and_container() -> (api::PodSandbox, api::Container) {
    let pod = api::PodSandbox {
        id: "p1".into(),
        name: "train".into(),
        uid: "0f8e-uid".into(),
        namespace: "ml".into(),
        annotations: [
            ("policy.nri-align.io/pod".to_string(), "strict".to_string()),
            (
                "cpus.nri-align.io/container.app".to_string(),
                "exclusive".to_string(),
            ),
        ]
        .into(),
        ..Default::default()
    };
    let cpu = api::LinuxCPU {
        shares: api::MessageField::some(api::OptionalUInt64 {
            value: 2048,
            ..Default::default()
        }),
        quota: api::MessageField::some(api::OptionalInt64 {
            value: 200_000,
            ..Default::default()
        }),
        period: api::MessageField::some(api::OptionalUInt64 {
            value: 100_000,
            ..Default::default()
        }),
        ..Default::default()
    };
    let memory = api::LinuxMemory {
        limit: api::MessageField::some(api::OptionalInt64 {
            value: 1 << 30,
            ..Default::default()
        }),
        ..Default::default()
    };
    let container = api::Container {
        id: "c1".into(),
        pod_sandbox_id: "p1".into(),
        name: "app".into(),
        env: vec!["PATH=/usr/bin".into(), "NVIDIA_VISIBLE_DEVICES=0".into()],
        linux: api::MessageField::some(api::LinuxContainer {
            resources: api::MessageField::some(api::LinuxResources {
                cpu: api::MessageField::some(cpu),
                memory: api::MessageField::some(memory),
                ..Default::default()
            }),
            cgroups_path: "kubepods-pod0f8e.slice:cri-containerd:c1".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    (pod, container)
}

/// Writes the committed corpus of the `ttrpc` and `mux` targets from the API types (run with
/// `cargo test --test fuzz -- --ignored write_protocol_corpus` after a change to them).
#[test]
#[ignore = "writes tests/fuzz/corpus: run by hand"]
fn write_protocol_corpus() {
    let (pod, container) = pod_and_container();
    let configure = api::ConfigureRequest {
        config: "policy: strict\n".into(),
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.1".into(),
        ..Default::default()
    };
    let sync = api::SynchronizeRequest {
        pods: vec![pod.clone()],
        containers: vec![container.clone()],
        more: true,
        ..Default::default()
    };
    let create = api::CreateContainerRequest {
        pod: api::MessageField::some(pod.clone()),
        container: api::MessageField::some(container.clone()),
        ..Default::default()
    };
    let stop = api::StopContainerRequest {
        pod: api::MessageField::some(pod.clone()),
        container: api::MessageField::some(container.clone()),
        ..Default::default()
    };
    let streams: Vec<(&str, Vec<u8>)> = vec![
        ("configure", ttrpc_request(1, "Configure", &configure)),
        ("synchronize", ttrpc_request(3, "Synchronize", &sync)),
        ("create", ttrpc_request(5, "CreateContainer", &create)),
        (
            "session",
            [
                ttrpc_request(1, "Configure", &configure),
                ttrpc_request(3, "Synchronize", &sync),
                ttrpc_request(5, "CreateContainer", &create),
                ttrpc_request(7, "StopContainer", &stop),
            ]
            .concat(),
        ),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus");
    for (name, bytes) in &streams {
        std::fs::create_dir_all(root.join("ttrpc")).unwrap();
        std::fs::write(root.join("ttrpc").join(name), bytes).unwrap();
        // The same stream as the runtime sends it: cut into mux frames for the Plugin service,
        // with an empty frame and one for the Runtime service's id in between.
        let mut mux = nri_protocol::mux::encode_frames(1, bytes);
        mux.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
        mux.extend(nri_protocol::mux::encode_frames(
            2,
            &bytes[..bytes.len().min(40)],
        ));
        std::fs::create_dir_all(root.join("mux")).unwrap();
        std::fs::write(root.join("mux").join(name), mux).unwrap();
    }
    // Known-hostile: a garbage ttrpc header and an oversized mux frame.
    std::fs::write(
        root.join("ttrpc/garbage-header"),
        [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 1, 0],
    )
    .unwrap();
    std::fs::write(
        root.join("mux/oversized"),
        [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3],
    )
    .unwrap();
}
