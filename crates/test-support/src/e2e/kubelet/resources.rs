//! The kubelet's resource arithmetic: QoS class, pod totals with init and sidecar containers,
//! CPU shares and CFS quota, oom_score_adj, hugepage limits, and the `LinuxContainerResources`
//! it sends for a container and for the sandbox.
//!
//! Sources (kubernetes/kubernetes, 1.33/1.34): `pkg/kubelet/cm/helpers_linux.go`
//! (`MilliCPUToShares`, `MilliCPUToQuota`, the constants), `pkg/kubelet/kuberuntime/
//! kuberuntime_container_linux.go` (`calculateLinuxResources`, `generateLinuxContainerResources`,
//! `GetHugepageLimitsFromResources`, swap), `kuberuntime_sandbox_linux.go`
//! (`calculateSandboxResources`, `convertOverheadToLinuxResources`), `pkg/kubelet/qos/policy.go`
//! (`GetContainerOOMScoreAdjust`), `pkg/apis/core/v1/helper/qos` (`GetPodQOS`),
//! `staging/src/k8s.io/component-helpers/resource/helpers.go` (`PodRequests`, `PodLimits`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::quantity::{q, Quantity};

/// `MinShares`: what 0 (or no) CPU request gets.
pub const MIN_SHARES: i64 = 2;
/// `MaxShares`: the kernel's ceiling.
pub const MAX_SHARES: i64 = 262_144;
/// `SharesPerCPU`.
pub const SHARES_PER_CPU: i64 = 1024;
/// `QuotaPeriod`: 100 ms in µs (the `CPUCFSQuotaPeriod` gate is off by default).
pub const QUOTA_PERIOD: i64 = 100_000;
/// `MinQuotaPeriod`: the smallest quota, 1 ms.
pub const MIN_QUOTA: i64 = 1_000;
/// `guaranteedOOMScoreAdj` (also node-critical pods).
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// `besteffortOOMScoreAdj`.
pub const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// `schedulerutil.DefaultMemoryRequest`: what a missing memory request counts as when the
/// kubelet compares a sidecar with the app containers.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A pod's QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Requests equal limits for CPU and memory in every container.
    Guaranteed,
    /// Anything between.
    Burstable,
    /// No CPU or memory request or limit anywhere.
    BestEffort,
}

impl Qos {
    /// The QoS level in the cgroup tree (`kubepods/<level>/pod<uid>`; Guaranteed pods sit
    /// directly under `kubepods`).
    pub fn cgroup_level(self) -> Option<&'static str> {
        match self {
            Qos::Guaranteed => None,
            Qos::Burstable => Some("burstable"),
            Qos::BestEffort => Some("besteffort"),
        }
    }
}

/// Requests and limits of a container (or of the pod, or its overhead), by resource name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    /// `resources.requests`.
    pub requests: BTreeMap<String, String>,
    /// `resources.limits`.
    pub limits: BTreeMap<String, String>,
}

impl Resources {
    /// No requests, no limits.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds a request.
    pub fn request(mut self, name: &str, quantity: &str) -> Self {
        self.requests.insert(name.into(), quantity.into());
        self
    }

    /// Adds a limit.
    pub fn limit(mut self, name: &str, quantity: &str) -> Self {
        self.limits.insert(name.into(), quantity.into());
        self
    }

    /// Request and limit alike (a Guaranteed-shaped resource).
    pub fn both(self, name: &str, quantity: &str) -> Self {
        self.request(name, quantity).limit(name, quantity)
    }

    /// What the API server stores: a limit without a request makes the request equal to it
    /// (`SetDefaults_ResourceRequirements`... the kubelet repeats this for old objects).
    pub fn defaulted(&self) -> Self {
        let mut out = self.clone();
        for (k, v) in &self.limits {
            out.requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
        out
    }

    /// The request of `name`, if present.
    pub fn req(&self, name: &str) -> Option<Quantity> {
        self.requests.get(name).map(|s| q(s))
    }

    /// The limit of `name`, if present.
    pub fn lim(&self, name: &str) -> Option<Quantity> {
        self.limits.get(name).map(|s| q(s))
    }

    fn qos_list(map: &BTreeMap<String, String>) -> BTreeMap<&str, Quantity> {
        map.iter()
            .filter(|(k, _)| k.as_str() == "cpu" || k.as_str() == "memory")
            .map(|(k, v)| (k.as_str(), q(v)))
            .filter(|(_, v)| !v.is_zero())
            .collect()
    }
}

/// `MilliCPUToShares`.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli * SHARES_PER_CPU / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// `MilliCPUToQuota` with the default period.
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli * period / 1000).max(MIN_QUOTA)
}

