//! The PodResources source against the test kubelet: answers, a kubelet that does not know
//! the pod, `Get` disabled, a slow kubelet (fails open within the deadline, then backs off),
//! a vanished one.

use std::time::Duration;

use podresources::{proto, Behaviour, TestKubelet};

use super::*;

fn pod() -> PodView {
    PodView {
        id: "sb".into(),
        uid: "uid-1".into(),
        name: "train-0".into(),
        namespace: "ml".into(),
        ..Default::default()
    }
}

fn answer() -> Vec<proto::PodResources> {
    let mut c = proto::ContainerResources::new();
    c.name = "cuda".into();
    c.devices = [
        podresources::build::devices("nvidia.com/gpu", &[("GPU-1aaa", Some(0))]),
        podresources::build::devices("example.com/other", &[("x", None)]),
    ]
    .concat();
    let mut p = proto::PodResources::new();
    p.name = "train-0".into();
    p.namespace = "ml".into();
    p.containers = vec![c];
    vec![p]
}

fn source(dir: &std::path::Path, ms: u64) -> KubeletSource {
    KubeletSource::new(PodResourcesConfig {
        socket: dir.join("kubelet.sock"),
        timeout: Duration::from_millis(ms),
        ..PodResourcesConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_answer_for_the_container_filtered_to_the_configured_resources() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = TestKubelet::start(&dir.path().join("kubelet.sock"), answer()).expect("serve");
    let s = source(dir.path(), 1000);
    let d = s.devices_for(&pod(), "cuda", None).await.expect("answered");
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].resource.as_str(), d[0].ids.clone()),
        ("nvidia.com/gpu", vec!["GPU-1aaa".to_string()])
    );
    // Another container of the pod (a plain init container) is not listed: no word.
    assert_eq!(s.devices_for(&pod(), "init", None).await, None);
    // Cached per pod: the kubelet forgetting the pod changes nothing until the pod goes.
    k.set_pods(Vec::new());
    assert!(s.devices_for(&pod(), "cuda", None).await.is_some());
    s.forget_pod("uid-1").await;
    assert_eq!(s.devices_for(&pod(), "cuda", None).await, None);
    // Get disabled: List answers.
    k.set_pods(answer());
    k.set_behaviour(Behaviour {
        get_disabled: true,
        ..Behaviour::default()
    });
    s.forget_pod("uid-1").await;
    assert!(s.devices_for(&pod(), "cuda", None).await.is_some());
    k.stop().await;
}

/// A kubelet that did not know the pod at its first container (it had not listed it, or its
/// claims, yet) is asked again once "pod unknown" is older than its time to live: the later
/// containers get their devices. Within it, the answer stands (one call per pod, not per
/// container, for pods the kubelet never runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_unknown_is_asked_again_after_its_time_to_live() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = TestKubelet::start(&dir.path().join("kubelet.sock"), Vec::new()).expect("serve");
    let kept = source(dir.path(), 1000).with_unknown_pod_ttl(Duration::from_secs(3600));
    let brief = source(dir.path(), 1000).with_unknown_pod_ttl(Duration::from_millis(20));
    assert_eq!(kept.devices_for(&pod(), "cuda", None).await, None);
    assert_eq!(brief.devices_for(&pod(), "cuda", None).await, None);
    k.set_pods(answer());
    assert_eq!(kept.devices_for(&pod(), "cuda", None).await, None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d = brief
        .devices_for(&pod(), "cuda", None)
        .await
        .expect("asked again");
    assert_eq!(d[0].ids, ["GPU-1aaa"]);
    // A known pod's answer stays until the pod goes, whatever its age.
    k.set_pods(Vec::new());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(brief.devices_for(&pod(), "cuda", None).await.is_some());
    k.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_absent_kubelet_fails_open_within_the_deadline_then_is_skipped() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = TestKubelet::start(&dir.path().join("kubelet.sock"), answer()).expect("serve");
    k.set_behaviour(Behaviour {
        delay: Some(Duration::from_secs(5)),
        ..Behaviour::default()
    });
    let s = source(dir.path(), 200);
    let m = Metrics::new();
    let t = Instant::now();
    assert_eq!(s.devices_for(&pod(), "cuda", Some(&m)).await, None);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // Backing off: the next lookup costs nothing.
    let t = Instant::now();
    assert_eq!(s.devices_for(&pod(), "cuda", Some(&m)).await, None);
    assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
    let text = m.encode();
    assert!(text.contains("event=\"podresources-failed\"} 1"), "{text}");
    assert!(text.contains("event=\"podresources-skipped\"} 1"), "{text}");
    k.stop().await;
    // No socket at all.
    let s = source(&dir.path().join("none"), 200);
    assert_eq!(s.devices_for(&pod(), "cuda", None).await, None);
}

