//! What publishing NodeResourceTopology costs the node and the API server: the release
//! `nri-align run` on the emulated 1024-CPU host (`numa16-1024`), driven through its NRI socket
//! by the simulated runtime of `daemon_cost`, publishing to a real API server
//! (hack/apiserver-up: the upstream apiextensions-apiserver with the upstream CRD, the
//! publisher's service-account token, as the NRT end-to-end tests use it).
//!
//! Each round runs the same work twice, one daemon after the other: publishing off (no API
//! access) and publishing on (`--kubeconfig`). Each daemon is filled to LIVE live containers
//! (1,000; `NRI_ALIGN_BENCH_COST_LIVE`), left to settle, then does CHURN creates (1,000;
//! `NRI_ALIGN_BENCH_COST_CHURN`), each followed by the removal of the oldest container of its
//! kind, and waits one debounce window and a second more so the last change's update lands
//! inside the measurement. Printed per arm: the daemon's CPU time per 1,000 creates and removes
//! (`utime + stime` of `/proc/PID/stat` and the threads' `schedstat`); the publisher's share is
//! the difference of the two arms (it runs as a task on the daemon's tokio workers, so no
//! thread of its own measures it). The API calls are counted twice: on the server
//! (`apiserver_request_total` of resource `noderesourcetopologies`, by verb, read from its
//! `/metrics` before and after) and by the daemon (`nri_align_nrt_publish_attempts_total`). The
//! publisher is debounced (one update per window at most: a burst of changes publishes once,
//! the latest), so the writes (PUT and POST) may not exceed the window's wall time divided by
//! the debounce, plus one; the bench fails if they do.
//!
//! `NRI_ALIGN_BENCH_NRT_ROUNDS=2` the rounds. Skipped, loudly, where no API server can be
//! built (test_support::apiserver).
//!
//! `cargo bench --bench nrt_cost`

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use test_support::apiserver::ApiServer;
use test_support::bench::{self, load, BoxError, Connection};
use test_support::e2e::{metric, scrape};

use test_support::bench::daemon::{setup, Daemon, Node, Setup, Usage};

/// The node name the daemon publishes under.
const NODE: &str = "bench-nrt-node";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one arm measured over its window (the churn and the debounce tail after it).
#[derive(Default, Clone)]
struct Arm {
    /// CPU seconds by `utime + stime`.
    cpu_s: f64,
    /// CPU seconds by the live threads' `schedstat`.
    run_s: f64,
    /// The churn's wall time alone, and the whole window's.
    churn_s: f64,
    window_s: f64,
    /// The daemon's reconcile attempts.
    attempts: f64,
    /// The server's requests on `noderesourcetopologies`, by verb.
    requests: BTreeMap<String, f64>,
}

impl Arm {
    fn writes(&self) -> f64 {
        ["PUT", "POST", "PATCH"]
            .iter()
            .filter_map(|v| self.requests.get(*v))
            .fold(0.0, |a, b| a + b)
    }

    fn calls(&self) -> f64 {
        self.requests.values().fold(0.0, |a, b| a + b)
    }
}

/// The API server's `apiserver_request_total` of `noderesourcetopologies`, summed by verb.
async fn server_requests(client: &kube::Client) -> Result<BTreeMap<String, f64>, BoxError> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((labels, value)) = line
            .strip_prefix("apiserver_request_total{")
            .and_then(|r| r.rsplit_once("} "))
        else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        if label("resource").as_deref() != Some("noderesourcetopologies") {
            continue;
        }
        let verb = label("verb").unwrap_or_default();
        *out.entry(verb).or_insert(0.0) += value.trim().parse::<f64>()?;
    }
    Ok(out)
}

fn since(now: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    now.iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

fn free_port() -> Result<u16, BoxError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn attempts(addr: &str) -> f64 {
    scrape(addr)
        .ok()
        .and_then(|body| metric(&body, "nri_align_nrt_publish_attempts_total"))
        .unwrap_or(0.0)
}

struct Plan<'a> {
    live: usize,
    churn: usize,
    debounce: Duration,
    kubeconfig: &'a Path,
    client: &'a kube::Client,
}

