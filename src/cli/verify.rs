//! `nri-align verify`: compare running containers with the recorded decisions. Exit status 0:
//! every container checked is as decided; 1: one drifted; 2: it could not check (no state, a
//! container it could not look for).

use std::path::PathBuf;

use super::Exit;
use crate::enforce::memloc::mib;
use crate::enforce::state::{Loaded, StateStore};
use crate::enforce::verify::{verify_with, ContainerCheck, Verdict, VerifyOptions};
use crate::untrusted::printable;

/// `verify --help`'s closing words: what each exit status means.
pub const EXIT_CODES: &str = "\
Exit status:
  0  every recorded container is as decided, or not running
  1  at least one container drifted (DRIFT lines say how)
  2  could not check: no state dir or no decisions, a state it cannot read, or a container it
     could not look for (unknown: no cgroup hierarchy mounted, no process visible and no
     cgroups path recorded)

A container whose resident memory is mostly off its NUMA nodes (more than
verify_remote_memory_threshold percent, --remote-memory-threshold) is flagged REMOTE-MEMORY
with what the host shows of why; the flag does not change the exit status.

In the DaemonSet (no hostPID), containers are found through the host's cgroup hierarchy:
their cgroup cpusets are checked, their processes' affinity and devices are not (said as
`unchecked`).";

/// Arguments of `nri-align verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Where decisions are persisted.
    #[arg(long, default_value = "/var/lib/nri-align")]
    pub state_dir: PathBuf,
    /// Read procfs, cgroups and container /dev under this directory.
    #[arg(long)]
    pub host_root: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Flag a container when more than this percent of its resident memory is off its NUMA
    /// nodes (default: verify_remote_memory_threshold of --config, else 50).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..100))]
    pub remote_memory_threshold: Option<u8>,
    /// The daemon's configuration file, for verify_remote_memory_threshold.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Checks every recorded container; the error carries the exit status ([`Exit`]).
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let checks = check(&args).map_err(|e| Exit {
        code: 2,
        message: super::render_error(&e),
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            print_check(c);
        }
    }
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    let (drifted, unknown) = (count(Verdict::Drift), count(Verdict::Unknown));
    if drifted > 0 {
        return Err(Exit {
            code: 1,
            message: format!("{drifted} of {} recorded containers drifted", checks.len()),
        }
        .into());
    }
    if unknown > 0 {
        return Err(Exit {
            code: 2,
            message: format!(
                "{unknown} of {} recorded containers could not be checked",
                checks.len()
            ),
        }
        .into());
    }
    Ok(())
}

/// Reads the decisions and checks each: any error here means nothing was checked.
fn check(args: &VerifyArgs) -> anyhow::Result<Vec<ContainerCheck>> {
    // Read only: the daemon may be running (and holds the dir's lock).
    if !args.state_dir.is_dir() {
        anyhow::bail!(
            "no decisions recorded: state dir {} does not exist",
            args.state_dir.display()
        );
    }
    let mut store = StateStore::open_read_only(&args.state_dir)?;
    if !store.exists() {
        anyhow::bail!(
            "no decisions recorded: {} does not exist",
            store.path().display()
        );
    }
    let doc = match store.load() {
        Loaded::Doc(d) => d,
        Loaded::Fresh => anyhow::bail!("no decisions recorded in {}", args.state_dir.display()),
        Loaded::Corrupt(why) => anyhow::bail!("{why}"),
    };
    let root = args.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    Ok(verify_with(&doc, &root, options(args)?))
}

/// The threshold from the flag, else the configuration file, else the default.
fn options(args: &VerifyArgs) -> anyhow::Result<VerifyOptions> {
    let from_file = match &args.config {
        Some(path) => Some(crate::config::Config::load(path)?.verify_remote_memory_threshold),
        None => None,
    };
    Ok(VerifyOptions {
        remote_memory_threshold: args
            .remote_memory_threshold
            .or(from_file)
            .unwrap_or(crate::config::DEFAULT_REMOTE_MEMORY_THRESHOLD),
    })
}

fn print_check(c: &ContainerCheck) {
    let verdict = match c.verdict {
        Verdict::Ok => "ok",
        Verdict::Drift => "DRIFT",
        Verdict::NotRunning => "not-running",
        Verdict::Unknown => "UNKNOWN",
    };
    let pids: Vec<String> = c.pids.iter().map(u32::to_string).collect();
    // Names, ids and the problems that quote them come from the runtime and the host:
    // control characters in them are escaped (`untrusted::printable`).
    println!(
        "{verdict:<11} {} {}/{} pids [{}]",
        printable(short(&c.id)),
        printable(&c.pod),
        printable(&c.name),
        pids.join(" ")
    );
    for p in &c.problems {
        println!("            - {}", printable(p));
    }
    for u in &c.unchecked {
        println!("            unchecked: {}", printable(u));
    }
    print_memory(c);
    for line in super::placements::map_lines(&c.device_map) {
        println!("            {line}");
    }
    if !c.offline_cpus.is_empty() {
        println!(
            "            offline: CPUs {} it holds are offline (it keeps its other CPUs)",
            c.offline_cpus
        );
    }
}

/// Where the container's memory lives and its threads last ran, and the flag when its memory
/// is mostly elsewhere.
fn print_memory(c: &ContainerCheck) {
    if let Some(m) = &c.memory {
        let per_node: Vec<String> = m
            .bytes_per_node
            .iter()
            .map(|(n, b)| format!("N{n} {}", mib(*b)))
            .collect();
        println!(
            "            memory: {} resident, {}% on its nodes {} ({}; {})",
            mib(m.resident_bytes),
            m.local_percent,
            m.nodes,
            per_node.join(", "),
            serde_json::to_value(m.source)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        );
        for n in &m.notes {
            println!("            memory: {n}");
        }
    }
    for t in &c.threads {
        let outside = if t.outside_cpus.is_empty() {
            String::new()
        } else {
            format!(" (last on CPUs {})", t.outside_cpus)
        };
        println!(
            "            threads: {} last ran inside its {} {}, {} outside{outside}",
            t.inside, t.against, t.cpus, t.outside
        );
    }
    if let Some(r) = &c.remote_memory {
        println!(
            "            REMOTE-MEMORY: {}% of its resident memory is off its nodes \
             (threshold {}%)",
            r.remote_percent, r.threshold_percent
        );
        if r.reasons.is_empty() {
            println!(
                "              why: the host shows no cause (no interleave policy, its nodes \
                 have free memory)"
            );
        }
        for why in &r.reasons {
            println!("              why: {why}");
        }
    }
}

/// The id as `crictl ps` shows it.
pub(super) fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}