/// A 15 MiB answer (under gRPC's usual 16 MiB) was read and decoded: 3.1 GiB of memory and
/// 3.6-4.0 s per creation despite a 1.5 s deadline. Now answers over 4 MiB are refused from
/// their frame header, and no lookup waits past the deadline (plus scheduling slack), neither
/// for a slow kubelet nor behind another lookup (each had a deadline of its own: a creation
/// queued behind a slow lookup waited for it, then for its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_or_slow_answer_never_holds_a_creation_past_the_deadline() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = TestKubelet::start(&dir.path().join("kubelet.sock"), answer()).expect("serve");
    k.set_behaviour(Behaviour {
        oversize: Some(15 << 20),
        get_disabled: true,
        ..Behaviour::default()
    });
    // A deadline that would let the whole answer be read: it is refused unread instead.
    let s = source(dir.path(), 5000);
    let m = Metrics::new();
    let t = Instant::now();
    assert_eq!(s.devices_for(&pod(), "cuda", Some(&m)).await, None);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(m.encode().contains("event=\"podresources-failed\"} 1"));
    // Just under the limit is still read.
    k.set_behaviour(Behaviour {
        oversize: Some(3 << 20),
        get_disabled: true,
        ..Behaviour::default()
    });
    let s = source(dir.path(), 5000);
    assert!(s.devices_for(&pod(), "cuda", None).await.is_some());
    // A kubelet answering in 200 ms against a 300 ms deadline: two creations at once (two
    // pods) each wait at most the deadline, the one queued behind the other's lookup too.
    k.set_behaviour(Behaviour {
        delay: Some(Duration::from_millis(200)),
        ..Behaviour::default()
    });
    let s = std::sync::Arc::new(source(dir.path(), 300));
    let lookups: Vec<_> = (0..2)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut p = pod();
                p.uid = format!("uid-{i}");
                let t = Instant::now();
                let _ = s.devices_for(&p, "cuda", None).await;
                t.elapsed()
            })
        })
        .collect();
    for l in lookups {
        let took = l.await.expect("lookup");
        assert!(took < Duration::from_millis(350), "{took:?}");
    }
    k.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_claims_come_with_their_cdi_names_driver_pool_and_device() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut answer = answer();
    let mut cdi = proto::CDIDevice::new();
    cdi.name = "k8s.gpu.nvidia.com/claim=6f1a-gpu-0".into();
    let mut r = proto::ClaimResource::new();
    r.cdi_devices = vec![cdi];
    r.driver_name = "gpu.nvidia.com".into();
    r.pool_name = "node-1".into();
    r.device_name = "gpu-0".into();
    let mut d = proto::DynamicResource::new();
    d.claim_name = "gpu-claim".into();
    d.claim_namespace = "ml".into();
    d.claim_resources = vec![r];
    answer[0].containers[0].dynamic_resources = vec![d];
    let k = TestKubelet::start(&dir.path().join("kubelet.sock"), answer).expect("serve");
    let s = source(dir.path(), 1000);
    // Nothing cached yet: the claims are read from the answer devices_for fetched, never asked.
    assert!(s.claims_for(&pod(), "cuda").await.is_empty());
    assert!(s.devices_for(&pod(), "cuda", None).await.is_some());
    let claims = s.claims_for(&pod(), "cuda").await;
    assert_eq!(
        claims,
        [KubeletClaimDevice {
            claim: "ml/gpu-claim".into(),
            driver: "gpu.nvidia.com".into(),
            pool: "node-1".into(),
            device: "gpu-0".into(),
            cdi_names: vec!["k8s.gpu.nvidia.com/claim=6f1a-gpu-0".into()],
        }]
    );
    assert!(s.claims_for(&pod(), "init").await.is_empty());
    k.stop().await;
}

/// GetAllocatableResources of a kubelet whose device plugin left GPU-2aaa out (unhealthy):
/// the source says so alongside the container's devices, under the same deadline, keeps the
/// answer for its time to live, and says nothing (never a guess) when the kubelet is slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocatable_devices_come_with_the_lookup_and_a_slow_kubelet_gives_none() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = TestKubelet::start(&dir.path().join("kubelet.sock"), answer()).expect("serve");
    let mut allocatable = proto::AllocatableResourcesResponse::new();
    allocatable.devices = [
        podresources::build::devices(
            "nvidia.com/gpu",
            &[("GPU-0aaa", Some(0)), ("GPU-1aaa", Some(0))],
        ),
        podresources::build::devices("example.com/other", &[("x", None)]),
    ]
    .concat();
    k.set_allocatable(allocatable.clone());
    let s = source(dir.path(), 1000);
    let got = s.lookup(&pod(), "cuda", true, None).await;
    assert!(got.devices.is_some());
    let a = got.allocatable.expect("answered");
    assert_eq!(a.len(), 1, "only the configured resources: {a:?}");
    assert_eq!(
        a[0].ids,
        vec!["GPU-0aaa".to_string(), "GPU-1aaa".to_string()]
    );
    // Not asked: not given.
    assert_eq!(
        s.lookup(&pod(), "cuda", false, None).await.allocatable,
        None
    );
    // Kept for its time to live: a change within it is not seen.
    allocatable.devices = podresources::build::devices("nvidia.com/gpu", &[("GPU-0aaa", Some(0))]);
    k.set_allocatable(allocatable);
    let again = s.lookup(&pod(), "cuda", true, None).await.allocatable;
    assert_eq!(again.expect("cached")[0].ids.len(), 2);

    // A slow kubelet: no allocatable list within the deadline, and the lookup is bounded.
    k.set_behaviour(Behaviour {
        delay: Some(Duration::from_secs(5)),
        ..Behaviour::default()
    });
    let s = source(dir.path(), 200);
    let t = Instant::now();
    let got = s.lookup(&pod(), "cuda", true, None).await;
    assert_eq!(got, KubeletAnswer::default());
    assert!(
        t.elapsed() < Duration::from_millis(450),
        "{:?}",
        t.elapsed()
    );
    k.stop().await;
}
