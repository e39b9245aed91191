//! How soon the scheduler's view follows nri-align, end to end on containerd against the real
//! API server (hack/apiserver-up): after an admission and a release (decisions that change a
//! zone's free resources) and after a refusal, the NodeResourceTopology object on the server is
//! updated within 1 s of nri-align's answer. Times are compared on the same clock: the answer's
//! from nri-align's log line (the decision, the refusal, the release, logged as it answers), the update's from polling the server every 10 ms (an upper bound: the update may
//! land up to a poll before it is seen).
//!
//! The refusal changes no free resource; what it proves is that nri-align then reads the
//! server's copy again: the object is edited by hand first (as a stale or foreign write the
//! scheduler would read), the resync is an hour away, and the refusal has it repaired.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::api::{Api, PostParams};
use nri_align::nrt::object::NodeResourceTopology;
use test_support::apiserver::ApiServer;
use test_support::e2e::suite::{guaranteed, Enforced};
use test_support::e2e::{PodSpec, Runtime};

const NODE: &str = "e2e-refresh";
/// What the issue asks: the scheduler's next choice sees the change within a second.
const BOUND: f64 = 1.0;

/// Seconds since the epoch of an RFC 3339 UTC time (`2026-11-29T06:26:05.123456Z`), as
/// tracing writes it.
fn epoch_seconds(ts: &str) -> Option<f64> {
    let (date, time) = ts.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let mut t = time.split(':');
    let (h, min, s) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The time of the last log line of nri-align that says `message` about container
/// `container` (`container=NAME`); tracing's text lines start with the time.
fn logged_at(log: &str, message: &str, container: &str) -> Option<f64> {
    let field = format!("container={container}");
    log.lines()
        .rev()
        .filter(|l| l.contains(message) && l.split_whitespace().any(|w| w == field))
        .find_map(|l| l.split_whitespace().next().and_then(epoch_seconds))
}

struct Cluster {
    rt: tokio::runtime::Runtime,
    api: Api<NodeResourceTopology>,
}

impl Cluster {
    fn new(server: &ApiServer) -> Cluster {
        let (rt, client) = crate::admin_client(server);
        let api = {
            let _guard = rt.enter();
            Api::all(client)
        };
        Cluster { rt, api }
    }

    fn get(&self) -> Option<NodeResourceTopology> {
        self.rt.block_on(self.api.get_opt(NODE)).ok().flatten()
    }

    /// Polls until the object's resourceVersion is no longer `rv`; the time it was seen.
    fn changed_from(&self, rv: &str) -> Option<(f64, NodeResourceTopology)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(o) = self.get() {
                if o.metadata.resource_version.as_deref() != Some(rv) {
                    return Some((now(), o));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

fn rv(o: &NodeResourceTopology) -> String {
    o.metadata.resource_version.clone().unwrap_or_default()
}

/// `cpu` available per zone.
fn cpus(o: &NodeResourceTopology) -> Vec<String> {
    o.zones
        .iter()
        .map(|z| {
            z.resource("cpu")
                .map_or(String::new(), |r| r.available.clone())
        })
        .collect()
}

fn follows_each_decision_within_a_second(rt: Runtime) {
    let test = format!("e2e_nrt_refresh({})", rt.name());
    let Some(server) = ApiServer::up(&format!("e2e-nrt-refresh-{}", rt.name()), &test) else {
        return;
    };
    // The resync an hour away: only the events below can update the object.
    let config = format!(
        "metrics_address: \"127.0.0.1:0\"\npolicy: single-numa-node\n\
         nrt:\n  node_name: {NODE}\n  resync_seconds: 3600\n"
    );
    let kubeconfig = server.path("KUBECONFIG_TOKEN").display().to_string();
    let Some(e) = Enforced::builder(rt, "e2e_nrt_refresh", "e2e-nrt-refresh")
        .config(&config)
        .args(&["--kubeconfig", &kubeconfig])
        .start()
    else {
        return;
    };
    let cluster = Cluster::new(&server);
    assert!(
        test_support::e2e::wait_until(Duration::from_secs(60), || cluster.get().is_some()),
        "no object\n{}",
        e.plugin.output()
    );
    // Let the start's publishes settle: the object stays as it is for a while.
    let mut start = cluster.get().expect("object");
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let again = cluster.get().expect("object");
        if rv(&again) == rv(&start) {
            break;
        }
        start = again;
    }
    let mut report = Vec::new();
    let mut check = |what: &str, answered: Option<f64>, seen: f64| {
        let answered = answered
            .unwrap_or_else(|| panic!("{what}: no log line of the answer\n{}", e.plugin.output()));
        let took = seen - answered;
        report.push(format!("{what}: {took:.3} s"));
        assert!(
            (0.0..=BOUND).contains(&took),
            "{what}: the object was updated {took:.3} s after the answer (bound {BOUND} s)"
        );
    };

    // 1. An admission: one exclusive CPU fewer on a zone.
    let pod = e.rt.run_pod(&PodSpec::new("refresh")).expect("pod");
    let id = e.run(&pod, &guaranteed("one", 1));
    let (seen, after_admit) = cluster.changed_from(&rv(&start)).expect("updated");
    assert_ne!(cpus(&after_admit), cpus(&start));
    check(
        "admission",
        logged_at(&e.plugin.output(), " decision ", "one"),
        seen,
    );

    // 2. A refusal, after a hand edit the resync would only repair in an hour.
    let mut edited = after_admit.clone();
    for z in &mut edited.zones {
        for r in &mut z.resources {
            if r.name == "cpu" {
                r.available = "0".into();
            }
        }
    }
    let edited = cluster
        .rt
        .block_on(cluster.api.replace(NODE, &PostParams::default(), &edited))
        .expect("edit");
    let too_many = e.online().len() as i64 + 1;
    e.refused(&pod, &guaranteed("big", too_many));
    let (seen, repaired) = cluster.changed_from(&rv(&edited)).expect("repaired");
    assert_eq!(
        cpus(&repaired),
        cpus(&after_admit),
        "repaired to what is free"
    );
    check(
        "refusal",
        logged_at(&e.plugin.output(), " rejected: ", "big"),
        seen,
    );

    // 3. A release: the CPU is free again.
    e.rt.cri().remove_pod(&pod).expect("remove");
    let (seen, released) = cluster.changed_from(&rv(&repaired)).expect("updated");
    assert_eq!(cpus(&released), cpus(&start));
    let released_at = logged_at(&e.plugin.output(), " released ", &id);
    check("release", released_at, seen);
    eprintln!(
        "{test}: object updated after the answer: {}",
        report.join(", ")
    );
}

#[test]
fn containerd_2_1() {
    follows_each_decision_within_a_second(Runtime::CONTAINERD_2_1);
}

#[test]
fn epoch_seconds_reads_tracing_timestamps() {
    assert_eq!(epoch_seconds("1970-01-01T00:00:01.5Z"), Some(1.5));
    assert_eq!(epoch_seconds("2000-03-01T00:00:00Z"), Some(951_868_800.0));
    assert_eq!(epoch_seconds("bogus"), None);
}
