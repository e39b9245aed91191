//! `nri-align verify`: compare running containers with the recorded decisions; exits non-zero
//! when any container drifted.

use std::path::PathBuf;

use crate::enforce::state::{Loaded, StateStore};
use crate::enforce::verify::{verify, Verdict};

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
}

/// Checks every recorded container.
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    // Read only: the daemon may be running (and holds the dir's lock).
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
    let root = args.host_root.unwrap_or_else(|| PathBuf::from("/"));
    let checks = verify(&doc, &root);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            let verdict = match c.verdict {
                Verdict::Ok => "ok",
                Verdict::Drift => "DRIFT",
                Verdict::NotRunning => "not-running",
            };
            let pids: Vec<String> = c.pids.iter().map(u32::to_string).collect();
            println!(
                "{verdict:<11} {} {}/{} pids [{}]",
                short(&c.id),
                c.pod,
                c.name,
                pids.join(" ")
            );
            for p in &c.problems {
                println!("            - {p}");
            }
        }
    }
    let drifted = checks
        .iter()
        .filter(|c| c.verdict == Verdict::Drift)
        .count();
    if drifted > 0 {
        anyhow::bail!("{drifted} of {} recorded containers drifted", checks.len());
    }
    Ok(())
}

fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}
