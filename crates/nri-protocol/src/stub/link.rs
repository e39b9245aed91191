//! The life of the runtime connection as the stub sees it ([`LinkState`]), published through a
//! watch channel so that health endpoints, metrics and service managers follow it without
//! knowing the protocol. Every way a connection ends (the runtime closing it, a broken stream,
//! a stop) goes through the stub's session loop, which is the only writer of the phase; so a
//! new way of detecting a dead connection only has to end the session to be reported here.

use std::fmt;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::version::RuntimeInfo;

/// Where a connection is in the NRI handshake. Ordered: a connection only moves forward until
/// it ends, which starts the next one at [`LinkPhase::Connecting`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LinkPhase {
    /// Dialing the socket or registering (also between connections, waiting to retry).
    Connecting,
    /// RegisterPlugin answered; the runtime has not configured the plugin yet.
    Registered,
    /// Configure answered; Synchronize not yet done.
    Configured,
    /// The last chunk of Synchronize answered: the plugin knows every pod and container and
    /// sees every event from now on.
    Synchronized,
    /// The stub stopped for good (stop requested, or a launched plugin's connection ended).
    Stopped,
}

/// The runtime connection's state: what the stub publishes to
/// [`RuntimeHandle::link`](super::RuntimeHandle::link) subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    /// Phase of the current connection.
    pub phase: LinkPhase,
    /// Where the runtime is: the socket path, or `inherited fd N`.
    pub endpoint: String,
    /// Whether the runtime launched the plugin (inherited socket).
    pub launched: bool,
    /// The runtime of the current connection, once it sent Configure.
    pub runtime: Option<RuntimeInfo>,
    /// Failed attempts to connect and register since the last successful registration.
    pub failed_attempts: u32,
    /// Why the previous connection ended or the last attempt failed.
    pub last_error: Option<String>,
    /// When the next attempt is due, while waiting to retry.
    pub retry_at: Option<Instant>,
    /// Successful registrations since the stub started (more than one: reconnections).
    pub registrations: u64,
    /// The last attempt found no socket at the endpoint: the runtime is not running or has
    /// NRI disabled (`/readyz` says so first).
    pub socket_missing: bool,
    /// Number of the current connection attempt; events of an older connection that arrive
    /// late (a Configure racing the hang-up) never move a newer one forward.
    pub(crate) connection: u64,
}

impl LinkState {
    fn new(endpoint: String, launched: bool) -> Self {
        LinkState {
            phase: LinkPhase::Connecting,
            endpoint,
            launched,
            runtime: None,
            failed_attempts: 0,
            last_error: None,
            retry_at: None,
            registrations: 0,
            socket_missing: false,
            connection: 0,
        }
    }

    /// Whether the plugin is registered and has caught up with the runtime on the current
    /// connection: Synchronize answered, or, for a plugin launched by a runtime that sends
    /// launched plugins no Synchronize (NRI before v0.7.0), Configure answered.
    pub fn is_ready(&self) -> bool {
        match self.phase {
            LinkPhase::Synchronized => true,
            LinkPhase::Configured => {
                self.launched
                    && self
                        .runtime
                        .as_ref()
                        .is_some_and(|r| !r.synchronizes_launched_plugins())
            }
            _ => false,
        }
    }
}

