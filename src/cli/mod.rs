//! Command-line interface: one file per subcommand; `main.rs` only parses and maps errors.
//!
//! May use: everything. `run` is the daemon's start-up, walked step by step on the crate page.

pub mod config_check;
pub mod emulate;
pub mod generate;
pub mod gpu_facts;
pub mod placements;
pub mod run;
pub mod simulate;
pub mod topology;
pub mod verify;

use clap::{Parser, Subcommand};

/// `nri-align --version`: derived from the code it was built from (build.rs), so two builds
/// of different code never print the same string: `0.3.0-dev+1a2b3c4d5e6f` (the next minor
/// version, in development, at that git revision; `-dirty` when the sources differed from it),
/// or the package version itself, with the revision, for a build of its release tag.
pub const VERSION_LINE: &str = env!("NRI_ALIGN_VERSION");

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
    #[command(after_help = verify::EXIT_CODES)]
    Verify(verify::VerifyArgs),
    /// List every recorded container and where it runs: CPUs, memory nodes, GPUs, NICs.
    Placements(placements::PlacementsArgs),
    /// Check a configuration (a file or a fleet ConfigMap's sections) against a host offline.
    Config(config_check::ConfigArgs),
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
            Command::Placements(a) => placements::run(a),
            Command::Config(a) => config_check::run(a),
            Command::Generate(a) => generate::run(a),
        }
    }
}

/// A failure that asks for a particular exit status (`verify`: 1 drift, 2 could not check);
/// any other error exits 1.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// The process exit status.
    pub code: u8,
    /// What to print.
    pub message: String,
}

/// The exit status for `err`: an [`Exit`]'s own, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    err.downcast_ref::<Exit>().map_or(1, |e| e.code)
}

/// `err` and its causes on one line, each said once: many errors already print their source in
/// their own message (`open X: No such file or directory`), and anyhow's alternate form would
/// append the same source again.
pub fn render_error(err: &anyhow::Error) -> String {
    let mut out = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// Restores the default action of SIGPIPE (terminate, silently) for the one-shot commands.
///
/// Rust ignores SIGPIPE, so a write to a closed pipe (`nri-align verify --json | head`) comes
/// back as EPIPE and `println!` panics on it. Restoring the default, as every Unix filter has
/// it, covers every write at once (ours, serde's, clap's help, a library's) where a write
/// helper would have to be used at every print and would still miss the ones we do not own.
/// `run` keeps SIGPIPE ignored: the daemon's sockets must see a closed peer as an error to
/// handle, never as a signal that kills it.
pub fn default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: called at the start of main, before any thread is started, and SIG_DFL installs
    // no handler of ours.
    if let Err(e) = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) } {
        eprintln!("nri-align: cannot restore SIGPIPE: {e}");
    }
}

#[cfg(test)]
mod tests;
