//! Reading the spec directories into an index: every file bounded (count, size, symlinks
//! followed only where they end), every spec validated, every device node mapped to sysfs.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_devices::cdi_spec::{self, ContainerEdits, Format, Spec, MAX_SPEC_BYTES};

use super::reuse::{FileDevices, Stamp};
use super::sysfs::{self, NodeMap};
use super::{CdiDevice, CdiIndex, CdiTarget, SpecNode};

/// Most spec files read in all (a node with a claim per container has a few hundred).
pub const MAX_SPEC_FILES: usize = 16_384;

/// Most spec bytes read in one scan, all files together: what bounds the index's memory (a
/// device holds about what its part of the spec says). NVIDIA's spec of an 8-GPU host with
/// every MIG profile is under 100 KiB, a claim's spec a few KiB: this leaves room for
/// hundreds of those and keeps the index well inside the DaemonSet's memory limit (a rescan
/// shares the unchanged files' devices with the index it replaces, `reuse.rs`).
pub const MAX_TOTAL_SPEC_BYTES: u64 = 16 << 20;

/// Most devices kept from all spec files together.
pub const MAX_TOTAL_DEVICES: usize = 16_384;

/// A spec file not used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub file: PathBuf,
    /// Why.
    pub why: String,
}

/// What one read of the directories found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The usable devices.
    pub index: CdiIndex,
    /// Files not used.
    pub skipped: Vec<Skipped>,
    /// Spec files read (opened and parsed).
    pub files_read: u64,
    /// Files skipped because the total caps were reached ([`MAX_TOTAL_SPEC_BYTES`],
    /// [`MAX_TOTAL_DEVICES`]); each is in `skipped` too.
    pub over_cap: u64,
    /// The devices of each file used, for the next scan to take over where it is unchanged.
    pub files: FileDevices,
}

/// What a scan has left of the total caps.
struct Totals {
    bytes: u64,
    devices: usize,
}

/// Why a file is not used: broken, or over the total caps (counted apart, for the metric).
enum Refused {
    Broken(String),
    OverCap(String),
}

/// A file's devices: read now, or taken over from the scan before.
enum Got {
    Read(Box<Spec>, Stamp),
    Same(Stamp, Vec<Arc<CdiDevice>>),
}

/// Reads the specs of `dirs` (absolute, taken under `root`); later directories take precedence.
pub fn scan(root: &Path, dirs: &[PathBuf]) -> Scan {
    scan_after(root, dirs, &FileDevices::new())
}

/// [`scan`], taking over the devices of the files of `before` (the previous scan's
/// [`Scan::files`]) that have not changed since.
pub fn scan_after(root: &Path, dirs: &[PathBuf], before: &FileDevices) -> Scan {
    let mut out = Scan::default();
    let mut budget = MAX_SPEC_FILES;
    let mut totals = Totals {
        bytes: MAX_TOTAL_SPEC_BYTES,
        devices: MAX_TOTAL_DEVICES,
    };
    for dir in dirs {
        let full = root.join(dir.strip_prefix("/").unwrap_or(dir));
        let mut here: HashMap<String, Arc<CdiDevice>> = HashMap::new();
        let mut conflicts: Vec<String> = Vec::new();
        for file in spec_files(&full, &mut budget, &mut out.skipped) {
            let devs = match read(&file, &mut totals, before.get(&file)) {
                Ok(Got::Same(stamp, devs)) => {
                    out.files.insert(file.clone(), (stamp, devs.clone()));
                    devs
                }
                Ok(Got::Read(spec, stamp)) => {
                    out.files_read += 1;
                    let devs: Vec<Arc<CdiDevice>> = devices(root, &file, &spec)
                        .into_iter()
                        .map(Arc::new)
                        .collect();
                    out.files.insert(file.clone(), (stamp, devs.clone()));
                    devs
                }
                Err(Refused::Broken(why)) => {
                    out.skipped.push(Skipped { file, why });
                    continue;
                }
                Err(Refused::OverCap(why)) => {
                    out.over_cap += 1;
                    out.skipped.push(Skipped { file, why });
                    continue;
                }
            };
            for d in devs {
                if here.contains_key(&d.name) {
                    conflicts.push(d.name.clone());
                    out.skipped.push(Skipped {
                        file: file.clone(),
                        why: format!(
                            "device {} is declared by another spec of {}",
                            d.name,
                            full.display()
                        ),
                    });
                } else {
                    here.insert(d.name.clone(), d);
                }
            }
        }
        for c in conflicts {
            here.remove(&c);
        }
        // A later directory's device replaces an earlier one's of the same name.
        out.index.devices.extend(here);
    }
    out.index.build_lookups();
    out
}

