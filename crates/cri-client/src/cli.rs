//! Command line of nri-align-crictl: crictl's subcommand names, flags and outputs.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::jsonconf::{load_config, status_with_info, to_json_value, Loaded};

/// Global flags go before the subcommand, as with crictl (so `exec -i`/`-t` stay free).
#[derive(Debug, Parser)]
#[command(
    name = "nri-align-crictl",
    version,
    about = "CRI client with crictl's commands (nri-align tests and demo)"
)]
pub struct Cli {
    /// Runtime endpoint (unix:///path or a path).
    #[arg(short = 'r', long, env = "CONTAINER_RUNTIME_ENDPOINT")]
    pub runtime_endpoint: Option<String>,
    /// Image endpoint (defaults to the runtime endpoint).
    #[arg(short = 'i', long, env = "IMAGE_SERVICE_ENDPOINT")]
    pub image_endpoint: Option<String>,
    /// crictl config file (runtime-endpoint, image-endpoint, timeout).
    #[arg(short = 'c', long, env = "CRI_CONFIG_FILE")]
    pub config: Option<PathBuf>,
    /// Per-call timeout: seconds or a duration (500ms, 2s, 1m).
    #[arg(short = 't', long)]
    pub timeout: Option<String>,
    /// Accepted for crictl compatibility; no effect.
    #[arg(short = 'D', long)]
    pub debug: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of list commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Aligned columns.
    #[default]
    Table,
    /// proto3 JSON (lowerCamelCase), like crictl's -o json.
    Json,
}

