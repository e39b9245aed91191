//! `nri-align config check`: a configuration checked offline against a host before it is
//! deployed, with the same choice of section and the same checks against the host as
//! `nri-align run` makes, and the configuration the node would run with printed whole.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::config::select::{
    choose, is_section_key, list_dir, Identity, Selected, Source, DEFAULT_KEY,
};
use crate::config::settle::usable;
use crate::config::{read_config_file_to_lint, Config};

use super::Exit;

/// `config check` exit statuses, for `--help`.
pub const EXIT_CODES: &str = "Exit status:\n  \
    0  the configuration that applies to the node is usable on the host (printed on stdout)\n  \
    1  it is not (does not parse, or names what the host lacks): `run` would stop on a plain \
       file, and run on its last good configuration or the built-in defaults with a section\n  \
    2  could not check: the file, the host or the arguments could not be read";

/// Arguments of `nri-align config`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// `nri-align config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file, a fleet ConfigMap (manifest or mounted directory) against a
    /// host, and print the configuration the node would run with.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
}

/// Arguments of `nri-align config check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// A configuration file, a ConfigMap manifest (`kind: ConfigMap` with `default`,
    /// `group.NAME`, `node.NAME` keys) or a mounted ConfigMap directory.
    pub file: PathBuf,
    /// Check against the host whose sysfs and procfs are under this directory [default: /].
    #[arg(long, value_name = "DIR", conflicts_with = "host")]
    pub host_root: Option<PathBuf>,
    /// Check against a host description (a YAML file, or a shipped name such as `dgx-h100`).
    #[arg(long, value_name = "DESC")]
    pub host: Option<String>,
    /// The node to choose the section for [default: NODE_NAME, else the hostname].
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// The node's labels, `k=v,...` (`nri-align.io/config-group=NAME` puts it in a group).
    #[arg(long, value_name = "K=V,...", value_delimiter = ',')]
    pub labels: Vec<String>,
}

/// Runs `nri-align config`.
pub fn run(args: ConfigArgs) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::Check(a) => check(a),
    }
}

fn could_not(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Exit {
        code: 2,
        message: format!("could not check: {e}"),
    })
}

/// What the file holds: a plain configuration, or sections by key.
enum Input {
    Plain(PathBuf, Vec<u8>),
    Sections(Vec<(String, PathBuf, Vec<u8>)>),
}

fn read_input(path: &Path) -> anyhow::Result<Input> {
    if path.is_dir() {
        let (keys, _) = list_dir(path)?;
        let mut sections = Vec::new();
        for k in keys {
            let p = path.join(&k);
            let bytes = read_config_file_to_lint(&p)?;
            sections.push((k, p, bytes));
        }
        return Ok(Input::Sections(sections));
    }
    let bytes = read_config_file_to_lint(path)?;
    Ok(configmap_sections(path, &bytes)?.unwrap_or(Input::Plain(path.to_path_buf(), bytes)))
}

/// The sections of a ConfigMap manifest (`kind: ConfigMap`, its `data` keys); `None` when the
/// file is not one (a plain configuration file has no `kind` key).
fn configmap_sections(path: &Path, bytes: &[u8]) -> anyhow::Result<Option<Input>> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        kind: Option<String>,
        #[serde(default)]
        data: std::collections::BTreeMap<String, String>,
    }
    // Before the manifest's strings are copied out: a manifest of aliases is refused whole.
    if let Err(e) = crate::untrusted::yaml::check_bytes(bytes) {
        return Err(Exit {
            code: 1,
            message: format!("invalid config {}: {e}", path.display()),
        }
        .into());
    }
    let Ok(m) = serde_yaml_ng::from_slice::<Manifest>(bytes) else {
        return Ok(None);
    };
    if m.kind.as_deref() != Some("ConfigMap") {
        return Ok(None);
    }
    let keys: Vec<&String> = m.data.keys().filter(|k| is_section_key(k)).collect();
    if keys.is_empty() {
        // A single-file ConfigMap (`config.yaml: |`): its one key is the file.
        return match m.data.into_iter().collect::<Vec<_>>().as_slice() {
            [(k, text)] => Ok(Some(Input::Plain(path.join(k), text.clone().into_bytes()))),
            _ => anyhow::bail!(
                "{}: a ConfigMap with neither sections (default, group.NAME, node.NAME) nor a \
                 single key",
                path.display()
            ),
        };
    }
    let sections = m
        .data
        .into_iter()
        .filter(|(k, _)| is_section_key(k))
        .map(|(k, text)| (k.clone(), path.join(&k), text.into_bytes()))
        .collect();
    Ok(Some(Input::Sections(sections)))
}