/// The spec files of `dir`, sorted by name; counted against `budget`.
fn spec_files(dir: &Path, budget: &mut usize, skipped: &mut Vec<Skipped>) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        // A directory that does not exist (yet) holds no spec: not worth a line.
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.') && Format::of(n).is_some())
        })
        .collect();
    files.sort();
    if files.len() > *budget {
        for f in files.drain(*budget..) {
            skipped.push(Skipped {
                file: f,
                why: format!("more than {MAX_SPEC_FILES} spec files"),
            });
        }
    }
    *budget -= files.len();
    files
}

/// One file, bounded and never waited on: a link is resolved where it ends (a loop fails with
/// `ELOOP`; the reference library reads specs through links too), the file it ends at is
/// opened non-blocking without following a link again and checked on the descriptor
/// (`fstat`), so a FIFO or a device node, even one swapped in after the path was resolved, is
/// skipped, never waited on or read; never more than the size cap is read.
fn read(
    file: &Path,
    totals: &mut Totals,
    before: Option<&(Stamp, Vec<Arc<CdiDevice>>)>,
) -> Result<Got, Refused> {
    let over = || {
        Refused::OverCap(format!(
            "over the total cap of {MAX_TOTAL_SPEC_BYTES} bytes or {MAX_TOTAL_DEVICES} devices \
             across spec files"
        ))
    };
    // The file's bytes are checked from its size, before it is read, and count once it is
    // read whatever comes of it (they bound the scan's parsing work as well as the index);
    // its devices once parsed, before they are mapped and kept.
    if totals.devices == 0 {
        return Err(over());
    }
    let got = read_spec(file, &mut totals.bytes, over, before)?;
    let count = match &got {
        Got::Read(spec, _) => spec.devices.len(),
        Got::Same(_, devs) => devs.len(),
    };
    if count > totals.devices {
        return Err(over());
    }
    totals.devices -= count;
    Ok(got)
}

/// One file's spec (or its devices of `before`, when its bytes are the same), its size counted
/// against `bytes_left` (`over` when larger).
fn read_spec(
    file: &Path,
    bytes_left: &mut u64,
    over: impl FnOnce() -> Refused,
    before: Option<&(Stamp, Vec<Arc<CdiDevice>>)>,
) -> Result<Got, Refused> {
    let (f, len) = open_spec(file).map_err(Refused::Broken)?;
    if len > *bytes_left {
        return Err(over());
    }
    *bytes_left -= len;
    let mut bytes = Vec::with_capacity(len as usize);
    // No more than its size said (a file that grew since is cut, and refused as a bad spec).
    f.take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Broken(format!("cannot be read: {e}")))?;
    let stamp = Stamp::of(&bytes);
    if let Some((_, devs)) = before.filter(|(then, _)| *then == stamp) {
        return Ok(Got::Same(stamp, devs.clone()));
    }
    let spec = parse_spec(file, &bytes).map_err(Refused::Broken)?;
    Ok(Got::Read(Box::new(spec), stamp))
}

/// The spec file opened, and its size.
fn open_spec(file: &Path) -> Result<(std::fs::File, u64), String> {
    let real = std::fs::canonicalize(file).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            "symlink loop".to_string()
        } else {
            format!("cannot be read: {e}")
        }
    })?;
    let f = crate::untrusted::open_regular(&real, true).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => e.to_string(),
        _ => format!("cannot be read: {e}"),
    })?;
    let len = f
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?
        .len();
    if len > MAX_SPEC_BYTES as u64 {
        return Err(format!("{len} bytes, over the {MAX_SPEC_BYTES}-byte cap"));
    }
    Ok((f, len))
}

