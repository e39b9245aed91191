//! Table and log rendering of the CLI (ps, pods, logs), shaped like crictl's.

use std::io::Write;
use std::time::SystemTime;

use anyhow::Result;

use crate::output::{age, parse_log_line, short_id, table, tail, Stream};
use crate::proto::*;

/// Formats a creation time for tables.
pub(crate) fn created(ns: i64) -> String {
    age(ns, SystemTime::now())
}

/// Writes decoded log lines of a CRI log file to stdout / stderr.
pub(crate) fn print_log(text: &str, tail_n: Option<usize>, timestamps: bool) -> Result<()> {
    let lines: Vec<_> = text.lines().filter_map(parse_log_line).collect();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    for l in tail(lines, tail_n) {
        let sink: &mut dyn Write = match l.stream {
            Stream::Stdout => &mut out,
            Stream::Stderr => &mut err,
        };
        if timestamps {
            write!(sink, "{} ", l.timestamp)?;
        }
        write!(sink, "{}", l.content)?;
        if l.full {
            writeln!(sink)?;
        }
    }
    Ok(())
}

/// Builds the container table of `ps`.
pub(crate) fn container_table(
    items: &[Container],
    pods: &std::collections::HashMap<String, String>,
) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|c| {
            vec![
                short_id(&c.id).to_string(),
                c.image.image.clone(),
                created(c.created_at),
                container_state_name(c.state.enum_value_or_default()).to_string(),
                c.metadata.name.clone(),
                c.metadata.attempt.to_string(),
                short_id(&c.pod_sandbox_id).to_string(),
                pods.get(&c.pod_sandbox_id).cloned().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "CONTAINER",
            "IMAGE",
            "CREATED",
            "STATE",
            "NAME",
            "ATTEMPT",
            "POD ID",
            "POD",
        ],
        &rows,
    )
}

/// crictl's short state names.
pub fn container_state_name(state: ContainerState) -> &'static str {
    match state {
        ContainerState::CONTAINER_CREATED => "Created",
        ContainerState::CONTAINER_RUNNING => "Running",
        ContainerState::CONTAINER_EXITED => "Exited",
        ContainerState::CONTAINER_UNKNOWN => "Unknown",
    }
}

/// Builds the pod table of `pods`.
pub(crate) fn pod_table(items: &[PodSandbox]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|p| {
            vec![
                short_id(&p.id).to_string(),
                created(p.created_at),
                match p.state.enum_value_or_default() {
                    PodSandboxState::SANDBOX_READY => "Ready",
                    PodSandboxState::SANDBOX_NOTREADY => "NotReady",
                }
                .to_string(),
                p.metadata.name.clone(),
                p.metadata.namespace.clone(),
                p.metadata.attempt.to_string(),
                if p.runtime_handler.is_empty() {
                    "(default)".into()
                } else {
                    p.runtime_handler.clone()
                },
            ]
        })
        .collect();
    table(
        &[
            "POD ID",
            "CREATED",
            "STATE",
            "NAME",
            "NAMESPACE",
            "ATTEMPT",
            "RUNTIME",
        ],
        &rows,
    )
}
