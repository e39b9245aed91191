//! `nri-align verify`: compare running containers with the recorded decisions.

use std::path::PathBuf;

/// Arguments of `nri-align verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Where decisions are persisted.
    #[arg(long, default_value = "/var/lib/nri-align")]
    pub state_dir: PathBuf,
    /// Read procfs and cgroups under this directory.
    #[arg(long)]
    pub host_root: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Checks every recorded container.
pub fn run(_args: VerifyArgs) -> anyhow::Result<()> {
    anyhow::bail!("`verify` is not wired yet")
}
