//! `packaging/monitoring/` names only what the daemon exports: every metric the Grafana
//! dashboard and the Prometheus alerting rules use is one a running `nri-align run` serves
//! (scraped from its `/metrics`, series names derived from the `# TYPE` lines as Prometheus
//! derives them). A family with labels shows in a scrape only once it has a series (an
//! admission, a refusal, a publish), which a daemon without a runtime or an API server never
//! makes: those families are taken from their registrations in the daemon's source, with the
//! same suffix rules, and the scrape must agree with the source on every family it does show.
//! The dashboard also has the fields Grafana's dashboard model requires.
//! promtool itself checks the rules and fires them in their unit tests (`hack/check-monitoring`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use test_support::daemon::start_daemon;
use test_support::e2e::scrape;

fn monitoring(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/monitoring")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `nri_align_*` name in `text`.
fn names_used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("nri_align_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The series names a scrape can hold, from its `# TYPE NAME KIND` lines: a counter's
/// `_total` (and `_created`), a histogram's `_bucket`, `_sum` and `_count`, an info's `_info`,
/// a gauge's own name.
fn exported(body: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        out.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    out
}

/// The families the daemon's registry declares: `register("NAME", "help", metric)` in the
/// files of src/metrics and src/evict/metrics.rs (under `nri_align_`), the NodeResourceTopology
/// ones under `nri_align_nrt_`, the CDI spec registry's under `nri_align_cdi_`,
/// with the kind read from the metric's type a few lines below.
fn registered() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<(PathBuf, &str)> = std::fs::read_dir(root.join("src/metrics"))
        .expect("src/metrics")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        // Tests register stand-in families of their own.
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name != "tests.rs" && !name.ends_with("_tests.rs")
        })
        .map(|p| (p, "nri_align_"))
        .collect();
    files.push((root.join("src/nrt/metrics.rs"), "nri_align_nrt_"));
    files.push((root.join("src/evict/metrics.rs"), "nri_align_"));
    files.push((root.join("src/host/cdi/metrics.rs"), "nri_align_cdi_"));
    for (file, prefix) in files {
        let text = std::fs::read_to_string(&file).expect("metrics source");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("register(") {
            rest = &rest[at + "register(".len()..];
            let Some(name) = rest
                .trim_start()
                .strip_prefix('"')
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            out.insert(format!("{prefix}{name}"));
        }
    }
    out
}

#[test]
fn the_dashboard_and_the_alerts_use_only_metrics_the_daemon_exports() {
    let dir = tempfile::tempdir().expect("tmp");
    let daemon = start_daemon(dir.path(), &dir.path().join("state"));
    let addr = daemon.metrics_address().expect("the daemon serves metrics");
    let body = scrape(&addr).expect("scrape");
    let mut exported = exported(&body);
    let families = registered();
    // The source's list is the registry's: every family the scrape shows is in it.
    for line in body.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = line.split_whitespace().next().unwrap_or_default();
        assert!(
            families.contains(name),
            "{name} is served but not found in the source"
        );
    }
    assert!(families.len() >= 18, "{families:?}");
    for family in &families {
        for suffix in ["", "_total", "_bucket", "_sum", "_count", "_info"] {
            exported.insert(format!("{family}{suffix}"));
        }
    }

    for file in ["dashboard.json", "alerts.yaml"] {
        let used = names_used(&monitoring(file));
        assert!(used.len() >= 5, "{file} uses {used:?}");
        let unknown: Vec<_> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics the daemon does not export: {unknown:?}\n{body}"
        );
    }
}

#[test]
fn the_dashboard_has_what_grafanas_dashboard_model_requires() {
    let dash: serde_json::Value =
        serde_json::from_str(&monitoring("dashboard.json")).expect("JSON");
    for key in ["title", "uid"] {
        assert!(
            dash[key].as_str().is_some_and(|s| !s.is_empty()),
            "dashboard {key}"
        );
    }
    assert!(
        dash["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    let vars = dash["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let var_names: Vec<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "panels");
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for p in panels {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} used twice");
        let kind = p["type"].as_str().expect("panel type");
        assert!(
            ["row", "timeseries", "stat", "gauge", "table"].contains(&kind),
            "{kind}"
        );
        assert!(
            p["title"].as_str().is_some_and(|t| !t.is_empty()),
            "panel {id} title"
        );
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().expect("gridPos"));
        assert!(w > 0 && h > 0 && x + w <= 24, "panel {id} gridPos {g}");
        // No two panels cover the same cell of Grafana's 24-column grid.
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "panel {id} overlaps another at ({cx}, {cy})"
                );
            }
        }
        if kind == "row" {
            continue;
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} has no query");
        for t in targets {
            assert!(t["refId"].as_str().is_some(), "panel {id} refId");
            let expr = t["expr"].as_str().expect("expr");
            assert!(expr.contains("nri_align_"), "panel {id}: {expr}");
            // Every dashboard variable a query names is defined.
            for var in expr.split('$').skip(1) {
                let name: String = var
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    name.starts_with("__") || var_names.contains(&name.as_str()),
                    "panel {id} uses ${name}, not a dashboard variable"
                );
            }
        }
    }
}

