//! NodeResourceTopology publishing against a real Kubernetes API server (the upstream
//! apiextensions-apiserver on etcd, started by hack/apiserver-up, serving the upstream CRD, so
//! a 422 from its schema validation fails these tests):
//!
//! - objects for an emulated host (packaging/hosts/vm-2s4n.yaml) are created, read back and
//!   carry the values the allocator's free resources say, in the upstream field layout;
//! - the schema is really enforced (a malformed object is refused with 422);
//! - a 409 (someone changed the object since the publisher read it) is retried with the fresh
//!   resourceVersion; hand edits (stale values, integer quantities, deleted object) are
//!   repaired at the next resync, and other controllers' labels survive;
//! - client certificates, bearer tokens (kubeconfig and service-account directory), 403 and
//!   401 are told apart and counted;
//! - the API server stopped mid-way: updates never block, failures are counted, and the
//!   object catches up after the restart;
//! - objects nri-align does not own (`nrt_apiserver/ownership.rs`): one NFD made is left
//!   untouched until deleted or taken over; NFD rewriting nri-align's object is detected and
//!   no longer fought, while a hand edit is still repaired.

mod ownership;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use nri_align::nrt::builder::{build, NrtSettings, ResourceNames, ZoneFree};
use nri_align::nrt::client::{ApiAccess, Timeouts};
use nri_align::nrt::metrics::NrtMetrics;
use nri_align::nrt::object::NodeResourceTopology;
use nri_align::nrt::publish::{PublishOptions, Publisher, Snapshot};
use nri_align::placement::{Allocator, PlacementConfig, PodInfo, Policy, Request, Scope};
use nri_align::topology::desc::HostDesc;
use nri_align::topology::{CpuSet, Topology};
use test_support::apiserver::ApiServer;

const WAIT: Duration = Duration::from_secs(60);

fn fast() -> PublishOptions {
    PublishOptions {
        debounce: Duration::from_millis(100),
        resync: Duration::from_secs(2),
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(2),
        conflict_retries: 5,
        crd_retry: Duration::from_secs(2),
    }
}

fn settings(node: &str) -> NrtSettings {
    NrtSettings {
        node_name: node.into(),
        policy: Policy::SingleNumaNode,
        scope: Scope::Container,
        reserved_cpus: CpuSet::parse_list("0").expect("cpu list"),
        resources: ResourceNames {
            gpu: Some("nvidia.com/gpu".into()),
            rdma_nic: Some("intel.com/sriov_rdma".into()),
        },
        owner: None,
        take_over_foreign: false,
    }
}

/// The emulated host and its allocator, with CPU 0 reserved as in `settings`.
fn host() -> (Arc<Topology>, Allocator) {
    let topo = Arc::new(
        HostDesc::load("vm-2s4n")
            .expect("shipped host")
            .to_topology(),
    );
    let alloc = Allocator::new(
        Arc::clone(&topo),
        PlacementConfig {
            policy: Policy::SingleNumaNode,
            reserved_cpus: CpuSet::parse_list("0").expect("cpu list"),
            ..Default::default()
        },
    );
    (topo, alloc)
}

/// Places a Guaranteed container with `cpus` CPUs, 64 MiB and a GPU (the device plugin
/// allocated GPU `gpu`; nri-align may remap it); returns the zone it landed on.
fn place(
    alloc: &mut Allocator,
    topo: &Topology,
    id: &str,
    cpus: u64,
    gpu: Option<usize>,
) -> String {
    let req = Request {
        container_id: id.into(),
        container_name: "main".into(),
        pod: PodInfo {
            uid: format!("uid-{id}"),
            namespace: "ml".into(),
            name: id.into(),
            ..Default::default()
        },
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: Some(cpus * 1000),
        memory_limit_bytes: Some(64 << 20),
        allocated_gpus: gpu
            .map(|g| topo.gpus[g].pci_bus_id.clone())
            .into_iter()
            .collect(),
        allocated_nics: vec![],
        shared_gpus: vec![],
        generic_devices: vec![],
        scheduler: None,
        hugepages: vec![],
    };
    let a = alloc.place(&req).expect("placement fits");
    let nodes: Vec<u32> = a.numa_nodes.iter().collect();
    assert_eq!(nodes.len(), 1, "single-numa-node placed {id} on {nodes:?}");
    format!("node-{}", nodes[0])
}

