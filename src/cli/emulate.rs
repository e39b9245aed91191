//! `nri-align emulate`: write an emulated host as a sysfs/proc tree plus an NVML fixture.

use std::path::PathBuf;

use anyhow::Context;

use crate::topology::desc::HostDesc;
use crate::topology::emulate::{emulate, nvml_fixture, qemu};

/// Arguments of `nri-align emulate`.
#[derive(Debug, clap::Args)]
pub struct EmulateArgs {
    /// Host description (YAML/JSON file, or the name of a shipped one such as `dgx-h100`).
    #[arg(long, required_unless_present = "list")]
    pub host: Option<String>,
    /// Output directory (gets `sys/`, `proc/`, `nvml.json` and `dev-nodes.json`).
    #[arg(long, required_unless_present_any = ["qemu_args", "list"])]
    pub out: Option<PathBuf>,
    /// Print the QEMU arguments of a guest shaped like the host, one per line, and exit.
    #[arg(long, hide = true)]
    pub qemu_args: bool,
    /// With `--qemu-args`: every CPU but the boot CPU as a device with an id (`cpuN`, N the
    /// guest's CPU number), so that QEMU's monitor can unplug it and plug it back.
    #[arg(long, hide = true, requires = "qemu_args")]
    pub hotplug_cpus: bool,
    /// Write only `OUT/nvml.json`, taking the GPUs' bus ids from the NVIDIA-vendor display
    /// controllers of a real sysfs tree (a QEMU guest's `/sys`), in bus order.
    #[arg(long, hide = true, value_name = "ROOT")]
    pub nvml_from_sysfs: Option<PathBuf>,
    /// List the shipped descriptions and exit.
    #[arg(long)]
    pub list: bool,
}

/// Materialises the host.
pub fn run(args: EmulateArgs) -> anyhow::Result<()> {
    if args.list {
        for name in HostDesc::shipped_names() {
            println!("{name}");
        }
        return Ok(());
    }
    let host = args.host.context("--host is required")?;
    let desc = HostDesc::load(&host)?;
    if args.qemu_args {
        for a in qemu::qemu_args_with(&desc, args.hotplug_cpus) {
            println!("{a}");
        }
        return Ok(());
    }
    let out = args.out.context("--out is required")?;
    if let Some(root) = args.nvml_from_sysfs {
        let fixture = nvml_fixture::fixture_from_sysfs(&desc, &root)?;
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        let path = out.join("nvml.json");
        std::fs::write(&path, serde_json::to_string_pretty(&fixture)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
        return Ok(());
    }
    let done = emulate(&desc, &out)?;
    println!(
        "emulated {} under {}: sys={} proc={} nvml={} dev-nodes={}",
        desc.name,
        out.display(),
        done.sys.display(),
        done.proc.display(),
        done.nvml_fixture.display(),
        done.dev_nodes.display()
    );
    Ok(())
}
