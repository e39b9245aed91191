//! Command-line interface: one file per subcommand; `main.rs` only parses and maps errors.
//!
//! May use: everything. `run` is the daemon's start-up, walked step by step on the crate page.

pub mod emulate;
pub mod generate;
pub mod run;
pub mod simulate;
pub mod topology;
pub mod verify;

use clap::{Parser, Subcommand};

/// `nri-align --version`: the package version and the git revision it was built from
/// (`-dirty` when the sources differed from it; `unknown` outside git; see build.rs).
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("NRI_ALIGN_GIT_REVISION"),
    ")"
);

/// Align every container's CPUs, memory, GPUs and NICs on the same part of the machine.
#[derive(Debug, Parser)]
#[command(name = "nri-align", version = VERSION_LINE, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the NRI plugin (dial the runtime socket, or serve the fd the runtime launched us with).
    Run(run::RunArgs),
    /// Show the host topology (NUMA nodes, distances, GPU links, device locality).
    Topology(topology::TopologyArgs),
    /// Materialise an emulated host description as a sysfs/proc tree plus an NVML fixture.
    Emulate(emulate::EmulateArgs),
    /// Replay a workload through the placement engine and print every decision.
    Simulate(simulate::SimulateArgs),
    /// Check running containers' real cpusets, mems and devices against the recorded decisions.
    Verify(verify::VerifyArgs),
    /// Write shell completions or man pages (for packagers: hack/release-assets).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

impl Cli {
    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Run(a) => run::run(a),
            Command::Topology(a) => topology::run(a),
            Command::Emulate(a) => emulate::run(a),
            Command::Simulate(a) => simulate::run(a),
            Command::Verify(a) => verify::run(a),
            Command::Generate(a) => generate::run(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand and every argument says what it is for in `--help` (and so in the man
    /// pages and completions generated from the same definition).
    #[test]
    fn every_subcommand_and_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let here = format!("{path} {}", cmd.get_name()).trim().to_string();
            if cmd.get_about().is_none() {
                missing.push(format!("{here}: no about"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{here} {id}: no help"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &here, missing);
            }
        }
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&cmd, "", &mut missing);
        assert!(missing.is_empty(), "{missing:#?}");
        assert!(cmd.get_subcommands().count() >= 6);
    }

    #[test]
    fn version_names_the_revision() {
        let cmd = Cli::command();
        let version = cmd.get_version().expect("version");
        assert_eq!(
            version,
            format!(
                "{} ({})",
                env!("CARGO_PKG_VERSION"),
                env!("NRI_ALIGN_GIT_REVISION")
            )
        );
        assert!(!env!("NRI_ALIGN_GIT_REVISION").is_empty());
    }
}
