//! The NodeResourceTopology that `nri-align run` publishes, end to end on every real runtime
//! (containerd 1.7, 2.1, CRI-O): nri-align places containers on an emulated host shaped like
//! this machine (two fake GPUs and two RDMA NICs) and publishes to a real API server
//! (hack/apiserver-up: the upstream apiextensions-apiserver serving the upstream CRD) with the
//! service account token that server authorizes as packaging/kubernetes/rbac.yaml does.
//!
//! - After every creation and removal the object's `available` values equal nri-align's own
//!   `nri_align_free_*` metrics, zone by zone, and the metrics moved as the step implies.
//! - The pod-set fingerprint is that of the pods the test runs.
//! - The API server stopped in the middle: containers are still created and aligned, the
//!   failures are counted, and the object catches up after the restart.
//! - An object edited into nonsense by hand, or deleted, is replaced.
//! - A configuration reload changes the published policy.
//! - The server never refuses what nri-align sends: no 422 (schema), no 403 (RBAC).

use std::collections::BTreeMap;
use std::time::Duration;
use test_support::e2e;
use test_support::each_runtime;

use kube::api::{Api, DeleteParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use nri_align::nrt::fingerprint::{self, PodId};
use nri_align::nrt::object::NodeResourceTopology;
use nri_align::nrt::quantity;
use test_support::apiserver::ApiServer;
use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{metric, probe, scrape, wait_until, Pod, PodSpec, Runtime};

const NODE: &str = "e2e-worker";
const GPU: &str = "nvidia.com/gpu";
const RDMA: &str = "example.com/rdma_nic";
/// Long enough for the debounce (0.5 s), a resync (2 s) and a few backoff periods.
const CATCH_UP: Duration = Duration::from_secs(60);

/// Free resources per NUMA node: CPUs, memory bytes, GPUs, RDMA NICs.
type Free = BTreeMap<u32, [i128; 4]>;

/// The free gauges of one scrape (`node` or `numa_node` label).
fn free_from_metrics(body: &str) -> Free {
    let mut out = Free::new();
    let names = [
        "nri_align_free_cpus",
        "nri_align_free_memory_bytes",
        "nri_align_free_gpus",
        "nri_align_free_rdma_nics",
    ];
    for (i, name) in names.iter().enumerate() {
        for line in body.lines() {
            let Some(rest) = line.strip_prefix(name).and_then(|r| r.strip_prefix('{')) else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let node = labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                matches!(k, "node" | "numa_node")
                    .then(|| v.trim_matches('"').parse::<u32>().ok())
                    .flatten()
            });
            let value = value.trim().parse::<f64>().ok();
            if let (Some(node), Some(value)) = (node, value) {
                out.entry(node).or_default()[i] = value as i128;
            }
        }
    }
    out
}