/// Subcommands (crictl's names).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print runtime name and version.
    Version,
    /// Run a new pod sandbox from a pod config file; prints its ID.
    Runp {
        /// Runtime handler.
        #[arg(short = 'r', long = "runtime")]
        runtime: Option<String>,
        /// Pod config (JSON or YAML).
        pod_config: PathBuf,
    },
    /// Create a container in a pod; prints its ID.
    Create {
        /// Pod sandbox ID.
        pod_id: String,
        /// Container config (JSON or YAML).
        container_config: PathBuf,
        /// Pod config the pod was run with.
        pod_config: PathBuf,
        /// Accepted for crictl compatibility (images are never pulled).
        #[arg(long)]
        no_pull: bool,
    },
    /// Run a pod, create and start a container in it; prints the container ID.
    Run {
        /// Runtime handler.
        #[arg(short = 'r', long = "runtime")]
        runtime: Option<String>,
        /// Container config.
        container_config: PathBuf,
        /// Pod config.
        pod_config: PathBuf,
    },
    /// Start created containers.
    Start {
        /// Container IDs.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Stop running containers.
    Stop {
        /// Seconds to wait before killing.
        #[arg(short = 't', long, default_value_t = 0)]
        timeout: i64,
        /// Container IDs.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Remove containers.
    Rm {
        /// Stop running containers first.
        #[arg(short = 'f', long)]
        force: bool,
        /// All containers.
        #[arg(short = 'a', long)]
        all: bool,
        /// Container IDs.
        ids: Vec<String>,
    },
    /// Stop pod sandboxes.
    Stopp {
        /// Pod IDs.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Remove pod sandboxes.
    Rmp {
        /// Stop ready pods first.
        #[arg(short = 'f', long)]
        force: bool,
        /// All pods.
        #[arg(short = 'a', long)]
        all: bool,
        /// Pod IDs.
        ids: Vec<String>,
    },
    /// List containers.
    Ps(PsArgs),
    /// List pod sandboxes.
    Pods(PodsArgs),
    /// Show container status and runtime info as JSON.
    Inspect {
        /// Only json is supported.
        #[arg(short = 'o', long, default_value = "json")]
        output: String,
        /// Container IDs.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Show pod sandbox status and runtime info as JSON.
    Inspectp {
        /// Only json is supported.
        #[arg(short = 'o', long, default_value = "json")]
        output: String,
        /// Pod IDs.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Run a command in a container (synchronously; exit status is the command's).
    Exec {
        /// Run synchronously (the only mode supported; accepted for crictl compatibility).
        #[arg(short = 's', long)]
        sync: bool,
        /// Seconds before the command is killed (0: no limit).
        #[arg(long, default_value_t = 0)]
        timeout: i64,
        /// Interactive stdin (not supported).
        #[arg(short = 'i', long)]
        interactive: bool,
        /// TTY (not supported).
        #[arg(short = 't', long)]
        tty: bool,
        /// Container ID.
        id: String,
        /// Command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Print a container's log.
    Logs {
        /// Number of last lines to show.
        #[arg(long)]
        tail: Option<usize>,
        /// Prefix each line with its timestamp.
        #[arg(short = 't', long)]
        timestamps: bool,
        /// Container ID.
        id: String,
    },
    /// Update container resources.
    Update(UpdateArgs),
    /// Update pod sandboxes' pod-level resources (UpdatePodSandboxResources; the ids are pod
    /// ids). Not a crictl command: the kubelet sends it after a pod-level resize.
    Updatep(UpdateArgs),
    /// List images.
    Images {
        /// Only IDs.
        #[arg(short = 'q', long)]
        quiet: bool,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Format,
    },
    /// Show image status as JSON.
    Inspecti {
        /// Image references.
        #[arg(required = true)]
        images: Vec<String>,
    },
}

/// Flags of `ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// All containers (default: running only).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Filter by pod ID.
    #[arg(short = 'p', long)]
    pub pod: Option<String>,
    /// Filter by state: created, running, exited, unknown.
    #[arg(short = 's', long)]
    pub state: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// Flags of `pods`.
#[derive(Debug, Args)]
pub struct PodsArgs {
    /// Filter by namespace (substring; ^ and $ anchor).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Filter by state: ready, notready.
    #[arg(short = 's', long)]
    pub state: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// The flags `ps` and `pods` share, with crictl's names.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only IDs.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Filter by name (substring; ^ and $ anchor).
    #[arg(long)]
    pub name: Option<String>,
    /// Filter by ID.
    #[arg(long)]
    pub id: Option<String>,
    /// Filter by label key=value (repeatable).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Only the newest one.
    #[arg(short = 'l', long)]
    pub latest: bool,
    /// Only the N newest.
    #[arg(short = 'n', long)]
    pub last: Option<usize>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Format,
}

impl ListArgs {
    /// How many of the newest to keep (`--latest` is `--last 1`), if limited.
    pub fn keep(&self) -> Option<usize> {
        if self.latest {
            Some(1)
        } else {
            self.last
        }
    }
}

/// Flags of `update` (crictl's names).
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// CFS period.
    #[arg(long)]
    pub cpu_period: Option<i64>,
    /// CFS quota.
    #[arg(long)]
    pub cpu_quota: Option<i64>,
    /// CPU shares.
    #[arg(long)]
    pub cpu_share: Option<i64>,
    /// CPUs allowed (Linux list format).
    #[arg(long)]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes allowed (Linux list format).
    #[arg(long)]
    pub cpuset_mems: Option<String>,
    /// Memory limit in bytes.
    #[arg(long)]
    pub memory: Option<i64>,
    /// Container IDs.
    #[arg(required = true)]
    pub ids: Vec<String>,
}

/// Loads a config file, warning on stderr when unknown fields were skipped.
pub(crate) fn load<M: protobuf::MessageFull>(path: &std::path::Path) -> Result<M> {
    let Loaded {
        message,
        ignored_unknown,
    } = load_config::<M>(path)?;
    if let Some(reason) = ignored_unknown {
        eprintln!(
            "warning: {}: ignored unknown fields ({reason})",
            path.display()
        );
    }
    Ok(message)
}

/// Prints a JSON value, pretty, to stdout.
pub(crate) fn print_json(value: &serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Matches crictl's regexp name filters for the common cases without a regex engine:
/// substring match, with `^` / `$` anchoring.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let (anchored_start, rest) = match pattern.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, pattern),
    };
    let (anchored_end, core) = match rest.strip_suffix('$') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    match (anchored_start, anchored_end) {
        (true, true) => name == core,
        (true, false) => name.starts_with(core),
        (false, true) => name.ends_with(core),
        (false, false) => name.contains(core),
    }
}

/// Parses `key=value` label filters.
pub fn parse_labels(raw: &[String]) -> Result<std::collections::HashMap<String, String>> {
    raw.iter()
        .map(|l| match l.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("bad label filter {l:?}: want key=value"),
        })
        .collect()
}

/// JSON document of an inspect command.
pub(crate) fn inspect_doc<M: protobuf::MessageFull>(
    status: Option<&M>,
    info: &std::collections::HashMap<String, String>,
) -> Result<serde_json::Value> {
    Ok(status_with_info(status, info)?)
}

/// proto3 JSON of a list response.
pub(crate) fn list_json<M: protobuf::MessageFull>(m: &M) -> Result<serde_json::Value> {
    Ok(to_json_value(m)?)
}

/// Deadline for an exec: its own timeout plus slack, or an hour when unlimited.
pub(crate) fn exec_deadline(timeout_s: i64, base: Duration) -> Duration {
    if timeout_s > 0 {
        Duration::from_secs(u64::try_from(timeout_s).unwrap_or(0)) + base
    } else {
        Duration::from_secs(3600)
    }
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
