//! `nri-align placements`: what runs where. Every container recorded in the state dir (the
//! one the daemon writes; read only, as `verify` reads it) with its pod, policy, CPUs, memory
//! nodes, GPUs and NICs, and since when its cgroup exists (the container's start: found
//! through the cgroup hierarchy, so it also works in the DaemonSet, which has no `hostPID`).
//! With `--svg`, the same as a picture of the host ([`crate::topology::picture`]).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Exit;
use crate::enforce::state::{Loaded, Record, StateStore};
use crate::enforce::verify::offline_held;
use crate::host::cgroup::{CgroupMounts, ContainerCgroup};
use crate::placement::device_map::DeviceMap;
use crate::topology::load::{load, Source};
use crate::topology::picture::{render_svg, Holder, Overlay};
use crate::topology::{read_online, IdSet};
use crate::untrusted::printable;

/// Arguments of `nri-align placements`.
#[derive(Debug, clap::Args)]
pub struct PlacementsArgs {
    /// Where decisions are persisted (the daemon's --state-dir).
    #[arg(long, default_value = "/var/lib/nri-align")]
    pub state_dir: PathBuf,
    /// Read cgroups under this directory instead of `/`.
    #[arg(long)]
    pub host_root: Option<PathBuf>,
    /// Print JSON (one object per container).
    #[arg(long, conflicts_with = "svg")]
    pub json: bool,
    /// Draw the host with each recorded container's CPUs, memory nodes, GPUs and NICs in its
    /// own colour, the shared pool and a legend, as SVG into FILE (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// With `--svg`: the host to draw, a host description (a file, or a shipped name such as
    /// `dgx-h100`) [default: sysfs under --host-root].
    #[arg(long, requires = "svg")]
    pub host: Option<String>,
}

/// One recorded container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Container id.
    pub id: String,
    /// Pod namespace/name.
    pub pod: String,
    /// Container name (`name`, as in `verify`'s JSON).
    pub name: String,
    /// Policy the decision was made under (`none`, `best-effort`, ...).
    pub policy: String,
    /// Exclusive CPUs, or the shared pool.
    pub exclusive: bool,
    /// CPUs as last applied (the pool's, for a shared container).
    pub cpus: String,
    /// Memory nodes (empty: not restricted).
    pub mems: String,
    /// GPUs (PCI bus ids), shared ones included.
    pub gpus: Vec<String>,
    /// NICs.
    pub nics: Vec<String>,
    /// Stopped, not removed: it keeps what it holds.
    pub stopped: bool,
    /// Exclusive CPUs it holds that are offline now (hot-unplugged or offlined since it was
    /// placed); empty when none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub offline_cpus: String,
    /// When the container's cgroup was created (UTC, RFC 3339); `None` when it is not found.
    pub since: Option<String>,
    /// The DRA claim devices the kubelet listed for it: claim, driver, pool, device and the
    /// CDI names they were prepared as; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<crate::enforce::container::KubeletClaimDevice>,
    /// Each GPU's and NIC's CPUs and memory nodes, as the container's env gives them
    /// (`NRI_ALIGN_GPU_CPUS`, ...); absent for a container without devices.
    #[serde(skip_serializing_if = "DeviceMap::is_empty")]
    pub device_map: DeviceMap,
}

/// Lists the recorded containers.
pub fn run(args: PlacementsArgs) -> anyhow::Result<()> {
    let rows = list(&args).map_err(|e| Exit {
        code: 2,
        message: super::render_error(&e),
    })?;
    if let Some(file) = &args.svg {
        return draw(&args, &rows, file);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{:<13} {:<30} {:<20} {:<12} {:<12} {:<5} {:<20} {:<12} SINCE",
        "CONTAINER", "POD", "NAME", "POLICY", "CPUS", "MEMS", "GPUS", "NICS"
    );
    for r in &rows {
        let cpus = if !r.offline_cpus.is_empty() {
            format!("{} ({} offline)", r.cpus, r.offline_cpus)
        } else if r.exclusive {
            r.cpus.clone()
        } else {
            format!("{} (shared)", r.cpus)
        };
        // Names and ids come from the runtime: control characters in them are escaped
        // (`untrusted::printable`), here and in every text line below.
        let name = if r.stopped {
            format!("{} (stopped)", printable(&r.name))
        } else {
            printable(&r.name).into_owned()
        };
        println!(
            "{:<13} {:<30} {:<20} {:<12} {:<12} {:<5} {:<20} {:<12} {}",
            printable(super::verify::short(&r.id)),
            printable(&r.pod),
            name,
            r.policy,
            cpus,
            dash(&r.mems),
            dash(&r.gpus.join(",")),
            dash(&r.nics.join(",")),
            r.since.as_deref().unwrap_or("-")
        );
        for line in map_lines(&r.device_map) {
            println!("  {line}");
        }
        // One line per DRA claim device under its container: which claim, and which device
        // of which driver's pool.
        for k in &r.claims {
            println!(
                "  claim {}: {}/{}/{} ({})",
                printable(&k.claim),
                printable(&k.driver),
                printable(&k.pool),
                printable(&k.device),
                printable(&k.cdi_names.join(","))
            );
        }
    }
    Ok(())
}

/// The host's picture with the recorded containers over it.
fn draw(args: &PlacementsArgs, rows: &[Placement], file: &Path) -> anyhow::Result<()> {
    let source = match &args.host {
        Some(desc) => Source::Description(desc.clone()),
        None => Source::HostRoot(args.host_root.clone().unwrap_or_else(|| PathBuf::from("/"))),
    };
    let topo = load(&source, None)?;
    for line in not_on_host(rows, &topo) {
        eprintln!("nri-align placements: {line}");
    }
    let svg = render_svg(&topo, Some(&overlay(rows)));
    super::topology::write_svg(file, &svg)
}

