//! One Synchronize chunk walked on the wire with protobuf's `CodedInputStream` instead of
//! decoded whole: every pod and container is counted against [`SyncLimits`] before anything of
//! it is allocated, and with [`SyncKeep::Only`] only the fields a plugin's decisions need are
//! decoded, the rest skipped in place. The generated types cost about twenty times the encoded
//! size (a `String` per empty environment entry, a whole `Container` per empty container), so
//! decoding first and counting after let a 4 MiB chunk take 850 MiB before its refusal.
//!
//! Field numbers are those of `SynchronizeRequest`, `PodSandbox`, `Container`, `Mount`,
//! `LinuxContainer`, `LinuxPodSandbox` and `LinuxResources` in containerd/nri
//! `pkg/api/api.proto` (our copy: `proto/nri/api.proto`).

use protobuf::rt::WireType;
use protobuf::{CodedInputStream, EnumOrUnknown, Message};

use super::options::{KeptFields, SyncKeep, SyncLimits};
use crate::api;

/// Why a chunk was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// A bound of [`SyncLimits`] would be crossed.
    #[error("{0}")]
    Over(String),
    /// The bytes are not a `SynchronizeRequest`.
    #[error("malformed Synchronize: {0}")]
    Wire(String),
}

impl From<protobuf::Error> for DecodeError {
    fn from(e: protobuf::Error) -> Self {
        DecodeError::Wire(e.to_string())
    }
}

type Result<T> = std::result::Result<T, DecodeError>;

/// What a Synchronize holds so far (the chunks before this one included): the bounds are
/// checked against it before each pod, container or kept entry is decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Chunks.
    pub(crate) chunks: usize,
    /// Pods plus containers.
    pub(crate) objects: usize,
    /// Encoded bytes of the pods and containers.
    pub(crate) bytes: u64,
    /// Entries kept of them with [`SyncKeep::Only`].
    pub(crate) entries: usize,
}

/// One decoded chunk.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    pub(crate) pods: Vec<api::PodSandbox>,
    pub(crate) containers: Vec<api::Container>,
    pub(crate) more: bool,
    /// Pods and containers without an id, counted and dropped ([`SyncKeep::Only`]).
    pub(crate) nameless: usize,
}

struct Budget<'l> {
    limits: &'l SyncLimits,
    t: Totals,
}

impl Budget<'_> {
    /// Counts one pod or container of `len` encoded bytes, or says which bound it crosses.
    fn object(&mut self, len: usize) -> Result<()> {
        let objects = self.t.objects + 1;
        let bytes = self.t.bytes.saturating_add(len as u64);
        let chunks = self.t.chunks;
        if objects > self.limits.max_objects {
            return Err(DecodeError::Over(format!(
                "{objects} pods and containers in {chunks} chunk(s), more than the limit of {}",
                self.limits.max_objects
            )));
        }
        if bytes > self.limits.max_bytes {
            return Err(DecodeError::Over(format!(
                "{bytes} bytes in {chunks} chunk(s), more than the limit of {}",
                self.limits.max_bytes
            )));
        }
        self.t.objects = objects;
        self.t.bytes = bytes;
        Ok(())
    }

    /// Counts one kept entry.
    fn entry(&mut self) -> Result<()> {
        let entries = self.t.entries + 1;
        if entries > self.limits.max_objects {
            return Err(DecodeError::Over(format!(
                "{entries} entries kept of the pods and containers in {} chunk(s), more than \
                 the limit of {}",
                self.t.chunks, self.limits.max_objects
            )));
        }
        self.t.entries = entries;
        Ok(())
    }
}

/// Decodes one chunk, counting from `before` (what the earlier chunks held). Returns the chunk
/// and the new totals.
pub(crate) fn decode_chunk(
    payload: &[u8],
    keep: &SyncKeep,
    limits: &SyncLimits,
    before: Totals,
) -> Result<(Chunk, Totals)> {
    let mut budget = Budget {
        limits,
        t: Totals {
            chunks: before.chunks + 1,
            ..before
        },
    };
    if budget.t.chunks > limits.max_chunks {
        return Err(DecodeError::Over(format!(
            "{} chunks, more than the limit of {}",
            budget.t.chunks, limits.max_chunks
        )));
    }
    let mut chunk = Chunk::default();
    walk(payload, |field, value| {
        match (field, value) {
            // Without an id nothing can refer to a pod or container: such ones are counted
            // and dropped rather than kept at hundreds of bytes each for 2 bytes sent.
            (1, Value::Bytes(b)) => {
                budget.object(b.len())?;
                match keep {
                    SyncKeep::All => chunk.pods.push(api::PodSandbox::parse_from_bytes(b)?),
                    SyncKeep::Only(k) => match pod(b, k, &mut budget)? {
                        p if p.id.is_empty() => chunk.nameless += 1,
                        p => chunk.pods.push(p),
                    },
                }
            }
            (2, Value::Bytes(b)) => {
                budget.object(b.len())?;
                match keep {
                    SyncKeep::All => chunk.containers.push(api::Container::parse_from_bytes(b)?),
                    SyncKeep::Only(k) => match container(b, k, &mut budget)? {
                        c if c.id.is_empty() => chunk.nameless += 1,
                        c => chunk.containers.push(c),
                    },
                }
            }
            (3, Value::Varint(v)) => chunk.more = v != 0,
            _ => {}
        }
        Ok(())
    })?;
    Ok((chunk, budget.t))
}