fn snapshot(topo: &Arc<Topology>, alloc: &Allocator) -> Snapshot {
    Snapshot {
        topology: Arc::clone(topo),
        free: alloc.free_by_node().iter().map(ZoneFree::from).collect(),
        pods: None,
    }
}

fn desired(snap: &Snapshot, s: &NrtSettings) -> NodeResourceTopology {
    build(&snap.topology, &snap.free, snap.pods.as_deref(), s).expect("builds")
}

async fn client(access: ApiAccess) -> kube::Client {
    access
        .client(Timeouts {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(5),
            total: Duration::from_secs(10),
        })
        .await
        .expect("client")
}

fn kubeconfig(path: std::path::PathBuf) -> ApiAccess {
    ApiAccess::Kubeconfig {
        path,
        context: None,
    }
}

/// Polls `f` every 100 ms until it is true or `WAIT` passes.
async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < WAIT {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {WAIT:?} waiting until {what}");
}

async fn published(p: &Publisher, generation: u64, server: &ApiServer) {
    let st = p.wait_published(generation, WAIT).await;
    assert!(
        st.published >= generation,
        "generation {generation} not published: {st:?}\nAPI server log:\n{}",
        server.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a real API server, step by step: each step checks what the steps before left in the published object"
)]
async fn publishes_reads_back_enforces_the_schema_and_repairs_edits() {
    let Some(server) = ApiServer::up("nrt-publish", "nrt_apiserver::publishes") else {
        return;
    };
    let admin = client(kubeconfig(server.path("KUBECONFIG_ADMIN"))).await;
    let api: Api<NodeResourceTopology> = Api::all(admin.clone());
    let (topo, mut alloc) = host();
    let a_zone = place(&mut alloc, &topo, "train-a", 2, Some(2)); // a whole node and its GPU
    let s = settings("worker-a");
    let metrics = NrtMetrics::default();
    let p = Publisher::spawn(admin.clone(), s.clone(), fast(), metrics.clone());

    // 1. Created, read back, in the upstream layout and with the allocator's numbers.
    let snap = snapshot(&topo, &alloc);
    let want = desired(&snap, &s);
    let g = p.update(snap);
    published(&p, g, &server).await;
    let got = api.get("worker-a").await.expect("object exists");
    assert!(
        got.content_matches(&want),
        "server has {got:#?}\nwanted {want:#?}"
    );
    let zone = |o: &NodeResourceTopology, z: &str, r: &str| {
        o.zone(z).and_then(|zz| zz.resource(r)).map(|x| {
            (
                x.capacity.clone(),
                x.allocatable.clone(),
                x.available.clone(),
            )
        })
    };
    let t = |a: &str, b: &str, c: &str| Some((a.to_string(), b.to_string(), c.to_string()));
    assert_ne!(a_zone, "node-0", "node 0 has only one allocatable CPU");
    assert_eq!(zone(&got, &a_zone, "cpu"), t("2", "2", "0"));
    assert_eq!(zone(&got, &a_zone, "memory"), t("512Mi", "512Mi", "448Mi"));
    assert_eq!(zone(&got, &a_zone, "nvidia.com/gpu"), t("1", "1", "0"));
    assert_eq!(
        zone(&got, &a_zone, "intel.com/sriov_rdma"),
        t("1", "1", "1")
    );
    assert_eq!(zone(&got, "node-0", "cpu"), t("2", "1", "1"));
    assert_eq!(zone(&got, "node-4", "memory"), t("256Mi", "256Mi", "256Mi"));
    assert_eq!(
        got.attribute("topologyManagerPolicy"),
        Some("single-numa-node")
    );
    assert_eq!(got.topology_policies, ["SingleNUMANodeContainerLevel"]);
    // The raw JSON as stored: field names and string quantities exactly as consumers parse.
    let ar = ApiResource {
        group: "topology.node.k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "topology.node.k8s.io/v1alpha2".into(),
        kind: "NodeResourceTopology".into(),
        plural: "noderesourcetopologies".into(),
    };
    let raw: Api<DynamicObject> = Api::all_with(admin.clone(), &ar);
    let raw_obj = raw.get("worker-a").await.expect("raw get");
    let z1 = &raw_obj.data["zones"][1];
    assert_eq!(z1["name"], "node-1");
    assert_eq!(z1["type"], "Node");
    assert_eq!(
        z1["costs"][0],
        serde_json::json!({"name": "node-0", "value": 12})
    );
    assert_eq!(z1["resources"][0]["name"], "cpu");
    assert_eq!(
        z1["resources"][0]["available"],
        want.zones[1].resources[0].available.as_str()
    );
    assert_eq!(z1["resources"][1]["capacity"], "512Mi");
    assert_eq!(
        metrics.failures("invalid"),
        0,
        "the server refused an object"
    );
    assert_eq!(metrics.successes("created"), 1);

    // 2. The schema is enforced: a zone without `type` and a malformed quantity get 422.
    let mut bad = want.clone();
    bad.metadata.name = Some("malformed".into());
    bad.zones[0].zone_type.clear();
    let mut bad_json = serde_json::to_value(&bad).expect("json");
    bad_json["zones"][0]
        .as_object_mut()
        .expect("zone")
        .remove("type");
    bad_json["zones"][1]["resources"][0]["available"] = "two CPUs".into();
    let bad_obj: DynamicObject = serde_json::from_value(bad_json).expect("dynamic");
    match raw.create(&PostParams::default(), &bad_obj).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains("zones[0].type"), "{}", s.message);
            assert!(s.message.contains("available"), "{}", s.message);
        }
        other => panic!("a malformed object was not refused: {other:?}"),
    }

    // 3. 409: someone edits the object (a label and a value); the publisher, holding the old
    // resourceVersion, gets Conflict, re-reads and replaces. The foreign label stays.
    let mut edited = api.get("worker-a").await.expect("get");
    edited
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("example.com/team".into(), "infra".into());
    edited.zones[0].resources[0].available = "0".into();
    api.replace("worker-a", &PostParams::default(), &edited)
        .await
        .expect("hand edit");
    let b_zone = place(&mut alloc, &topo, "train-b", 2, Some(3));
    assert_ne!(b_zone, a_zone);
    let snap = snapshot(&topo, &alloc);
    let want = desired(&snap, &s);
    let g = p.update(snap);
    published(&p, g, &server).await;
    assert!(metrics.conflicts() >= 1, "no 409 seen");
    let got = api.get("worker-a").await.expect("get");
    assert!(got.content_matches(&want), "after the conflict: {got:#?}");
    assert_eq!(zone(&got, &b_zone, "cpu"), t("2", "2", "0"));
    assert_eq!(
        got.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("example.com/team"))
            .map(String::as_str),
        Some("infra")
    );

    // 4. Hand edits without any new snapshot are repaired at the next resync: stale values
    // written as integer quantities, a bogus zone, attributes dropped.
    let replaced_before = metrics.successes("replaced");
    let mut stale = serde_json::to_value(api.get("worker-a").await.expect("get")).expect("json");
    stale["zones"][2]["resources"][0]["available"] = 2.into();
    stale["zones"][0]["name"] = "socket-0".into();
    stale["zones"][0]["type"] = "Socket".into();
    stale.as_object_mut().expect("object").remove("attributes");
    let stale_obj: DynamicObject = serde_json::from_value(stale).expect("dynamic");
    raw.replace("worker-a", &PostParams::default(), &stale_obj)
        .await
        .expect("stale edit accepted by the schema");
    eventually("the stale object is replaced", async || {
        api.get("worker-a")
            .await
            .is_ok_and(|o| o.content_matches(&want))
    })
    .await;
    // The server shows the repair a moment before the publisher counts it.
    eventually("the repair is counted", async || {
        metrics.successes("replaced") > replaced_before
    })
    .await;

    // Deleted by hand: created again.
    api.delete("worker-a", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the deleted object is created again", async || {
        api.get("worker-a")
            .await
            .is_ok_and(|o| o.content_matches(&want))
    })
    .await;
    eventually("the second creation is counted", async || {
        metrics.successes("created") == 2
    })
    .await;
    assert_eq!(metrics.failures("invalid"), 0);
    drop(p);

    // 5. Bearer tokens: the service account's token in a kubeconfig and in a service-account
    // directory (in-cluster layout) publish; a user without a rule gets 403, a wrong token 401.
    let token_metrics = NrtMetrics::default();
    let token_client = client(kubeconfig(server.path("KUBECONFIG_TOKEN"))).await;
    let tp = Publisher::spawn(
        token_client,
        settings("worker-token"),
        fast(),
        token_metrics.clone(),
    );
    let g = tp.update(snapshot(&topo, &alloc));
    published(&tp, g, &server).await;
    drop(tp);

    let sa = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        sa.path().join("token"),
        server.get("APISERVER_TOKEN_PUBLISHER"),
    )
    .expect("token");
    std::fs::copy(server.get("APISERVER_CA"), sa.path().join("ca.crt")).expect("ca");
    let in_cluster = ApiAccess::InCluster {
        server: server.get("APISERVER_URL").into(),
        dir: sa.path().into(),
    };
    let ip = Publisher::spawn(
        client(in_cluster).await,
        settings("worker-sa"),
        fast(),
        NrtMetrics::default(),
    );
    let g = ip.update(snapshot(&topo, &alloc));
    published(&ip, g, &server).await;
    drop(ip);

    for (config, reason, node) in [
        (
            server.path("KUBECONFIG_TOKEN_UNAUTHORIZED"),
            "forbidden",
            "worker-403",
        ),
        (
            server.token_kubeconfig(sa.path(), "not-a-token"),
            "unauthorized",
            "worker-401",
        ),
    ] {
        let m = NrtMetrics::default();
        let bp = Publisher::spawn(
            client(kubeconfig(config)).await,
            settings(node),
            fast(),
            m.clone(),
        );
        bp.update(snapshot(&topo, &alloc));
        eventually(&format!("a {reason} failure is counted"), async || {
            m.failures(reason) > 0
        })
        .await;
        assert_eq!(bp.status().published, 0);
        assert!(
            bp.status()
                .last_error
                .is_some_and(|e| e.starts_with(reason)),
            "{:?}",
            bp.status()
        );
        assert!(api.get_opt(node).await.expect("get").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_retries_while_the_api_server_is_down_and_catches_up() {
    let Some(server) = ApiServer::up("nrt-restart", "nrt_apiserver::restart") else {
        return;
    };
    let admin = client(kubeconfig(server.path("KUBECONFIG_ADMIN"))).await;
    let api: Api<NodeResourceTopology> = Api::all(admin.clone());
    let (topo, mut alloc) = host();
    let s = settings("worker-r");
    let metrics = NrtMetrics::default();
    let p = Publisher::spawn(admin.clone(), s.clone(), fast(), metrics.clone());
    let g = p.update(snapshot(&topo, &alloc));
    published(&p, g, &server).await;

    server.stop();
    // Updates while the server is down return at once; attempts fail and are counted.
    let mut last = 0;
    for (i, gpu) in [(1usize, 1usize), (2, 3)] {
        place(&mut alloc, &topo, &format!("job-{i}"), 1, Some(gpu));
        last = p.update(snapshot(&topo, &alloc));
    }
    eventually(
        "failures are counted while the server is down",
        async || metrics.failures("unreachable") >= 2,
    )
    .await;
    assert!(p.status().published < last, "{:?}", p.status());
    assert!(p.status().consecutive_failures >= 2);

    server.start();
    published(&p, last, &server).await;
    let want = desired(&snapshot(&topo, &alloc), &s);
    let got = api.get("worker-r").await.expect("object after the restart");
    assert!(got.content_matches(&want), "after the restart: {got:#?}");
    assert_eq!(p.status().consecutive_failures, 0);
    assert_eq!(p.status().last_error, None);
}