/// The `available` amounts of the object, zone by zone; a device the zone does not list is 0.
fn free_from_object(obj: &NodeResourceTopology) -> Result<Free, String> {
    let mut out = Free::new();
    for z in &obj.zones {
        let id: u32 = z
            .name
            .strip_prefix("node-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("zone {:?} is not node-N", z.name))?;
        let mut row = [0i128; 4];
        for (i, name) in ["cpu", "memory", GPU, RDMA].iter().enumerate() {
            if let Some(r) = z.resource(name) {
                row[i] = quantity::parse(&r.available)
                    .ok_or_else(|| format!("{}/{name}: bad quantity {:?}", z.name, r.available))?;
            }
        }
        out.insert(id, row);
    }
    Ok(out)
}

/// The API server as the test sees it: an admin client on a runtime of its own.
struct Cluster {
    rt: tokio::runtime::Runtime,
    api: Api<NodeResourceTopology>,
    raw: Api<DynamicObject>,
}

impl Cluster {
    fn new(server: &ApiServer) -> Cluster {
        let (rt, client) = crate::admin_client(server);
        let ar = ApiResource {
            group: "topology.node.k8s.io".into(),
            version: "v1alpha2".into(),
            api_version: "topology.node.k8s.io/v1alpha2".into(),
            kind: "NodeResourceTopology".into(),
            plural: "noderesourcetopologies".into(),
        };
        let raw = {
            let _guard = rt.enter();
            Api::all_with(client.clone(), &ar)
        };
        let api = {
            let _guard = rt.enter();
            Api::all(client)
        };
        Cluster { rt, api, raw }
    }

    fn get(&self) -> Option<NodeResourceTopology> {
        self.rt.block_on(self.api.get_opt(NODE)).ok().flatten()
    }
}

/// The running daemon's side: its metrics endpoint.
struct Daemon {
    metrics: String,
}

impl Daemon {
    fn scrape(&self) -> String {
        scrape(&self.metrics).unwrap_or_else(|e| panic!("{e}"))
    }

    fn free(&self) -> Free {
        free_from_metrics(&self.scrape())
    }

    fn counter(&self, series: &str) -> f64 {
        metric(&self.scrape(), series).unwrap_or(0.0)
    }

    /// `/readyz`'s body when it answers 200.
    fn readyz(&self) -> Option<String> {
        probe(&self.metrics, "/readyz")
            .ok()
            .and_then(|(code, body)| (code == 200).then_some(body))
    }
}

/// Waits until the object's `available` values equal the free metrics; returns them.
fn in_step(step: &str, cluster: &Cluster, d: &Daemon, e: &Enforced) -> Free {
    let mut last = String::new();
    let mut agreed = Free::new();
    let ok = wait_until(CATCH_UP, || {
        let metrics = d.free();
        let Some(obj) = cluster.get() else {
            last = "no object on the server".into();
            return false;
        };
        match free_from_object(&obj) {
            Ok(published) if published == metrics => {
                agreed = metrics;
                true
            }
            Ok(published) => {
                last = format!("object {published:?}\nmetrics {metrics:?}");
                false
            }
            Err(err) => {
                last = err;
                false
            }
        }
    });
    assert!(
        ok,
        "{step}: the object did not come to equal the free metrics within {CATCH_UP:?}:\n{last}\n\
         nri-align log:\n{}",
        e.plugin.output()
    );
    agreed
}

/// `free` with `delta` added on node `node` (cpu, memory, gpu, nic).
fn moved(free: &Free, node: u32, delta: [i128; 4]) -> Free {
    let mut f = free.clone();
    if let Some(row) = f.get_mut(&node) {
        for (v, d) in row.iter_mut().zip(delta) {
            *v += d;
        }
    }
    f
}

/// Only cpu, gpu and nic columns (memory accounting is the allocator's business; it is
/// compared with the object, not predicted here).
/// Whether counter `series` passes `before` within a few seconds. The publisher counts an
/// attempt once the API server's answer is back, so the object can be visible to the test (and
/// `in_step` done) a moment before the count moves: CI saw that window once.
fn counts_past(d: &Daemon, series: &str, before: f64) -> bool {
    wait_until(Duration::from_secs(10), || d.counter(series) > before)
}

fn devices_and_cpus(f: &Free) -> Vec<(u32, i128, i128, i128)> {
    f.iter().map(|(n, r)| (*n, r[0], r[2], r[3])).collect()
}

fn fingerprint_of(pods: &[&Pod]) -> String {
    let ids: Vec<PodId> = pods
        .iter()
        .map(|p| PodId::new(p.namespace.clone(), p.name.clone()))
        .collect();
    fingerprint::sign(&ids)
}

/// Waits until the object's pod-set fingerprint is that of `pods` (a pod's sandbox may go
/// after its containers' resources came back, so the amounts can agree first).
fn pods_published(step: &str, cluster: &Cluster, pods: &[&Pod], e: &Enforced) {
    let want = fingerprint_of(pods);
    let mut last = None;
    let ok = wait_until(CATCH_UP, || {
        last = cluster
            .get()
            .and_then(|o| o.attribute(fingerprint::ATTRIBUTE).map(str::to_string));
        last.as_deref() == Some(want.as_str())
    });
    assert!(
        ok,
        "{step}: fingerprint {last:?}, want {want:?} (pods {:?})\nnri-align log:\n{}",
        pods.iter().map(|p| &p.name).collect::<Vec<_>>(),
        e.plugin.output()
    );
}

/// Waits until the object's `topologyManagerPolicy` attribute is `want`.
fn policy_published(step: &str, cluster: &Cluster, want: &str, e: &Enforced) {
    let mut policy = None;
    assert!(
        wait_until(CATCH_UP, || {
            policy = cluster
                .get()
                .and_then(|o| o.attribute("topologyManagerPolicy").map(str::to_string));
            policy.as_deref() == Some(want)
        }),
        "{step}: the object's policy is {policy:?}, want {want:?}\nnri-align log:\n{}",
        e.plugin.output()
    );
}

fn publishes_what_its_free_metrics_say(rt: Runtime) {
    let Some(server) = ApiServer::up(
        &format!("e2e-nrt-{}", rt.name()),
        &format!("e2e_nrt({})", rt.name()),
    ) else {
        return;
    };
    // GPUs are named the envvar strategy's way without a kubelet: the node vouches for the
    // variable (tests/e2e/devices.rs covers the PodResources path).
    let config = format!(
        "metrics_address: \"127.0.0.1:0\"\npolicy: single-numa-node\n\
         trust_visible_devices_env: true\nnrt:\n  node_name: {NODE}\n  \
         rdma_nic_resource: {RDMA}\n  resync_seconds: 2\n"
    );
    let kubeconfig = server.path("KUBECONFIG_TOKEN").display().to_string();
    let Some(e) = Enforced::builder(rt, "e2e_nrt", "e2e-nrt")
        .gpus(2)
        .nics(2)
        .config(&config)
        .args(&["--kubeconfig", &kubeconfig])
        .start()
    else {
        return;
    };
    let cluster = Cluster::new(&server);
    let d = Daemon {
        metrics: e.plugin.metrics_address().expect("metrics endpoint"),
    };
    let node0 = *e.host.machine.nodes.keys().next().expect("a node");
    let gpu_node = node0; // the emulated devices sit on the first node
    let gpus = e.host.gpus.len() as i128;
    let uverbs: Vec<String> = e
        .host
        .uverbs
        .iter()
        .map(|u| format!("/dev/infiniband/{u}"))
        .collect();

    // 0. Created at start: every node a zone, the devices under their resource names.
    let start = in_step("start", &cluster, &d, &e);
    assert_eq!(
        start.keys().copied().collect::<Vec<_>>(),
        e.host.machine.nodes.keys().copied().collect::<Vec<_>>()
    );
    assert_eq!(start[&gpu_node][2], gpus, "{start:?}");
    assert_eq!(start[&gpu_node][3], uverbs.len() as i128, "{start:?}");
    // (A kept instance may still hold an earlier run's object with the same amounts.)
    policy_published("start", &cluster, "single-numa-node", &e);
    let obj = cluster.get().expect("object");
    assert_eq!(
        obj.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("nri-align")
    );

    // 1. An exclusive CPU and a GPU.
    let a = e.rt.run_pod(&PodSpec::new("nrt-a")).expect("pod a");
    let g1 = e.run(
        &a,
        &guaranteed("g1", 1).env("NVIDIA_VISIBLE_DEVICES", &e.host.gpus[0].uuid),
    );
    let g1_node = e
        .host
        .machine
        .node_of(e.live(&g1).cpus[0])
        .expect("g1's node");
    let after_g1 = in_step("g1 created", &cluster, &d, &e);
    let want = moved(
        &moved(&start, g1_node, [-1, 0, 0, 0]),
        gpu_node,
        [0, 0, -1, 0],
    );
    assert_eq!(devices_and_cpus(&after_g1), devices_and_cpus(&want));

    // 2. A shared container with an RDMA NIC.
    let r1 = e.run(
        &a,
        &burstable("r1").device(&uverbs[0], &e.host.dev(&uverbs[0]).to_string_lossy(), "rwm"),
    );
    let after_r1 = in_step("r1 created", &cluster, &d, &e);
    assert_eq!(
        devices_and_cpus(&after_r1),
        devices_and_cpus(&moved(&after_g1, gpu_node, [0, 0, 0, -1]))
    );
    pods_published("r1 created", &cluster, &[&a], &e);

    // 3. The API server goes away; placement goes on.
    let published_before = d.counter("nri_align_nrt_publishes_total{outcome=\"replaced\"}");
    assert_eq!(
        d.counter("nri_align_nrt_publish_failures_total{reason=\"not-found\"}"),
        0.0,
        "{}",
        d.scrape()
    );
    server.stop();
    e.remove(&g1);
    let b = e.rt.run_pod(&PodSpec::new("nrt-b")).expect("pod b");
    let b1 = e.run(
        &b,
        &burstable("b1").env("NVIDIA_VISIBLE_DEVICES", &e.host.gpus[1].uuid),
    );
    // The second NIC taken too, so the amounts differ from what the server holds even on a
    // one-node host where g1's CPU and GPU coming back cancel g2's and b1's.
    let r2 = e.run(
        &b,
        &burstable("r2").device(&uverbs[1], &e.host.dev(&uverbs[1]).to_string_lossy(), "rwm"),
    );
    let g2 = e.run(&b, &guaranteed("g2", 1));
    let g2_cpus = e.live(&g2).cpus;
    assert_eq!(
        g2_cpus.len(),
        1,
        "g2 got one exclusive CPU while the API server was down"
    );
    // Aligned as ever: the shared containers leave g2's CPU.
    assert!(
        wait_until(Duration::from_secs(10), || [&r1, &b1]
            .iter()
            .all(|id| !e.live(id).cpus.contains(&g2_cpus[0]))
            && !e.live(&r2).cpus.contains(&g2_cpus[0])),
        "shared containers still on g2's CPU {g2_cpus:?}"
    );
    let g2_node = e.host.machine.node_of(g2_cpus[0]).expect("g2's node");
    let down = d.free();
    let want = moved(
        &moved(
            &moved(&after_r1, g1_node, [1, 0, 0, 0]),
            g2_node,
            [-1, 0, 0, 0],
        ),
        gpu_node,
        [0, 0, 0, -1], // g1's GPU back, b1's GPU taken, r2's NIC taken
    );
    assert_eq!(devices_and_cpus(&down), devices_and_cpus(&want));
    assert!(
        wait_until(Duration::from_secs(20), || {
            d.counter("nri_align_nrt_publish_failures_total{reason=\"unreachable\"}") > 0.0
        }),
        "failures while the API server is down are counted:\n{}",
        d.scrape()
    );
    // `/readyz` stays ready (containers are still aligned) and lists publishing as degraded.
    assert!(
        wait_until(Duration::from_secs(30), || d.readyz().is_some_and(|body| {
            body.starts_with("ready: ") && body.contains("\ndegraded: nrt: publishing failed ")
        })),
        "/readyz does not list publishing as degraded: {:?}",
        d.readyz()
    );

    // 4. Back: the object catches up with what happened meanwhile.
    server.start();
    let back = in_step("API server restarted", &cluster, &d, &e);
    assert_eq!(back, down);
    assert!(
        wait_until(Duration::from_secs(10), || d.readyz().is_some_and(
            |body| body.starts_with("ready: ") && !body.contains("degraded:")
        )),
        "/readyz still lists something degraded: {:?}",
        d.readyz()
    );
    pods_published("API server restarted", &cluster, &[&a, &b], &e);
    // The restarted server answers for a moment before it serves the CRD again (404 for the
    // resource path until its handler is added): an attempt in that window is counted as
    // `not-found` and retried. Only then.
    let not_found = "nri_align_nrt_publish_failures_total{reason=\"not-found\"}";
    let not_found_at_restart = d.counter(not_found);
    assert!(counts_past(
        &d,
        "nri_align_nrt_publishes_total{outcome=\"replaced\"}",
        published_before
    ));

    // 5. Edited into nonsense by hand (stale amounts as integers, a zone renamed to a socket,
    // the attributes gone): replaced at the next resync. Deleted: created again.
    let replaced = d.counter("nri_align_nrt_publishes_total{outcome=\"replaced\"}");
    // The publisher resyncs every 2 s: an edit racing it gets a 409 and is made again on the
    // latest version, as any client would.
    let mut edit = Err(String::from("not tried"));
    for _ in 0..20 {
        let obj = cluster.get().expect("object");
        let mut junk = serde_json::to_value(&obj).expect("json");
        junk["zones"][0]["resources"][0]["available"] = 999.into();
        junk["zones"][0]["name"] = "socket-0".into();
        junk["zones"][0]["type"] = "Socket".into();
        junk.as_object_mut().expect("object").remove("attributes");
        let junk: DynamicObject = serde_json::from_value(junk).expect("dynamic");
        edit = match cluster
            .rt
            .block_on(cluster.raw.replace(NODE, &PostParams::default(), &junk))
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(s.message),
            Err(err) => panic!("the schema takes the hand edit: {err}"),
        };
        if edit.is_ok() {
            break;
        }
    }
    edit.expect("the hand edit lands within 20 conflicts");
    assert_eq!(in_step("hand edit", &cluster, &d, &e), down);
    assert!(counts_past(
        &d,
        "nri_align_nrt_publishes_total{outcome=\"replaced\"}",
        replaced
    ));
    // (A kept instance may hold the object of an earlier run: compare with the count before.)
    let created = d.counter("nri_align_nrt_publishes_total{outcome=\"created\"}");
    cluster
        .rt
        .block_on(cluster.api.delete(NODE, &DeleteParams::default()))
        .expect("delete");
    assert_eq!(in_step("deleted by hand", &cluster, &d, &e), down);
    assert!(counts_past(
        &d,
        "nri_align_nrt_publishes_total{outcome=\"created\"}",
        created
    ));

    // 6. A reload (SIGHUP) to another policy: the published policy follows, the amounts stay.
    e2e::align::write_private(
        &e.config,
        &config.replace("single-numa-node", "best-effort"),
    )
    .expect("config");
    e.plugin.signal(nix::sys::signal::Signal::SIGHUP);
    policy_published("reloaded", &cluster, "best-effort", &e);
    assert_eq!(in_step("reloaded", &cluster, &d, &e), down);

    // 7. Everything removed: back where it started, with no pods in the fingerprint.
    for pod in [&a, &b] {
        e.rt.cri().remove_pod(pod).expect("remove pod");
    }
    assert_eq!(in_step("all removed", &cluster, &d, &e), start);
    pods_published("all removed", &cluster, &[], &e);

    // The server never refused an object, and the shipped RBAC covered every call.
    assert_eq!(d.counter(not_found), not_found_at_restart, "{}", d.scrape());
    for reason in ["invalid", "forbidden", "unauthorized", "build"] {
        let series = format!("nri_align_nrt_publish_failures_total{{reason=\"{reason}\"}}");
        assert_eq!(d.counter(&series), 0.0, "{series}:\n{}", d.scrape());
    }
}

each_runtime!(publishes_what_its_free_metrics_say);