fn identity(args: &CheckArgs) -> anyhow::Result<Identity> {
    let node = args
        .node
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()))
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .map(|h| h.to_lowercase())
        });
    let mut labels = Vec::new();
    for l in &args.labels {
        let (k, v) = l
            .split_once('=')
            .with_context(|| format!("label {l:?} is not KEY=VALUE"))?;
        labels.push((k.trim(), v.trim()));
    }
    Identity::from_labels(node, labels).map_err(anyhow::Error::msg)
}

fn check(args: CheckArgs) -> anyhow::Result<()> {
    let who = identity(&args).map_err(could_not)?;
    // A file that does not parse is the configuration's fault (1), not the check's (2).
    let input = read_input(&args.file).map_err(|e| match e.downcast::<Exit>() {
        Ok(exit) => exit.into(),
        Err(e) => could_not(e),
    })?;
    let source = match (&args.host, &args.host_root) {
        (Some(desc), _) => crate::topology::load::Source::Description(desc.clone()),
        (None, Some(root)) => crate::topology::load::Source::HostRoot(root.clone()),
        (None, None) => crate::topology::load::Source::HostRoot(PathBuf::from("/")),
    };
    let topo =
        crate::topology::load::load(&source, None).map_err(|e| could_not(format!("{e:#}")))?;
    let host = format!(
        "host {} ({} CPUs online, {} GPUs)",
        args.host
            .clone()
            .or_else(|| args.host_root.as_ref().map(|r| r.display().to_string()))
            .unwrap_or_else(|| "/".into()),
        topo.online_cpus().len(),
        topo.gpus.len()
    );
    let node = who.node.as_deref().unwrap_or("(no name)");
    let group = who
        .group
        .as_deref()
        .map_or("no group".to_string(), |g| format!("group {g}"));
    println!("# nri-align config check {}", args.file.display());
    let (what, result) = applied(input, &who, &topo)?;
    println!("# node {node}, {group}: {what}");
    match result.unwrap_or_else(|| Ok(Config::default())) {
        Ok(config) => {
            println!("# {host}: usable");
            print!("{}", config.to_yaml());
            Ok(())
        }
        Err(why) => {
            let why = why.replace('\n', " ");
            println!("# {host}: NOT usable: {why}");
            println!(
                "# a plain file stops `run`; with a section the node runs on its last good \
                 configuration, else on these built-in defaults:"
            );
            print!("{}", Config::default().to_yaml());
            Err(Exit {
                code: 1,
                message: format!("not usable on this host: {why}"),
            }
            .into())
        }
    }
}

/// What of `input` applies to `who` (a description for the report) and, unless built-in
/// defaults apply, whether it is usable on `topo`.
fn applied(
    input: Input,
    who: &Identity,
    topo: &crate::topology::Topology,
) -> anyhow::Result<(String, Option<Result<Config, String>>)> {
    let applied = match input {
        Input::Plain(path, bytes) => {
            let sel = Selected::new(Source::File, path.display().to_string(), path, bytes, None);
            (
                "a plain configuration file".to_string(),
                Some(usable(&sel, topo)),
            )
        }
        Input::Sections(sections) => {
            let has = |k: &str| sections.iter().any(|(key, ..)| key == k);
            match choose(has, who) {
                Ok(None) => ("no section applies: built-in defaults".to_string(), None),
                Ok(Some((src, key))) => {
                    let default = sections
                        .iter()
                        .find(|(k, ..)| k == DEFAULT_KEY)
                        .map(|(_, _, b)| b.clone());
                    let (k, path, bytes) = sections
                        .into_iter()
                        .find(|(k, ..)| *k == key)
                        .ok_or_else(|| could_not("section vanished"))?;
                    let sel = Selected::new(src, k, path, bytes, default.as_deref());
                    let what = if sel.inherited.is_empty() {
                        format!("section {key}")
                    } else {
                        format!(
                            "section {key}, with {} from default",
                            sel.inherited.join(", ")
                        )
                    };
                    (what, Some(usable(&sel, topo)))
                }
                Err(why) => ("no usable section".to_string(), Some(Err(why))),
            }
        }
    };
    Ok(applied)
}

#[cfg(test)]
#[path = "config_check_tests.rs"]
mod tests;