/// `GetPodQOS` over the containers' (defaulted) resources: only `cpu` and `memory` count.
/// With pod-level resources set, those alone decide.
pub fn pod_qos<'a>(
    containers: impl IntoIterator<Item = &'a Resources>,
    pod: Option<&'a Resources>,
) -> Qos {
    let all: Vec<&Resources> = match pod {
        Some(p) => vec![p],
        None => containers.into_iter().collect(),
    };
    let mut requests: BTreeMap<&str, (u128, u128)> = BTreeMap::new();
    let mut limits: BTreeMap<&str, (u128, u128)> = BTreeMap::new();
    let mut guaranteed = true;
    let add = |m: &mut BTreeMap<&'a str, (u128, u128)>, k: &'a str, v: Quantity| {
        let e = m.entry(k).or_insert((0, 1));
        *e = v.add_to(*e);
    };
    for r in all {
        for (k, v) in Resources::qos_list(&r.requests) {
            add(&mut requests, k, v);
        }
        let lims = Resources::qos_list(&r.limits);
        if !(lims.contains_key("cpu") && lims.contains_key("memory")) {
            guaranteed = false;
        }
        for (k, v) in lims {
            add(&mut limits, k, v);
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return Qos::BestEffort;
    }
    if guaranteed {
        for (k, (n, d)) in &requests {
            match limits.get(k) {
                Some((ln, ld)) if n * ld == ln * d => {}
                _ => guaranteed = false,
            }
        }
    }
    if guaranteed && requests.len() == limits.len() {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// `PodRequests` / `PodLimits` of `pick` (requests or limits), without overhead: the app
/// containers and sidecars run together; each plain init container runs alone next to the
/// sidecars started before it; the pod needs the larger of the two.
pub fn pod_total(
    apps: &[&Resources],
    inits: &[(&Resources, bool)],
    pick: fn(&Resources) -> &BTreeMap<String, String>,
) -> BTreeMap<String, Quantity> {
    let mut total: BTreeMap<String, Quantity> = BTreeMap::new();
    let add = |m: &mut BTreeMap<String, Quantity>, list: &BTreeMap<String, String>| {
        for (k, v) in list {
            let cur = m.get(k).copied().unwrap_or(Quantity::ZERO);
            m.insert(k.clone(), cur.plus(q(v)));
        }
    };
    for r in apps {
        add(&mut total, pick(r));
    }
    let mut sidecars: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, Quantity> = BTreeMap::new();
    for (r, sidecar) in inits {
        let this: BTreeMap<String, Quantity> = if *sidecar {
            add(&mut total, pick(r));
            add(&mut sidecars, pick(r));
            sidecars.clone()
        } else {
            let mut tmp = sidecars.clone();
            add(&mut tmp, pick(r));
            tmp
        };
        for (k, v) in this {
            let cur = init_peak.get(&k).copied().unwrap_or(Quantity::ZERO);
            init_peak.insert(k, cur.max(v));
        }
    }
    for (k, v) in init_peak {
        let cur = total.get(&k).copied().unwrap_or(Quantity::ZERO);
        total.insert(k, cur.max(v));
    }
    total
}

/// The node facts the arithmetic depends on.
#[derive(Debug, Clone)]
pub struct Machine {
    /// cgroup v2 (unified hierarchy).
    pub cgroup_v2: bool,
    /// kubelet `singleProcessOOMKill` (unset: true on cgroup v1, false on v2).
    pub single_process_oom_kill: Option<bool>,
    /// The swap controller exists (`memory.memsw.limit_in_bytes` on v1, `memory.swap.max` on v2).
    pub swap_controller: bool,
    /// Hugepage sizes of the host, as the kubelet names them (`2MB`, `1GB`).
    pub hugepage_sizes: Vec<String>,
    /// `machineInfo.MemoryCapacity` in bytes.
    pub memory_capacity: i64,
}

/// `calculateLinuxResources`: shares, quota, period, memory limit and (cgroup v2)
/// `memory.oom.group`.
pub fn calculate(
    m: &Machine,
    cpu_request: Option<Quantity>,
    cpu_limit: Option<Quantity>,
    memory_limit: Option<Quantity>,
) -> Map<String, Value> {
    let shares = match (cpu_request, cpu_limit) {
        (None, Some(l)) => milli_cpu_to_shares(l.milli()),
        (r, _) => milli_cpu_to_shares(r.map(|r| r.milli()).unwrap_or(0)),
    };
    let mut out = Map::new();
    out.insert("cpu_shares".into(), json!(shares));
    let mem = memory_limit.map(|m| m.value()).unwrap_or(0);
    if mem != 0 {
        out.insert("memory_limit_in_bytes".into(), json!(mem));
    }
    let quota = milli_cpu_to_quota(cpu_limit.map(|l| l.milli()).unwrap_or(0), QUOTA_PERIOD);
    out.insert("cpu_quota".into(), json!(quota));
    out.insert("cpu_period".into(), json!(QUOTA_PERIOD));
    if m.cgroup_v2 && !m.single_process_oom_kill.unwrap_or(false) {
        out.insert("unified".into(), json!({"memory.oom.group": "1"}));
    }
    out
}

/// `GetHugepageLimitsFromResources`: every host page size, limit 0 unless the container's
/// limits name it (`hugepages-2Mi: 4Mi` gives `{page_size: "2MB", limit: 4194304}`).
pub fn hugepage_limits(m: &Machine, r: &Resources) -> Vec<Value> {
    let asked: BTreeMap<String, i64> = r
        .limits
        .iter()
        .filter_map(|(k, v)| {
            // A resource name whose size does not parse (`hugepages-2MB`) is skipped, as by
            // HugePageSizeFromResourceName.
            let size = Quantity::parse(k.strip_prefix("hugepages-")?).ok()?;
            Some((hugepage_unit(size.value())?, q(v).value()))
        })
        .collect();
    m.hugepage_sizes
        .iter()
        .map(|size| json!({"page_size": size, "limit": asked.get(size).copied().unwrap_or(0)}))
        .collect()
}

/// `HugePageUnitSizeFromByteSize`: 2097152 -> `2MB`, 1073741824 -> `1GB`.
pub fn hugepage_unit(bytes: i64) -> Option<String> {
    let units = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes;
    let mut i = 0;
    while size >= 1024 && size % 1024 == 0 && i < units.len() - 1 {
        size /= 1024;
        i += 1;
    }
    (i > 0 || size > 0).then(|| format!("{size}{}", units[i]))
}

/// `GetContainerOOMScoreAdjust` for a Burstable container (the sidecar rule included).
pub fn burstable_oom_score_adj(
    m: &Machine,
    container: &Resources,
    sidecar: bool,
    app_memory_requests: &[Option<i64>],
) -> i64 {
    let own = container.req("memory").map(|v| v.value()).unwrap_or(0);
    let cap = m.memory_capacity.max(1);
    let mut adj = 1000 - (1000 * own as i128 / cap as i128) as i64;
    if sidecar {
        let min_apps = app_memory_requests
            .iter()
            .map(|r| r.unwrap_or(DEFAULT_MEMORY_REQUEST))
            .min()
            .unwrap_or(DEFAULT_MEMORY_REQUEST);
        let own_or_default = if own == 0 {
            DEFAULT_MEMORY_REQUEST
        } else {
            own
        };
        let min = min_apps.min(own_or_default);
        adj = 1000 - (1000 * min as i128 / cap as i128) as i64;
        if min <= own {
            adj += 1;
        }
    }
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adj == BESTEFFORT_OOM_SCORE_ADJ {
        return adj - 1;
    }
    adj
}

/// NoSwap (the default `memorySwapBehavior`): on cgroup v1 the swap limit equals the memory
/// limit, on v2 `memory.swap.max` is 0; nothing without a swap controller.
pub fn apply_no_swap(m: &Machine, out: &mut Map<String, Value>) {
    if !m.swap_controller {
        return;
    }
    if m.cgroup_v2 {
        let unified = out
            .entry("unified")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(u) = unified {
            u.insert("memory.swap.max".into(), json!("0"));
        }
    } else {
        let mem = out
            .get("memory_limit_in_bytes")
            .cloned()
            .unwrap_or(json!(0));
        out.insert("memory_swap_limit_in_bytes".into(), mem);
    }
}
