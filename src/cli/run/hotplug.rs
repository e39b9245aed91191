//! The daemon's hot-plug follower: re-reads the online CPUs and memory nodes at least every
//! [`POLL`] and, on the live host, whenever the kernel announces a CPU, memory block or node
//! change over its uevent socket (netlink `NETLINK_KOBJECT_UEVENT`, the socket udev listens
//! on). Every container event re-reads them too (`AlignPlugin::follow_hotplug`), so the timer
//! only matters on a quiet node, and the uevents only make a quiet node's answer prompt. Under
//! `--host-root` there are no uevents to hear: the tree is not the kernel's, and tests flip
//! its files.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{
    bind, recv, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use tokio::sync::Notify;

use crate::enforce::engine::Placer;
use crate::enforce::nri::AlignPlugin;

/// How often the online files are read without any event.
pub const POLL: Duration = Duration::from_secs(10);

/// How long after a uevent the files are read: offlining several CPUs sends one uevent each,
/// and one read after the burst moves the shared containers once.
const SETTLE: Duration = Duration::from_millis(100);

/// The kernel's uevent multicast group (`lib/kobject_uevent.c` sends on group 1).
const KERNEL_GROUP: u32 = 1;

/// Opens the kernel's uevent socket; `None` (logged) where it cannot be had. Needs no
/// capability: the kernel lets any process receive uevents.
pub fn open_uevents() -> Option<OwnedFd> {
    let opened = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkKObjectUEvent,
    )
    .and_then(|fd| {
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, KERNEL_GROUP))?;
        Ok(fd)
    });
    match opened {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!("kernel uevents not followed ({e}): CPU hot-plug is seen at the next container event or within {}s", POLL.as_secs());
            None
        }
    }
}

/// Whether a uevent (`ACTION@DEVPATH\0KEY=VALUE\0...`) is about a CPU, a memory block or a
/// NUMA node.
pub fn is_topology_event(msg: &[u8]) -> bool {
    let head = msg.split(|b| *b == 0).next().unwrap_or_default();
    let Some(at) = head.iter().position(|b| *b == b'@') else {
        return false;
    };
    let path = &head[at + 1..];
    [
        b"/devices/system/cpu/".as_slice(),
        b"/devices/system/memory/".as_slice(),
        b"/devices/system/node/".as_slice(),
    ]
    .iter()
    .any(|p| path.starts_with(p))
}

/// Follows hot-plug for `plugin` from now on: a task that re-reads on the timer and after
/// each topology uevent of `uevents` (read on a thread of its own).
pub fn spawn<P: Placer + 'static>(plugin: Arc<AlignPlugin<P>>, uevents: Option<OwnedFd>) {
    let wake = Arc::new(Notify::new());
    if let Some(fd) = uevents {
        let notify = wake.clone();
        let listener = std::thread::Builder::new()
            .name("uevents".into())
            .spawn(move || listen(&fd, &notify));
        if let Err(e) = listener {
            tracing::warn!("kernel uevents not followed: {e}");
        }
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = wake.notified() => tokio::time::sleep(SETTLE).await,
            }
            plugin.follow_hotplug();
        }
    });
}

fn listen(fd: &OwnedFd, wake: &Notify) {
    // A uevent is at most a page or two; a longer datagram is cut, which only loses its tail.
    let mut buf = vec![0u8; 8192];
    loop {
        match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) if is_topology_event(&buf[..n]) => wake.notify_one(),
            // The socket overflowed: events were lost, so read the files.
            Err(nix::errno::Errno::ENOBUFS) => wake.notify_one(),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!("kernel uevents no longer followed ({e}): hot-plug is seen at the next container event or within {}s", POLL.as_secs());
                return;
            }
        }
    }
}

#[cfg(test)]
#[path = "hotplug_tests.rs"]
mod tests;
