//! `evict_refused_after` end to end on containerd: nri-align refuses a container, and once the
//! refusals have lasted the window it evicts the pod through the API server (hack/apiserver-up)
//! with the service account token that server authorizes as packaging/kubernetes/rbac.yaml and
//! components/evict do. That server serves custom resources only, so the pod and its eviction
//! go to its stand-ins (hack/apiserver/stand-ins/: a Pod CRD for the ownerReferences read, an
//! Eviction CRD built from the upstream `policy/v1` schema that validates the request, strict
//! field validation on), and the test plays the kubelet's part after an eviction (the pod's
//! sandbox is removed).
//!
//! - The pod with a controller owner gets exactly one Eviction, naming it and its UID; the
//!   one without gets none; both outcomes are counted.
//! - No second eviction comes in further windows once the pod is gone.

use std::time::{Duration, Instant};

use kube::api::{Api, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::json;
use test_support::apiserver::ApiServer;
use test_support::e2e::suite::{guaranteed, Enforced};
use test_support::e2e::{metric, scrape, wait_until, PodSpec, Runtime};

const NS: &str = "default";
/// The window: short, so the test is, and well above the time one refusal takes.
const WINDOW: Duration = Duration::from_secs(3);

/// The admin client and the two stand-in resources.
struct Stand {
    rt: tokio::runtime::Runtime,
    pods: Api<DynamicObject>,
    evictions: Api<DynamicObject>,
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

impl Stand {
    fn new(server: &ApiServer) -> Stand {
        let (rt, client) = crate::admin_client(server);
        let _guard = rt.enter();
        let pods =
            Api::namespaced_with(client.clone(), NS, &resource("core.k8s.io", "Pod", "pods"));
        let evictions = Api::namespaced_with(
            client,
            NS,
            &resource("policy.k8s.io", "Eviction", "evictions"),
        );
        drop(_guard);
        Stand {
            rt,
            pods,
            evictions,
        }
    }

    /// Creates pod `name` (owned by a ReplicaSet as its controller when `owned`); returns the
    /// UID the server gave it.
    fn pod(&self, name: &str, owned: bool) -> String {
        let mut meta = json!({"name": name, "namespace": NS});
        if owned {
            meta["ownerReferences"] = json!([{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-rs"),
                "uid": "6a1f8f3e-0000-4000-8000-000000000001", "controller": true,
            }]);
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "core.k8s.io/v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }))
        .expect("pod object");
        let made = self
            .rt
            .block_on(self.pods.create(&PostParams::default(), &obj))
            .unwrap_or_else(|e| panic!("create stand-in pod {name}: {e}"));
        made.metadata.uid.expect("uid")
    }

    fn evictions(&self) -> Vec<DynamicObject> {
        self.rt
            .block_on(self.evictions.list(&ListParams::default()))
            .expect("list evictions")
            .items
    }
}

fn counted(metrics: &str, outcome: &str) -> f64 {
    let body = scrape(metrics).unwrap_or_else(|e| panic!("{e}"));
    metric(
        &body,
        &format!("nri_align_evictions_total{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or(0.0)
}

fn evicts_once_only_pods_with_a_controller(rt: Runtime) {
    let test = format!("e2e_evict({})", rt.name());
    let Some(server) = ApiServer::up(&format!("e2e-evict-{}", rt.name()), &test) else {
        return;
    };
    let config = format!(
        "metrics_address: \"127.0.0.1:0\"\nevict_refused_after: {}s\nnrt:\n  node_name: e2e-evict\n",
        WINDOW.as_secs()
    );
    let kubeconfig = server.path("KUBECONFIG_TOKEN").display().to_string();
    let Some(e) = Enforced::builder(rt, "e2e_evict", "e2e-evict")
        .config(&config)
        .args(&["--kubeconfig", &kubeconfig, "--eviction-stand-ins"])
        .start()
    else {
        return;
    };
    let stand = Stand::new(&server);
    let metrics = e.plugin.metrics_address().expect("metrics endpoint");
    let too_many = e.online().len() as i64 + 1;

    let owned_uid = stand.pod("owned", true);
    let orphan_uid = stand.pod("orphan", false);
    let owned =
        e.rt.run_pod(&PodSpec::new("owned").uid(&owned_uid))
            .expect("pod owned");
    let orphan =
        e.rt.run_pod(&PodSpec::new("orphan").uid(&orphan_uid))
            .expect("pod orphan");
    let refused_at = Instant::now();
    let msg = e.refused(&owned, &guaranteed("big", too_many));
    assert!(msg.contains("nri-align"), "{msg}");
    e.refused(&orphan, &guaranteed("big", too_many));

    // Once the window has passed: the owned pod's eviction, the orphan counted.
    let mut seen = Vec::new();
    let ok = wait_until(WINDOW * 5, || {
        seen = stand.evictions();
        !seen.is_empty() && counted(&metrics, "no-controller") >= 1.0
    });
    assert!(
        ok,
        "no eviction within {:?}: {seen:?}\nnri-align log:\n{}",
        WINDOW * 5,
        e.plugin.output()
    );
    assert!(
        refused_at.elapsed() >= WINDOW,
        "evicted before the window had passed"
    );
    assert_eq!(seen.len(), 1, "{seen:?}");
    let ev = &seen[0];
    assert_eq!(ev.metadata.name.as_deref(), Some("owned"));
    assert_eq!(
        ev.data["deleteOptions"]["preconditions"]["uid"],
        json!(owned_uid),
        "{ev:?}"
    );
    assert_eq!(counted(&metrics, "evicted"), 1.0);
    assert_eq!(counted(&metrics, "failed"), 0.0, "{}", e.plugin.output());

    // The kubelet's part: the evicted pod's sandbox goes. Two more windows: nothing new for
    // it, and the orphan is looked at again at most once per window, never evicted.
    e.rt.cri().remove_pod(&owned).expect("remove owned");
    std::thread::sleep(WINDOW * 2 + Duration::from_secs(1));
    let after = stand.evictions();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(counted(&metrics, "evicted"), 1.0);
    let orphan_looks = counted(&metrics, "no-controller");
    let windows = refused_at.elapsed().as_secs_f64() / WINDOW.as_secs_f64();
    assert!(
        orphan_looks >= 2.0 && orphan_looks <= windows.floor(),
        "orphan looked at {orphan_looks} times in {windows:.1} windows"
    );
    assert_eq!(counted(&metrics, "failed"), 0.0, "{}", e.plugin.output());
}

#[test]
fn containerd_2_1() {
    evicts_once_only_pods_with_a_controller(Runtime::CONTAINERD_2_1);
}