/// A field's value, borrowed from the message.
#[derive(Clone, Copy)]
pub(super) enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed-width value or a group, skipped.
    Other,
}

/// Calls `f` with each field of the encoded message `buf` in wire order; length-delimited
/// values are slices of `buf`, nothing is copied.
pub(super) fn walk<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u32, Value<'a>) -> Result<()>,
) -> Result<()> {
    let mut is = CodedInputStream::from_bytes(buf);
    while let Some(tag) = is.read_raw_tag_or_eof()? {
        let field = tag >> 3;
        if field == 0 {
            return Err(DecodeError::Wire("field number 0".into()));
        }
        let value = match WireType::new(tag & 7) {
            Some(WireType::Varint) => Value::Varint(is.read_raw_varint64()?),
            Some(WireType::LengthDelimited) => {
                let len = is.read_raw_varint32()?;
                let start = usize::try_from(is.pos()).unwrap_or(usize::MAX);
                let end = start
                    .checked_add(len as usize)
                    .filter(|e| *e <= buf.len())
                    .ok_or_else(|| DecodeError::Wire("truncated message".into()))?;
                is.skip_raw_bytes(len)?;
                Value::Bytes(&buf[start..end])
            }
            Some(w) => {
                is.skip_field(w)?;
                Value::Other
            }
            None => return Err(DecodeError::Wire(format!("wire type {}", tag & 7))),
        };
        f(field, value)?;
    }
    Ok(())
}

fn text(b: &[u8]) -> Result<String> {
    std::str::from_utf8(b)
        .map(str::to_owned)
        .map_err(|_| DecodeError::Wire("a string is not UTF-8".into()))
}

/// Key and value of a map entry (`key = 1`, `value = 2`), borrowed.
fn map_entry(b: &[u8]) -> Result<(&[u8], &[u8])> {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    walk(b, |field, v| {
        match (field, v) {
            (1, Value::Bytes(k)) => key = k,
            (2, Value::Bytes(x)) => value = x,
            _ => {}
        }
        Ok(())
    })?;
    Ok((key, value))
}

/// Adds the entry `b` of a string map to `map` when `wanted` says so for its key.
fn kept_map_entry(
    b: &[u8],
    map: &mut std::collections::HashMap<String, String>,
    budget: &mut Budget<'_>,
    wanted: impl Fn(&[u8]) -> bool,
) -> Result<()> {
    let (k, v) = map_entry(b)?;
    if wanted(k) {
        budget.entry()?;
        map.insert(text(k)?, text(v)?);
    }
    Ok(())
}

/// Whether annotation key `key` is in one of `domains`: `D/...` or `sub.D/...`.
fn in_domain(key: &[u8], domains: &[String]) -> bool {
    let Some(slash) = key.iter().position(|c| *c == b'/') else {
        return false;
    };
    let prefix = &key[..slash];
    domains.iter().any(|d| {
        let d = d.as_bytes();
        prefix == d
            || (prefix.len() > d.len()
                && prefix.ends_with(d)
                && prefix[prefix.len() - d.len() - 1] == b'.')
    })
}

/// Whether environment entry `entry` (`NAME=value`) names one of `names`.
fn env_wanted(entry: &[u8], names: &[String]) -> bool {
    let name = entry
        .iter()
        .position(|c| *c == b'=')
        .map_or(entry, |eq| &entry[..eq]);
    names.iter().any(|n| n.as_bytes() == name)
}

fn pod(b: &[u8], k: &KeptFields, budget: &mut Budget<'_>) -> Result<api::PodSandbox> {
    let mut p = api::PodSandbox::new();
    walk(b, |field, v| {
        match (field, v) {
            (1, Value::Bytes(x)) => p.id = text(x)?,
            (2, Value::Bytes(x)) => p.name = text(x)?,
            (3, Value::Bytes(x)) => p.uid = text(x)?,
            (4, Value::Bytes(x)) => p.namespace = text(x)?,
            (5, Value::Bytes(x)) => kept_map_entry(x, &mut p.labels, budget, |key| {
                k.labels.iter().any(|l| l.as_bytes() == key)
            })?,
            (6, Value::Bytes(x)) => kept_map_entry(x, &mut p.annotations, budget, |key| {
                in_domain(key, &k.annotation_domains)
            })?,
            (8, Value::Bytes(x)) => {
                let linux = p.linux.mut_or_insert_default();
                walk(x, |field, v| {
                    if let (2, Value::Bytes(r)) = (field, v) {
                        resources(r, linux.pod_resources.mut_or_insert_default(), budget)?;
                    }
                    Ok(())
                })?;
            }
            (9, Value::Varint(x)) => p.pid = x as u32,
            _ => {}
        }
        Ok(())
    })?;
    Ok(p)
}

