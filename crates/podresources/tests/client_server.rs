//! The PodResources client against the test kubelet: List, Get, an unknown pod, a disabled
//! Get, a slow kubelet, an oversized answer, and a kubelet that goes away.

use std::time::{Duration, Instant};

use podresources::build::{container, devices, pod};
use podresources::{proto, Behaviour, ClientOptions, Error, PodResourcesClient, TestKubelet};

/// A Guaranteed GPU pod (2 GPUs on NUMA 0 and 1, one RDMA counter id without topology) and a
/// time-sliced pod (replica ids), as the kubelet reports them.
fn allocation() -> Vec<proto::PodResources> {
    let mut train_devs = devices(
        "nvidia.com/gpu",
        &[("GPU-0aaa", Some(0)), ("GPU-1aaa", Some(1))],
    );
    train_devs.extend(devices("rdma/hca_shared_devices_a", &[("7", None)]));
    vec![
        pod(
            "ml",
            "train-0",
            vec![container("cuda", train_devs), container("sidecar", vec![])],
        ),
        pod(
            "ml",
            "infer-0",
            vec![container(
                "server",
                devices("nvidia.com/gpu.shared", &[("GPU-1aaa::3", Some(1))]),
            )],
        ),
    ]
}

fn opts() -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_millis(1500),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_get_and_the_kubelets_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let kubelet = TestKubelet::start(&sock, allocation()).expect("start");
    let client = PodResourcesClient::connect(&sock, opts())
        .await
        .expect("connect");

    let pods = client.list().await.expect("list");
    assert_eq!(pods.len(), 2);
    let cuda = &pods[0].containers[0];
    assert_eq!(
        (pods[0].namespace.as_str(), pods[0].name.as_str()),
        ("ml", "train-0")
    );
    assert_eq!(cuda.name, "cuda");
    let gpus: Vec<(&str, i64)> = cuda
        .devices
        .iter()
        .filter(|d| d.resource_name == "nvidia.com/gpu")
        .map(|d| (d.device_ids[0].as_str(), d.topology.nodes[0].ID))
        .collect();
    assert_eq!(gpus, vec![("GPU-0aaa", 0), ("GPU-1aaa", 1)]);
    let rdma = cuda
        .devices
        .iter()
        .find(|d| d.resource_name.starts_with("rdma/"))
        .expect("rdma entry");
    assert!(
        rdma.topology.is_none(),
        "no topology from the plugin stays none"
    );

    let infer = client.get("ml", "infer-0").await.expect("get");
    assert_eq!(
        infer.containers[0].devices[0].device_ids,
        vec!["GPU-1aaa::3"]
    );

    match client.get("ml", "nope").await {
        Err(Error::PodNotFound { namespace, name }) => {
            assert_eq!((namespace.as_str(), name.as_str()), ("ml", "nope"))
        }
        other => panic!("{other:?}"),
    }

    // The allocation changes (pod deleted): the next List says so.
    kubelet.set_pods(allocation().into_iter().skip(1).collect());
    assert_eq!(client.list().await.expect("list").len(), 1);

    // A kubelet without the Get feature gate.
    kubelet.set_behaviour(Behaviour {
        get_disabled: true,
        ..Default::default()
    });
    match client.get("ml", "infer-0").await {
        Err(Error::Call {
            call: "Get",
            source,
        }) => {
            assert!(
                source.to_string().contains("Get method disabled"),
                "{source}"
            )
        }
        other => panic!("{other:?}"),
    }

    let mut alloc = proto::AllocatableResourcesResponse::new();
    alloc.cpu_ids = vec![0, 1, 2, 3];
    kubelet.set_allocatable(alloc);
    assert_eq!(
        client.allocatable().await.expect("allocatable").cpu_ids,
        vec![0, 1, 2, 3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_oversized_and_vanished_kubelets_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let kubelet = TestKubelet::start(&sock, allocation()).expect("start");
    let client = PodResourcesClient::connect(
        &sock,
        ClientOptions {
            max_message: 64 * 1024,
            ..opts()
        },
    )
    .await
    .expect("connect");

    // 1 MiB answer against a 64 KiB limit.
    kubelet.set_behaviour(Behaviour {
        oversize: Some(1 << 20),
        ..Default::default()
    });
    match client.list().await {
        Err(Error::Call {
            call: "List",
            source,
        }) => {
            let msg = source.to_string();
            assert!(msg.contains("over the limit of 65536 bytes"), "{msg}");
        }
        other => panic!("{other:?}"),
    }

    // A kubelet slower than the deadline.
    kubelet.set_behaviour(Behaviour {
        delay: Some(Duration::from_secs(20)),
        ..Default::default()
    });
    let start = Instant::now();
    match client.list().await {
        Err(Error::Call {
            source: unix_grpc::GrpcError::Timeout { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));

    // The kubelet goes away: the open client and a new one both say it is unavailable.
    kubelet.set_behaviour(Behaviour::default());
    assert_eq!(client.list().await.expect("list again").len(), 2);
    kubelet.stop().await;
    assert!(matches!(
        client.list().await,
        Err(Error::Unavailable { .. })
    ));
    match PodResourcesClient::connect(&sock, opts()).await {
        Err(e @ Error::Unavailable { .. }) => {
            assert!(e.to_string().contains("kubelet.sock"), "{e}")
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("connected to a stopped kubelet"),
    }
}
