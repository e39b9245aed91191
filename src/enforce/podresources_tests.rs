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
