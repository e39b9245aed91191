//! The heap a CreateContainer or UpdateContainer takes is bounded like a Synchronize's: the
//! shapes that took hundreds of MiB decoded whole (4 MiB of empty mounts: 348 MiB; 2 million
//! empty variables: 120 MiB) are refused before they are decoded, within twice their size on
//! the plugin's side, and a request at the bound is served. Its own test binary: a counting
//! global allocator measures the heap, which a test running beside it would disturb.
// Test helpers outside #[test] fns unwrap too: any failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use nri_protocol::api;
use nri_protocol::services::PLUGIN_SERVICE;
use nri_protocol::stub::EventLimits;
use protobuf::Message as _;
use test_support::nri_sim::*;

/// The system allocator, counting the bytes currently allocated and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let now = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            // Counted as the new block allocated before the old one is freed, as a move does.
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;

/// A varint.
fn varint(mut v: usize, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A request (`pod = 1`, `container = 2`) whose container holds `n` copies of the empty entry
/// `entry` (its tag and a zero length: 2 bytes each), written by hand: built as generated
/// types on the runtime's side, the shape would cost this process what it costs the plugin.
fn with_empty_entries(entry: u8, n: usize) -> Vec<u8> {
    let mut container = api::Container {
        id: "c1".into(),
        name: "app".into(),
        pod_sandbox_id: "p1".into(),
        ..Default::default()
    }
    .write_to_bytes()
    .unwrap();
    container.reserve(2 * n);
    for _ in 0..n {
        container.extend_from_slice(&[entry, 0]);
    }
    let mut req = vec![0x0a];
    let pod = pod("p1").write_to_bytes().unwrap();
    varint(pod.len(), &mut req);
    req.extend_from_slice(&pod);
    req.push(0x12);
    varint(container.len(), &mut req);
    req.extend_from_slice(&container);
    req
}

const MOUNT: u8 = 0x4a; // Container.mounts = 9, length-delimited
const ENV: u8 = 0x42; // Container.env = 8, length-delimited

/// Sends `payload` as `method` and returns the answer's status code and message, with the
/// peak of the heap over the live heap before, in bytes.
async fn send(rt: &RuntimeSide, method: &str, payload: Vec<u8>) -> (ttrpc::Code, String, usize) {
    let req = ttrpc::Request {
        service: PLUGIN_SERVICE.into(),
        method: method.into(),
        payload,
        timeout_nano: STEP.as_nanos() as i64,
        ..Default::default()
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let answer = rt.raw.request(req).await;
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    match answer {
        Ok(_) => (ttrpc::Code::OK, String::new(), peak),
        Err(e) => {
            let (code, message) = status_code(&e);
            (code, message, peak)
        }
    }
}

// Current-thread like the other stub tests (see sync_memory.rs).
#[tokio::test]
async fn containers_of_millions_of_empty_entries_are_refused_within_twice_their_size() {
    let limits = EventLimits::default();
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.1", "", "").await.unwrap();
    wait_connected(&setup.handle).await;

    // Within ttrpc's 4 MiB message: 2 million entries of 2 bytes.
    let n = 2_000_000;
    for (method, entry, what) in [
        ("CreateContainer", MOUNT, "empty mounts"),
        ("CreateContainer", ENV, "empty variables"),
        ("UpdateContainer", ENV, "empty variables"),
    ] {
        let payload = with_empty_entries(entry, n);
        let size = payload.len();
        let (code, message, peak) = send(&rt, method, payload).await;
        assert_eq!(code, ttrpc::Code::RESOURCE_EXHAUSTED, "{method}: {message}");
        assert!(
            message.contains(&format!("{method} from the runtime is too large"))
                && message.contains(&format!("more than {} entries", limits.max_entries)),
            "{message}"
        );
        // Both sides together: the simulated runtime's encoding of the request, the frames
        // between the two, and the plugin's copy as ttrpc read it.
        eprintln!(
            "{method} of {:.1} MiB of {what}: heap peak {:.1} MiB over the baseline",
            size as f64 / MIB as f64,
            peak as f64 / MIB as f64
        );
        assert!(
            peak <= 2 * size,
            "{method} of {size} bytes of {what}: the heap grew {peak} bytes"
        );
    }

    // At the bound: served, and what it costs decoded is bounded too.
    let at_bound = limits.max_entries - 2;
    for (entry, what) in [(MOUNT, "empty mounts"), (ENV, "empty variables")] {
        let payload = with_empty_entries(entry, at_bound);
        let (code, message, peak) = send(&rt, "CreateContainer", payload).await;
        assert_eq!(code, ttrpc::Code::OK, "{message}");
        eprintln!(
            "CreateContainer of {at_bound} {what}: heap peak {:.1} MiB over the baseline",
            peak as f64 / MIB as f64
        );
        assert!(peak <= 16 * MIB, "{at_bound} {what} took {peak} bytes");
    }
    setup.task.abort();
}
