//! Which NRI release a runtime speaks, and what that release supports.
//!
//! v0.12+ runtimes report their NRI version in `ConfigureRequest.NRI_version`; older ones
//! only give `runtime_name`/`runtime_version`, from which the NRI version is inferred with
//! the table upstream keeps in `pkg/api/version.go`. Features are gated on the result,
//! most importantly the event mask: a runtime drops a plugin that subscribes to an event it
//! does not know.

use std::fmt;
use std::time::Duration;

use crate::api::{ConfigureRequest, Event, EventMask};

/// A semantic version `major.minor.patch` (pre-release and build suffixes are ignored:
/// `v0.9.1-0.20250219030224-e597e7849f24` compares as 0.9.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SemVer {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl SemVer {
    /// Builds a version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        SemVer {
            major,
            minor,
            patch,
        }
    }

    /// Parses `v1.7.24`, `1.7.24`, `1.7.24~ds1-6`, `2.1.0-rc.1`, `1.7` (patch 0). Returns
    /// `None` when no leading `major.minor` is present.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let core_end = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let mut parts = text[..core_end].split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            None | Some("") => 0,
            Some(p) => p.parse().ok()?,
        };
        Some(SemVer::new(major, minor, patch))
    }
}

impl fmt::Display for SemVer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// First NRI release with UpdatePodSandbox, PostUpdatePodSandbox and
/// ValidateContainerAdjustment events (12..14); earlier releases know events 1..11 only.
pub const NRI_POD_UPDATE_EVENTS: SemVer = SemVer::new(0, 10, 0);
/// First NRI release whose runtime calls one RPC per event, falling back to StateChange
/// only when the plugin answers Unimplemented; it also reports its NRI version and reads
/// `ConfigureResponse.request_timeout`.
pub const NRI_PER_EVENT_RPCS: SemVer = SemVer::new(0, 12, 0);
/// First NRI release that sends Synchronize to the plugins the runtime launched itself
/// (`startPlugins` of pkg/adaptation); earlier ones only synchronize plugins that connect.
pub const NRI_SYNC_LAUNCHED: SemVer = SemVer::new(0, 7, 0);

/// Events a runtime speaking NRI `nri` accepts in a subscription. An unknown version gets
/// the set every NRI v0.2+ runtime knows.
pub fn supported_events(nri: Option<SemVer>) -> EventMask {
    match nri {
        Some(v) if v >= NRI_POD_UPDATE_EVENTS => {
            EventMask::up_to(Event::VALIDATE_CONTAINER_ADJUSTMENT)
        }
        _ => EventMask::up_to(Event::REMOVE_CONTAINER),
    }
}

/// NRI release used by `runtime` at `version`, from upstream's table of runtime releases
/// (containerd/nri `pkg/api/version.go`). `None` for runtimes or versions not covered.
pub fn infer_nri_version(runtime: &str, version: &str) -> Option<SemVer> {
    let v = SemVer::parse(version)?;
    let (maj, min, pat) = (v.major, v.minor, v.patch);
    let nri = match runtime {
        "containerd" | "io.containerd" => match (maj, min) {
            (1, 7) => match pat {
                0..=6 => (0, 3, 0),
                7..=13 => (0, 4, 0),
                14..=15 => (0, 6, 0),
                16..=25 => (0, 6, 1),
                _ => (0, 8, 0),
            },
            (2, 0) | (2, 1) => (0, 8, 0),
            (2, 2) if pat == 0 => (0, 10, 0),
            (2, 2) => (0, 11, 0),
            // 2.3 and later report NRI_version themselves; assume at least v0.11 if not.
            (2, m) if m >= 3 => (0, 11, 0),
            (m, _) if m >= 3 => (0, 11, 0),
            _ => return None,
        },
        "cri-o" | "crio" | "CRI-O" => match (maj, min) {
            (1, 26) => match pat {
                0..=1 => (0, 2, 0),
                2..=3 => (0, 3, 0),
                _ => (0, 3, 1),
            },
            (1, 27) if pat == 0 => (0, 3, 0),
            (1, 27) | (1, 28) => (0, 3, 1),
            (1, 29) if pat <= 1 => (0, 5, 0),
            (1, 29) | (1, 30) => (0, 6, 0),
            (1, 31) => (0, 6, 1),
            (1, 32) => (0, 9, 0),
            (1, 33) => (0, 9, 1),
            (1, 34) => (0, 10, 0),
            (1, m) if m >= 35 => (0, 11, 0),
            _ => return None,
        },
        _ => return None,
    };
    Some(SemVer::new(nri.0, nri.1, nri.2))
}

/// Where [`RuntimeInfo::nri_version`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NriVersionSource {
    /// The runtime reported it (`ConfigureRequest.NRI_version`, v0.12+).
    Reported,
    /// Inferred from the runtime's name and version.
    Inferred,
    /// Neither worked: treat the runtime as the oldest supported NRI.
    Unknown,
}

/// What the runtime told the plugin about itself in Configure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// Runtime name, e.g. `containerd` or `cri-o`.
    pub name: String,
    /// Runtime version as reported, e.g. `v1.7.24` or `1.7.24~ds1`.
    pub version: String,
    /// NRI release of the runtime, if known.
    pub nri_version: Option<SemVer>,
    /// How `nri_version` was obtained.
    pub nri_version_source: NriVersionSource,
    /// Registration timeout configured in the runtime (0 if not sent).
    pub registration_timeout: Duration,
    /// Per-request timeout configured in the runtime (0 if not sent).
    pub request_timeout: Duration,
}

impl RuntimeInfo {
    /// Extracts the runtime description from a Configure request.
    pub fn from_configure(req: &ConfigureRequest) -> Self {
        let reported = SemVer::parse(&req.NRI_version);
        let inferred = || infer_nri_version(&req.runtime_name, &req.runtime_version);
        let (nri_version, nri_version_source) = match reported {
            Some(v) => (Some(v), NriVersionSource::Reported),
            None => match inferred() {
                Some(v) => (Some(v), NriVersionSource::Inferred),
                None => (None, NriVersionSource::Unknown),
            },
        };
        let millis = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        RuntimeInfo {
            name: req.runtime_name.clone(),
            version: req.runtime_version.clone(),
            nri_version,
            nri_version_source,
            registration_timeout: millis(req.registration_timeout),
            request_timeout: millis(req.request_timeout),
        }
    }

    /// Events this runtime accepts in a subscription.
    pub fn supported_events(&self) -> EventMask {
        supported_events(self.nri_version)
    }

    /// Whether the runtime sends Synchronize to a plugin it launched (NRI v0.7.0 and later).
    /// An unknown NRI version counts as the oldest, which does not.
    pub fn synchronizes_launched_plugins(&self) -> bool {
        self.nri_at_least(NRI_SYNC_LAUNCHED)
    }

    /// Whether the runtime's NRI is at least `version`.
    pub fn nri_at_least(&self, version: SemVer) -> bool {
        self.nri_version.is_some_and(|v| v >= version)
    }
}

impl fmt::Display for RuntimeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)?;
        match (self.nri_version, self.nri_version_source) {
            (Some(v), NriVersionSource::Reported) => write!(f, " (NRI {v})"),
            (Some(v), _) => write!(f, " (NRI {v}, inferred)"),
            (None, _) => write!(f, " (NRI version unknown)"),
        }
    }
}

#[cfg(test)]
#[path = "version_tests.rs"]
mod tests;
