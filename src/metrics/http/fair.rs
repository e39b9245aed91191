//! Which connections the metrics listener holds: at most a total, at most a share per client
//! address, and room for an address that holds few by closing a connection of the address
//! that holds the most.
//!
//! Every connection is accepted at once (nothing waits in the kernel's backlog, where a probe
//! queued behind thousands of idle connections timed out), then admitted or closed here. A
//! newcomer at the total cap takes the oldest connection of the address holding the most, when
//! that address holds more than the newcomer does: so the kubelet's probe, from an address of
//! its own, is always served at once, while clients that already hold their share only trade
//! places among themselves.
//!
//! The probe's address is not always its own: the kubelet probes from the node's address, which
//! every host-network client on the node shares. So a newcomer from an address at its share
//! takes the place of that address's oldest connection still waiting for its request (never
//! one whose request is in and being answered): slow or idle connections make way for the
//! newest, and a probe, which sends its request as soon as it is connected, is answered even
//! while its own address holds its share of slow requests. Only when every connection of the
//! address is being answered is the newcomer closed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// The connections held, by id (ids grow with time: the lowest is the oldest).
#[derive(Default)]
pub(super) struct Table {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
}

struct Entry {
    peer: IpAddr,
    /// Ends the connection's task; set once the task is spawned.
    abort: Option<AbortHandle>,
    /// Its request is in and being answered ([`Table::answering`]): not closed for a newcomer
    /// of the same address.
    answering: bool,
}

/// What to do with a new connection.
pub(super) enum Admission {
    /// Serve it; its place is given back when the slot drops.
    Admitted(Slot),
    /// Close it at once: its address holds its share already, every connection of it being
    /// answered.
    Refused,
}

/// A held connection's place in the table.
pub(super) struct Slot {
    table: Arc<Table>,
    id: u64,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `peer` when the address holds fewer than `per_peer` and the
    /// table fewer than `total`, or when a connection can be closed for it (aborted here): at
    /// the address's share, its oldest one still waiting for its request; at the total, the
    /// oldest of an address holding more than `peer` does.
    pub(super) fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        total: usize,
        per_peer: usize,
    ) -> Admission {
        let mut t = self.lock();
        let held = t.per_peer.get(&peer).copied().unwrap_or(0);
        if held >= per_peer.max(1) {
            match t.oldest_waiting_of(peer) {
                Some(id) => t.close(id),
                None => return Admission::Refused,
            }
        } else if t.conns.len() >= total.max(1) {
            match t.victim(held) {
                Some(id) => t.close(id),
                None => return Admission::Refused,
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let entry = Entry {
            peer,
            abort: None,
            answering: false,
        };
        t.conns.insert(id, entry);
        *t.per_peer.entry(peer).or_insert(0) += 1;
        Admission::Admitted(Slot {
            table: self.clone(),
            id,
        })
    }

    /// Hands the table the way to end connection `id`'s task, for when another address needs
    /// its place. A connection already closed for one (before its task was spawned) is
    /// aborted at once.
    pub(super) fn set_abort(&self, id: u64, abort: AbortHandle) {
        let mut t = self.lock();
        match t.conns.get_mut(&id) {
            Some(e) => e.abort = Some(abort),
            None => abort.abort(),
        }
    }

    /// Connection `id` has sent its request and is being answered: from now on it keeps its
    /// place until it is done.
    pub(super) fn answering(&self, id: u64) {
        if let Some(e) = self.lock().conns.get_mut(&id) {
            e.answering = true;
        }
    }

    /// Connections held now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().conns.len()
    }
}

impl Inner {
    /// The oldest connection of the address holding the most (ties: the one whose connection
    /// is oldest), when that address holds more than `held`.
    fn victim(&self, held: usize) -> Option<u64> {
        let (peer, count) = self
            .per_peer
            .iter()
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(self.oldest_of(**p))))?;
        if *count <= held {
            return None;
        }
        self.oldest_of(*peer)
    }

    /// The oldest connection of `peer` still waiting for its request.
    fn oldest_waiting_of(&self, peer: IpAddr) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, e)| e.peer == peer && !e.answering)
            .map(|(id, _)| *id)
            .min()
    }

    /// Removes connection `id` and ends its task (or, not spawned yet, its task is ended as
    /// it is handed over: [`Table::set_abort`]).
    fn close(&mut self, id: u64) {
        if let Some(abort) = self.remove(id).and_then(|e| e.abort) {
            abort.abort();
        }
    }

    fn oldest_of(&self, peer: IpAddr) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, e)| e.peer == peer)
            .map(|(id, _)| *id)
            .min()
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.conns.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&e.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_peer.remove(&e.peer);
            }
        }
        Some(e)
    }
}

impl Slot {
    /// The connection's id in the table.
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.lock().remove(self.id);
    }
}

#[cfg(test)]
#[path = "fair_tests.rs"]
mod tests;