/// The spec in `bytes` (of `file`), validated, its device nodes under `/dev`.
fn parse_spec(file: &Path, bytes: &[u8]) -> Result<Spec, String> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let format = Format::of(name).unwrap_or(Format::Yaml);
    let spec = cdi_spec::parse(bytes, format).map_err(|e| e.to_string())?;
    let all_nodes = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits))
        .flat_map(|e| e.device_nodes.iter());
    for n in all_nodes {
        if !sysfs::is_dev_path(n.host()) {
            return Err(format!(
                "device node {} is outside /dev",
                crate::untrusted::quoted(n.host())
            ));
        }
    }
    Ok(spec)
}

/// The devices of `spec`, each with its own and the spec's edits, mapped on the host.
fn devices(root: &Path, file: &Path, spec: &Spec) -> Vec<CdiDevice> {
    // The spec-level edits are shared by every device: map their nodes once.
    let common = map_edits(root, &spec.container_edits);
    spec.devices
        .iter()
        .map(|d| {
            let own = map_edits(root, &d.container_edits);
            let mut dev = CdiDevice {
                name: format!("{}={}", spec.kind, d.name),
                spec: file.to_path_buf(),
                targets: own.targets,
                unmapped: own.unmapped,
                net_devices: own.net_devices,
                env: d.container_edits.env.clone(),
                mounts: own.mounts,
                nodes: own.nodes,
            };
            for t in &common.targets {
                if !dev.targets.contains(t) {
                    dev.targets.push(t.clone());
                }
            }
            dev.unmapped.extend(common.unmapped.iter().cloned());
            dev.net_devices.extend(common.net_devices.iter().cloned());
            dev.env.extend(spec.container_edits.env.iter().cloned());
            dev.mounts.extend(common.mounts.iter().cloned());
            for n in &common.nodes {
                if !dev.nodes.contains(n) {
                    dev.nodes.push(n.clone());
                }
            }
            dev
        })
        .collect()
}

#[derive(Default)]
struct Mapped {
    targets: Vec<CdiTarget>,
    unmapped: Vec<String>,
    net_devices: Vec<String>,
    mounts: Vec<String>,
    nodes: Vec<SpecNode>,
}

fn map_edits(root: &Path, edits: &ContainerEdits) -> Mapped {
    let mut m = Mapped::default();
    for n in &edits.device_nodes {
        // Where the spec leaves the type and numbers to the runtime, the runtime takes them
        // from the host node: so does the match-back, or two devices a vendor puts at one
        // container path (each container's `/dev/accel0`) would both match either container.
        let (kind, numbers) = if n.major != 0 {
            (n.kind.clone(), Some((n.major, n.minor)))
        } else if let Some((block, major, minor)) = sysfs::host_numbers(root, n) {
            let kind = match (n.kind.as_str(), block) {
                ("", true) => "b".to_string(),
                ("", false) => "c".to_string(),
                (k, _) => k.to_string(),
            };
            (kind, Some((major, minor)))
        } else {
            (n.kind.clone(), None)
        };
        let node = SpecNode {
            path: n.path.clone(),
            kind,
            numbers,
        };
        if !m.nodes.contains(&node) {
            m.nodes.push(node);
        }
        match sysfs::map_node(root, n) {
            NodeMap::Control => {}
            NodeMap::Targets(ts) => {
                for t in ts {
                    if !m.targets.contains(&t) {
                        m.targets.push(t);
                    }
                }
            }
            NodeMap::Unmapped(why) => m.unmapped.push(format!("{}: {why}", n.host())),
        }
    }
    m.net_devices = edits
        .net_devices
        .iter()
        .map(|n| n.host_interface_name.clone())
        .collect();
    m.mounts = edits
        .mounts
        .iter()
        .map(|x| x.container_path.clone())
        .collect();
    m
}