/// The label that names a node: what components/monitoring's PodMonitor writes the pod's node
/// name into, and what the dashboard and the alerts select and group by (`instance` is the
/// host's address and port on the host network, which no operator recognises).
const NODE_LABEL: &str = "node";

#[test]
fn the_dashboard_and_the_alerts_name_nodes_by_their_node_name() {
    let dash: serde_json::Value =
        serde_json::from_str(&monitoring("dashboard.json")).expect("JSON");
    let vars = dash["templating"]["list"].as_array().expect("variables");
    let var = vars
        .iter()
        .find(|v| v["label"] == "Node")
        .expect("a Node variable");
    assert_eq!(var["name"], NODE_LABEL);
    assert_eq!(
        var["definition"],
        format!("label_values(nri_align_build_info, {NODE_LABEL})")
    );
    let filter = format!("{NODE_LABEL}=~\"${NODE_LABEL}\"");
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("expr");
            assert!(expr.contains(&filter), "panel {}: {expr}", p["id"]);
        }
    }
    for file in ["dashboard.json", "alerts.yaml", "alerts_test.yaml"] {
        assert!(
            !monitoring(file).contains("instance"),
            "{file} still names nodes by `instance`"
        );
    }
    let alerts = monitoring("alerts.yaml");
    assert!(alerts.contains(&format!("$labels.{NODE_LABEL}")));
    assert!(alerts.contains(&format!("by ({NODE_LABEL}")));
}

/// components/monitoring adds one PodMonitor and nothing else; it selects the pods of every
/// nri-align DaemonSet (components/gpu's too) in their namespace, scrapes the port the
/// DaemonSet names for metrics at /metrics, and writes the pod's node name into NODE_LABEL.
#[test]
fn the_monitoring_component_scrapes_every_nri_align_pod_labelled_by_node() {
    use test_support::e2e::daemonset::render;
    let Some(with) = render(&["components/gpu", "components/monitoring"]).expect("kustomize")
    else {
        test_support::skip::skip(
            "the_monitoring_component_scrapes_every_nri_align_pod_labelled_by_node",
            "kubectl not installed: components/monitoring not rendered",
        );
        return;
    };
    let without = render(&["components/gpu"])
        .expect("kustomize")
        .expect("rendered");
    let (monitors, rest): (Vec<_>, Vec<_>) =
        with.into_iter().partition(|o| o["kind"] == "PodMonitor");
    assert_eq!(rest, without, "the component changes nothing else");
    assert_eq!(monitors.len(), 1);
    let pm = &monitors[0];
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(pm["metadata"]["namespace"], "nri-align");
    assert_eq!(
        pm["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!(["nri-align"])
    );
    let selector = pm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    let endpoints = pm["spec"]["podMetricsEndpoints"]
        .as_array()
        .expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    let ep = &endpoints[0];
    assert_eq!(ep["path"], "/metrics");
    let daemonsets: Vec<_> = rest.iter().filter(|o| o["kind"] == "DaemonSet").collect();
    assert_eq!(daemonsets.len(), 2);
    for ds in daemonsets {
        let template = &ds["spec"]["template"];
        for (k, v) in selector {
            assert_eq!(
                &template["metadata"]["labels"][k], v,
                "{}",
                ds["metadata"]["name"]
            );
        }
        let ports = template["spec"]["containers"][0]["ports"]
            .as_array()
            .expect("ports");
        assert!(
            ports.iter().any(|p| p["name"] == ep["port"]),
            "{} has no port {}",
            ds["metadata"]["name"],
            ep["port"]
        );
    }
    assert_eq!(
        ep["relabelings"],
        serde_json::json!([{
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": NODE_LABEL,
        }])
    );
}

#[test]
fn docs_usage_lists_every_metric_the_daemon_registers_once() {
    let usage =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/usage.md"))
            .expect("docs/usage.md");
    let start = usage
        .find("- Prometheus (`metrics_address`):")
        .expect("the metric list of docs/usage.md");
    let end = usage[start + 2..]
        .find("\n- ")
        .map_or(usage.len(), |e| start + 2 + e);
    let list = &usage[start..end];
    // Each name once: the list is what an operator reads to find a metric.
    let mut seen = BTreeSet::new();
    let mut rest = list;
    while let Some(at) = rest.find("nri_align_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        assert!(
            seen.insert(&tail[..len]),
            "{} is listed twice",
            &tail[..len]
        );
        rest = &tail[len..];
    }
    // The families, as registered (a family's series carry `_total` and the like).
    let family = |name: &str| {
        ["_total", "_bucket", "_sum", "_count", "_info"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name)
            .to_string()
    };
    let listed: BTreeSet<String> = names_used(list).iter().map(|n| family(n)).collect();
    assert_eq!(
        listed,
        registered(),
        "docs/usage.md's metric list and the registered families differ"
    );
}
