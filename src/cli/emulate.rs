//! `nri-align emulate`: write an emulated host as a sysfs/proc tree plus an NVML fixture.

use std::path::PathBuf;

/// Arguments of `nri-align emulate`.
#[derive(Debug, clap::Args)]
pub struct EmulateArgs {
    /// Host description (YAML/JSON file, or the name of a shipped one such as `dgx-h100`).
    #[arg(long)]
    pub host: String,
    /// Output directory (gets `sys/`, `proc/` and `nvml.json`).
    #[arg(long)]
    pub out: PathBuf,
}

/// Materialises the host.
pub fn run(_args: EmulateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`emulate` is not wired yet")
}