/// One daemon: filled, settled, then the measured churn and its debounce tail.
async fn arm(
    setup: &mut Setup,
    plan: &Plan<'_>,
    publish: bool,
    tag: &str,
) -> Result<Arm, BoxError> {
    let port = free_port()?;
    let config = setup.dir.join(format!("config-{tag}.yaml"));
    std::fs::write(
        &config,
        format!(
            "log_format: json\nlog_level: info\nmetrics_address: \"127.0.0.1:{port}\"\n\
             nrt:\n  node_name: {NODE}\n"
        ),
    )?;
    setup.config = config;
    let sock = setup.dir.join("nri.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = bench::listen(&sock)?;
    let extra: Vec<&OsStr> = if publish {
        vec![OsStr::new("--kubeconfig"), plan.kubeconfig.as_os_str()]
    } else {
        Vec::new()
    };
    let state = setup.dir.join(format!("state-{tag}"));
    let daemon = Daemon::start_with(setup, &state, &format!("{tag}.log"), &extra)?;
    let mut conn = Connection::accept(&listener).await?;
    conn.register_and_configure().await?;
    conn.synchronize(&[], &[], 500).await?;
    let mut node = Node::default();
    while node.len() < plan.live {
        node.create(&conn).await?;
    }
    // The fill's last update lands, and start-up's after-effects pass, before the window.
    tokio::time::sleep(plan.debounce + Duration::from_secs(2)).await;
    let addr = format!("127.0.0.1:{port}");
    let (attempts0, requests0) = (attempts(&addr), server_requests(plan.client).await?);
    let before = Usage::of(daemon.pid());
    let t = Instant::now();
    for _ in 0..plan.churn {
        let s = node.create(&conn).await?;
        node.remove_oldest(&conn, s.exclusive).await?;
    }
    let churn_s = t.elapsed().as_secs_f64();
    // The last change's update is part of the work: wait for it (one debounce, and the call).
    tokio::time::sleep(plan.debounce + Duration::from_secs(1)).await;
    let (cpu_s, threads) = Usage::of(daemon.pid()).since(&before);
    let window_s = t.elapsed().as_secs_f64();
    let requests = since(&server_requests(plan.client).await?, &requests0);
    let attempts = attempts(&addr) - attempts0;
    conn.close().await;
    drop(listener);
    daemon.stop();
    Ok(Arm {
        cpu_s,
        run_s: threads.values().map(|t| t.run_ns as f64 / 1e9).sum(),
        churn_s,
        window_s,
        attempts,
        requests,
    })
}

/// The median; of an even count, the mean of the middle two (two rounds: their mean).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "the bench's whole run: one block per row of the table it prints, in the order printed"
)]
fn main() -> Result<(), BoxError> {
    // `cargo test --benches` runs bench targets without --bench: nothing to time then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let Some(server) = ApiServer::up("bench-nrt", "nrt_cost") else {
        return Ok(());
    };
    let live = env_or("NRI_ALIGN_BENCH_COST_LIVE", 1000) as usize;
    let churn = env_or("NRI_ALIGN_BENCH_COST_CHURN", 1000).max(1) as usize;
    let rounds = env_or("NRI_ALIGN_BENCH_NRT_ROUNDS", 2).max(1) as usize;
    let tmp = tempfile::tempdir()?;
    let mut setup = setup(tmp.path())?;
    let kubeconfig = server.token_kubeconfig(tmp.path(), server.get("APISERVER_TOKEN_PUBLISHER"));
    let debounce = nri_align::nrt::PublishOptions::default().debounce;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "daemon: {}; host numa16-1024 (emulated); API server {} ({}); {live} live, {churn} \
         creates + removes per arm, debounce {debounce:?}; load {} at start",
        setup.binary.display(),
        server.get("APISERVER_URL"),
        server.get("APISERVER_VERSION"),
        load()
    );
    let arms = rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(server.path("KUBECONFIG_ADMIN"))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        let client = kube::Client::try_from(cfg)?;
        let plan = Plan {
            live,
            churn,
            debounce,
            kubeconfig: &kubeconfig,
            client: &client,
        };
        let mut arms: Vec<(Arm, Arm)> = Vec::new();
        for round in 0..rounds {
            let off = arm(&mut setup, &plan, false, &format!("off-{round}")).await?;
            let on = arm(&mut setup, &plan, true, &format!("on-{round}")).await?;
            arms.push((off, on));
        }
        Ok::<_, BoxError>(arms)
    })?;
    let per_1000 = 1000.0 / churn as f64;
    println!(
        "\n| round | publishing | CPU per 1,000 (utime+stime / schedstat) | churn wall | window \
         | attempts | API calls (by verb) | writes | most writes the debounce allows |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for (round, (off, on)) in arms.iter().enumerate() {
        for (name, a) in [("off", off), ("on", on)] {
            let allowed = (a.window_s / debounce.as_secs_f64()).floor() + 1.0;
            let verbs: Vec<String> = a.requests.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!(
                "| {round} | {name} | {:.0} / {:.0} ms | {:.1} s | {:.1} s | {} | {} | {} | {} |",
                a.cpu_s * 1e3 * per_1000,
                a.run_s * 1e3 * per_1000,
                a.churn_s,
                a.window_s,
                a.attempts,
                if verbs.is_empty() {
                    "0".into()
                } else {
                    verbs.join(", ")
                },
                a.writes(),
                allowed
            );
            failed |= a.writes() > allowed;
        }
    }
    let off_cpu = median(arms.iter().map(|(o, _)| o.cpu_s * per_1000).collect());
    let on_cpu = median(arms.iter().map(|(_, o)| o.cpu_s * per_1000).collect());
    let diff = median(
        arms.iter()
            .map(|(off, on)| (on.run_s - off.run_s) * per_1000)
            .collect(),
    );
    let calls = median(arms.iter().map(|(_, o)| o.calls() * per_1000).collect());
    let writes = median(arms.iter().map(|(_, o)| o.writes() * per_1000).collect());
    println!(
        "\nPer 1,000 creates + removes at {live} live (medians of {rounds} rounds): daemon CPU \
         {:.0} ms without publishing, {:.0} ms with it (utime+stime); the publisher's share \
         (schedstat, on - off, same round) {:.0} ms = {:.1} % of the daemon's; {calls:.0} API \
         calls, {writes:.0} of them writes; load at end {}",
        off_cpu * 1e3,
        on_cpu * 1e3,
        diff * 1e3,
        diff / off_cpu.max(1e-9) * 100.0,
        load()
    );
    if failed {
        return Err("more writes than one per debounce window".into());
    }
    Ok(())
}