fn container(b: &[u8], k: &KeptFields, budget: &mut Budget<'_>) -> Result<api::Container> {
    let mut c = api::Container::new();
    walk(b, |field, v| {
        match (field, v) {
            (1, Value::Bytes(x)) => c.id = text(x)?,
            (2, Value::Bytes(x)) => c.pod_sandbox_id = text(x)?,
            (3, Value::Bytes(x)) => c.name = text(x)?,
            (4, Value::Varint(x)) => c.state = EnumOrUnknown::from_i32(x as i32),
            (5, Value::Bytes(x)) => kept_map_entry(x, &mut c.labels, budget, |key| {
                k.labels.iter().any(|l| l.as_bytes() == key)
            })?,
            (6, Value::Bytes(x)) => kept_map_entry(x, &mut c.annotations, budget, |key| {
                in_domain(key, &k.annotation_domains)
            })?,
            (8, Value::Bytes(x)) if env_wanted(x, &k.env) => {
                budget.entry()?;
                c.env.push(text(x)?);
            }
            (9, Value::Bytes(x)) => {
                if let Some(m) = mount(x, &k.mount_prefixes)? {
                    budget.entry()?;
                    c.mounts.push(m);
                }
            }
            (11, Value::Bytes(x)) => linux(x, c.linux.mut_or_insert_default(), budget)?,
            (12, Value::Varint(x)) => c.pid = x as u32,
            (20, Value::Bytes(x)) => {
                budget.entry()?;
                c.CDI_devices.push(api::CDIDevice::parse_from_bytes(x)?);
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(c)
}

/// The mount `b` when its destination starts with one of `prefixes` (options left out).
fn mount(b: &[u8], prefixes: &[String]) -> Result<Option<api::Mount>> {
    let mut destination: &[u8] = &[];
    walk(b, |field, v| {
        if let (1, Value::Bytes(x)) = (field, v) {
            destination = x;
        }
        Ok(())
    })?;
    if !prefixes
        .iter()
        .any(|p| destination.starts_with(p.as_bytes()))
    {
        return Ok(None);
    }
    let mut m = api::Mount::new();
    walk(b, |field, v| {
        match (field, v) {
            (1, Value::Bytes(x)) => m.destination = text(x)?,
            (2, Value::Bytes(x)) => m.type_ = text(x)?,
            (3, Value::Bytes(x)) => m.source = text(x)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(Some(m))
}

/// `LinuxContainer`: device nodes, resources and cgroups path.
fn linux(b: &[u8], l: &mut api::LinuxContainer, budget: &mut Budget<'_>) -> Result<()> {
    walk(b, |field, v| {
        match (field, v) {
            (2, Value::Bytes(x)) => {
                budget.entry()?;
                l.devices.push(api::LinuxDevice::parse_from_bytes(x)?);
            }
            (3, Value::Bytes(x)) => resources(x, l.resources.mut_or_insert_default(), budget)?,
            (5, Value::Bytes(x)) => l.cgroups_path = text(x)?,
            _ => {}
        }
        Ok(())
    })
}

/// `LinuxResources`: memory, CPU, huge page limits and device rules (classes, unified and
/// pids left out). The huge page limits are what a record rebuilt after a lost state holds
/// per node: without them a restarted daemon would count those pages as free.
fn resources(b: &[u8], r: &mut api::LinuxResources, budget: &mut Budget<'_>) -> Result<()> {
    walk(b, |field, v| {
        match (field, v) {
            (1, Value::Bytes(x)) => {
                r.memory = protobuf::MessageField::some(api::LinuxMemory::parse_from_bytes(x)?)
            }
            (2, Value::Bytes(x)) => {
                r.cpu = protobuf::MessageField::some(api::LinuxCPU::parse_from_bytes(x)?)
            }
            (3, Value::Bytes(x)) => {
                budget.entry()?;
                r.hugepage_limits
                    .push(api::HugepageLimit::parse_from_bytes(x)?);
            }
            (7, Value::Bytes(x)) => {
                budget.entry()?;
                r.devices.push(api::LinuxDeviceCgroup::parse_from_bytes(x)?);
            }
            _ => {}
        }
        Ok(())
    })
}

#[cfg(test)]
#[path = "sync_decode_tests.rs"]
mod tests;