impl fmt::Display for LinkState {
    /// One line for logs, `/readyz` and systemd's STATUS=.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime = |f: &mut fmt::Formatter<'_>| match &self.runtime {
            Some(r) => write!(f, " with {r}"),
            None => Ok(()),
        };
        match self.phase {
            LinkPhase::Connecting if self.socket_missing => {
                write!(
                    f,
                    "nri: socket missing: {} (is NRI enabled in the runtime?)",
                    self.endpoint
                )?;
                if self.failed_attempts > 0 {
                    write!(f, ", {} failed attempt(s)", self.failed_attempts)?;
                }
                Ok(())
            }
            LinkPhase::Connecting => {
                write!(f, "connecting to {}", self.endpoint)?;
                if self.failed_attempts > 0 {
                    write!(f, ", {} failed attempt(s)", self.failed_attempts)?;
                }
                if let Some(at) = self.retry_at {
                    let left = at.saturating_duration_since(Instant::now());
                    write!(f, ", next in {}", seconds(left))?;
                }
                if let Some(e) = &self.last_error {
                    write!(f, "; last: {e}")?;
                }
                Ok(())
            }
            LinkPhase::Registered => {
                write!(f, "registered at {}, waiting for Configure", self.endpoint)
            }
            LinkPhase::Configured if self.is_ready() => {
                write!(f, "registered")?;
                runtime(f)?;
                write!(f, " (launched; this NRI sends no Synchronize)")
            }
            LinkPhase::Configured => {
                write!(f, "configured")?;
                runtime(f)?;
                write!(f, ", waiting for Synchronize")
            }
            LinkPhase::Synchronized => {
                write!(f, "registered and synchronized")?;
                runtime(f)
            }
            LinkPhase::Stopped => {
                write!(f, "stopped")?;
                match &self.last_error {
                    Some(e) => write!(f, ": {e}"),
                    None => Ok(()),
                }
            }
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The stub's side of the channel: the only code that changes the state.
pub(crate) struct LinkTracker {
    tx: watch::Sender<LinkState>,
}

impl LinkTracker {
    pub(crate) fn new(endpoint: String, launched: bool) -> Self {
        let (tx, _) = watch::channel(LinkState::new(endpoint, launched));
        LinkTracker { tx }
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<LinkState> {
        self.tx.subscribe()
    }

    pub(crate) fn current(&self) -> LinkState {
        self.tx.borrow().clone()
    }

    /// A new connection attempt starts; returns its number.
    pub(crate) fn attempt(&self) -> u64 {
        let mut n = 0;
        self.tx.send_modify(|s| {
            s.connection += 1;
            n = s.connection;
            s.phase = LinkPhase::Connecting;
            s.runtime = None;
            s.retry_at = None;
        });
        n
    }

    /// The attempt failed or the connection ended; the next one is due in `retry_in`.
    pub(crate) fn failed(&self, why: String, retry_in: Duration, registered: bool) {
        self.tx.send_modify(|s| {
            s.phase = LinkPhase::Connecting;
            s.runtime = None;
            if !registered {
                s.failed_attempts = s.failed_attempts.saturating_add(1);
            }
            s.last_error = Some(why);
            s.retry_at = Instant::now().checked_add(retry_in);
        });
    }

    /// Whether the last attempt found no socket at the endpoint.
    pub(crate) fn set_socket_missing(&self, missing: bool) {
        self.tx.send_if_modified(|s| {
            let changed = s.socket_missing != missing;
            s.socket_missing = missing;
            changed
        });
    }

    /// Connection `connection` registered.
    pub(crate) fn registered(&self, connection: u64) {
        self.tx.send_if_modified(|s| {
            if s.connection != connection {
                return false;
            }
            s.registrations += 1;
            s.failed_attempts = 0;
            s.socket_missing = false;
            s.retry_at = None;
            s.phase = s.phase.max(LinkPhase::Registered);
            true
        });
    }

    /// Connection `connection` answered Configure from `runtime`.
    pub(crate) fn configured(&self, connection: u64, runtime: RuntimeInfo) {
        self.advance(connection, LinkPhase::Configured, Some(runtime));
    }

    /// Connection `connection` answered the last chunk of Synchronize.
    pub(crate) fn synchronized(&self, connection: u64) {
        self.advance(connection, LinkPhase::Synchronized, None);
    }

    /// The stub stopped for good.
    pub(crate) fn stopped(&self, why: String) {
        self.tx.send_modify(|s| {
            s.phase = LinkPhase::Stopped;
            s.runtime = None;
            s.retry_at = None;
            s.last_error = Some(why);
        });
    }

    fn advance(&self, connection: u64, phase: LinkPhase, runtime: Option<RuntimeInfo>) {
        self.tx.send_if_modified(|s| {
            // Configure and the RegisterPlugin reply travel on different streams and may be
            // seen in either order; a phase never goes back within one connection.
            if s.connection != connection || s.phase >= phase || s.phase == LinkPhase::Stopped {
                return false;
            }
            s.phase = phase;
            if let Some(r) = runtime {
                s.runtime = Some(r);
            }
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConfigureRequest;

    fn runtime(name: &str, version: &str) -> RuntimeInfo {
        RuntimeInfo::from_configure(&ConfigureRequest {
            runtime_name: name.into(),
            runtime_version: version.into(),
            ..Default::default()
        })
    }

    #[test]
    fn a_missing_socket_says_so_with_its_path_until_registered() {
        let t = LinkTracker::new("/var/run/nri/nri.sock".into(), false);
        let c1 = t.attempt();
        t.set_socket_missing(true);
        t.failed("no such file".into(), Duration::from_secs(5), false);
        assert_eq!(
            t.current().to_string(),
            "nri: socket missing: /var/run/nri/nri.sock (is NRI enabled in the runtime?), \
             1 failed attempt(s)"
        );
        t.registered(c1);
        assert!(!t.current().socket_missing);
    }

    #[test]
    fn ready_only_after_synchronize_on_the_current_connection() {
        let t = LinkTracker::new("/run/nri.sock".into(), false);
        let rx = t.subscribe();
        let c1 = t.attempt();
        assert!(!rx.borrow().is_ready());
        // Configure seen before the RegisterPlugin reply: the phase still only moves forward.
        t.configured(c1, runtime("containerd", "2.1.9"));
        t.registered(c1);
        assert_eq!(rx.borrow().phase, LinkPhase::Configured);
        assert!(
            !rx.borrow().is_ready(),
            "external plugins wait for Synchronize"
        );
        t.synchronized(c1);
        assert!(rx.borrow().is_ready());
        assert_eq!(rx.borrow().registrations, 1);
        assert!(
            rx.borrow()
                .to_string()
                .starts_with("registered and synchronized with containerd 2.1.9"),
            "{}",
            *rx.borrow()
        );

        // The runtime goes away: not ready, says why and when the next try is.
        t.failed(
            "runtime closed the connection".into(),
            Duration::from_secs(4),
            true,
        );
        let s = rx.borrow().clone();
        assert!(!s.is_ready());
        let text = s.to_string();
        assert!(
            text.starts_with("connecting to /run/nri.sock, next in ")
                && text.ends_with("; last: runtime closed the connection"),
            "{text}"
        );
        let c2 = t.attempt();
        t.failed("connection refused".into(), Duration::from_secs(1), false);
        assert!(t.current().to_string().contains("1 failed attempt(s)"));
        // A late Synchronize of the old connection does not make the new one ready.
        t.synchronized(c1);
        assert!(!t.current().is_ready());
        let c3 = t.attempt();
        assert!(c3 > c2);
        t.registered(c3);
        t.configured(c3, runtime("cri-o", "1.34.11"));
        t.synchronized(c3);
        assert!(t.current().is_ready());
        assert_eq!(t.current().registrations, 2);
        assert_eq!(t.current().failed_attempts, 0);
        t.stopped("stop requested".into());
        assert!(!t.current().is_ready());
        assert_eq!(t.current().to_string(), "stopped: stop requested");
    }

    #[test]
    fn a_plugin_launched_by_nri_v0_6_is_ready_after_configure() {
        for (version, ready) in [("1.7.24", true), ("2.1.9", false), ("1.7.27", false)] {
            let t = LinkTracker::new("inherited fd 3".into(), true);
            let c = t.attempt();
            t.registered(c);
            t.configured(c, runtime("containerd", version));
            assert_eq!(t.current().is_ready(), ready, "containerd {version}");
            if ready {
                assert!(t.current().to_string().contains("sends no Synchronize"));
            }
        }
        // The same runtime dialed by an external plugin sends Synchronize: wait for it.
        let t = LinkTracker::new("/run/nri.sock".into(), false);
        let c = t.attempt();
        t.configured(c, runtime("containerd", "1.7.24"));
        assert!(!t.current().is_ready());
    }
}