/// The recorded GPUs and NICs the drawn host does not have (a description of another host, a
/// device gone since): the picture cannot show them, so they are said, one line each.
fn not_on_host(rows: &[Placement], topo: &crate::topology::Topology) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        let who = format!("{}/{}", printable(&r.pod), printable(&r.name));
        for g in r
            .gpus
            .iter()
            .filter(|g| !topo.gpus.iter().any(|t| t.pci_bus_id == **g))
        {
            out.push(format!(
                "{who} holds GPU {} that this host does not have: not drawn",
                printable(g)
            ));
        }
        for n in r
            .nics
            .iter()
            .filter(|n| !topo.nics.iter().any(|t| t.name == **n))
        {
            out.push(format!(
                "{who} holds NIC {} that this host does not have: not drawn",
                printable(n)
            ));
        }
    }
    out
}

/// What the recorded containers hold, as the picture draws it: a container with exclusive
/// CPUs, GPUs, NICs or its own memory nodes is a holder in its own colour; the CPUs of the
/// shared containers are the shared pool.
pub fn overlay(rows: &[Placement]) -> Overlay {
    let set = |s: &str| IdSet::parse_list(s).unwrap_or_default();
    let mut out = Overlay::default();
    for r in rows {
        let cpus = set(&r.cpus);
        if !r.exclusive {
            out.shared.extend_from(&cpus);
        }
        if !r.exclusive && r.gpus.is_empty() && r.nics.is_empty() {
            continue;
        }
        let mut detail = r.policy.clone();
        if !r.exclusive {
            detail.push_str(", shared CPUs");
        }
        if r.stopped {
            detail.push_str(", stopped");
        }
        out.holders.push(Holder {
            label: format!("{}/{}", printable(&r.pod), printable(&r.name)),
            detail,
            cpus: if r.exclusive { cpus } else { IdSet::new() },
            mems: set(&r.mems),
            gpus: r.gpus.clone(),
            nics: r.nics.clone(),
        });
    }
    out
}

fn dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// Reads the records; an empty list when the daemon recorded none yet.
fn list(args: &PlacementsArgs) -> anyhow::Result<Vec<Placement>> {
    if !args.state_dir.is_dir() {
        anyhow::bail!(
            "no decisions recorded: state dir {} does not exist (give the daemon's --state-dir)",
            args.state_dir.display()
        );
    }
    let mut store = StateStore::open_read_only(&args.state_dir)?;
    let doc = match store.load() {
        Loaded::Doc(d) => d,
        Loaded::Fresh => return Ok(Vec::new()),
        Loaded::Corrupt(why) => anyhow::bail!("{why}"),
    };
    let root = args.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let mounts = CgroupMounts::read(&root);
    let online = read_online(&root).ok().map(|o| o.cpus);
    Ok(doc
        .containers
        .iter()
        .map(|(id, rec)| placement(id, rec, &mounts, online.as_ref()))
        .collect())
}

fn placement(id: &str, rec: &Record, mounts: &CgroupMounts, online: Option<&IdSet>) -> Placement {
    let a = &rec.assignment;
    let cpus = if rec.applied_cpus.is_empty() {
        &a.cpus
    } else {
        &rec.applied_cpus
    };
    let policy = serde_json::to_value(a.policy)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut gpus = a.gpus.clone();
    gpus.extend(a.shared_gpus.iter().cloned());
    Placement {
        id: id.to_string(),
        pod: a.pod_name.clone(),
        name: a.container_name.clone(),
        policy,
        exclusive: a.exclusive,
        cpus: cpus.to_string(),
        mems: a.mems.to_string(),
        gpus,
        nics: a.nics.clone(),
        stopped: rec.stopped,
        offline_cpus: offline_held(rec, online).to_string(),
        since: cgroup_created(mounts, &rec.cgroups_path).map(rfc3339),
        claims: rec.dra_claims.clone(),
        device_map: a.device_map.clone(),
    }
}

/// One line per GPU (by the ordinal CUDA gives it in the container) and per NIC: its CPUs and,
/// for a GPU, its memory nodes.
pub fn map_lines(map: &DeviceMap) -> Vec<String> {
    let gpus = map.gpus.iter().map(|g| {
        format!(
            "gpu {} ({}): cpus {} mems {}",
            g.ordinal,
            g.pci_bus_id,
            dash(&g.cpus.to_string()),
            dash(&g.mems.to_string())
        )
    });
    let nics = map
        .nics
        .iter()
        .map(|n| format!("nic {}: cpus {}", n.name, dash(&n.cpus.to_string())));
    gpus.chain(nics).collect()
}

/// When the container's cgroup directory was made: its birth time where the filesystem keeps
/// one, else its change time (a container's cgroup directory is not changed after it is set up).
fn cgroup_created(mounts: &CgroupMounts, cgroups_path: &str) -> Option<SystemTime> {
    let cg = ContainerCgroup::parse(cgroups_path).ok()?;
    let dir = mounts.cpuset_dir(&cg).ok()??;
    let meta = std::fs::metadata(Path::new(&dir)).ok()?;
    meta.created().or_else(|_| meta.modified()).ok()
}

/// `2026-11-28T23:10:04Z`.
fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
#[path = "placements_tests.rs"]
mod tests;
