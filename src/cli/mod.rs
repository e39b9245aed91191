//! Command-line interface: one file per subcommand; `main.rs` only parses and maps errors.

pub mod emulate;
pub mod run;
pub mod simulate;
pub mod topology;
pub mod verify;

use clap::{Parser, Subcommand};

/// Align every container's CPUs, memory, GPUs and NICs on the same part of the machine.
#[derive(Debug, Parser)]
#[command(name = "nri-align", version, about)]
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
        }
    }
}
