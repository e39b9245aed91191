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
#[path = "link_tests.rs"]
mod tests;
