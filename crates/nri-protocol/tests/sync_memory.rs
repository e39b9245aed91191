//! The heap a chunked Synchronize takes is bounded, and given back when the connection ends:
//! a runtime that sends `more=true` chunks without end is refused at the stub's default
//! limit, and after it hangs up and the stub reconnects the chunks are no longer held.
//! Its own test binary: a counting global allocator measures the live heap, which a test
//! running beside it would disturb.
// Test helpers outside #[test] fns unwrap too: any failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use nri_protocol::api;
use nri_protocol::stub::SyncLimits;
use test_support::nri_sim::*;

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
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
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;

fn live_mib() -> usize {
    LIVE.load(Ordering::Relaxed) / MIB
}

// Current-thread like the other stub tests: on a multi-threaded runtime the test runtime's mux
// (test_support::nri_sim) may read the plugin's RegisterPlugin before it opens that connection id, and
// drop it.
#[tokio::test]
async fn endless_synchronize_chunks_are_refused_at_the_default_limit_and_freed_on_reconnect() {
    let limits = SyncLimits::default();
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.1", "", "").await.unwrap();
    let baseline = live_mib();

    // The report's runtime: chunk after chunk with more=true (here 256 KiB each), never a
    // last one. The default byte limit must stop it.
    let pad = 256 * 1024;
    let mut refused_at = None;
    let mut peak = 0;
    for i in 0..2000 {
        let req = api::SynchronizeRequest {
            containers: vec![{
                let mut c = container(&format!("c{i}"), "app");
                c.env = vec!["X".repeat(pad)];
                c
            }],
            more: true,
            ..Default::default()
        };
        match rt.plugin.synchronize(ctx(), &req).await {
            Ok(reply) => assert!(reply.more),
            Err(err) => {
                let (code, message) = status_code(&err);
                assert_eq!(code, ttrpc::Code::RESOURCE_EXHAUSTED, "{message}");
                refused_at = Some(i);
                break;
            }
        }
        peak = peak.max(live_mib());
    }
    let refused_at = refused_at.expect("2000 chunks of 256 KiB were all accepted");
    let limit_mib = (limits.max_bytes as usize) / MIB;
    assert!(
        refused_at <= limit_mib * MIB / pad + 1,
        "refused only at chunk {refused_at}"
    );
    // The stub held at most the limit (plus decoding overhead and this test's own buffers).
    assert!(
        peak <= baseline + 2 * limit_mib + 16,
        "heap grew from {baseline} to {peak} MiB for a {limit_mib} MiB limit"
    );

    // Start again, stop before the limit, and hang up mid-Synchronize: the stub reconnects,
    // and the chunks of the dead connection are not kept.
    for i in 0..100 {
        let req = api::SynchronizeRequest {
            containers: vec![{
                let mut c = container(&format!("d{i}"), "app");
                c.env = vec!["Y".repeat(pad)];
                c
            }],
            more: true,
            ..Default::default()
        };
        rt.plugin.synchronize(ctx(), &req).await.unwrap();
    }
    let held = live_mib();
    assert!(
        held >= baseline + 20,
        "{held} MiB live, baseline {baseline}"
    );
    rt.hang_up().await;
    let mut rt2 = setup.accept().await;
    rt2.expect_registration().await;
    rt2.configure("containerd", "v2.1.1", "", "").await.unwrap();
    let reply = rt2
        .plugin
        .synchronize(
            ctx(),
            &api::SynchronizeRequest {
                containers: vec![container("fresh", "app")],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(reply.update.len(), 1, "the new Synchronize stands alone");
    let after = live_mib();
    assert!(
        after <= baseline + 4,
        "{after} MiB still live after reconnecting (baseline {baseline}, {held} before)"
    );
    setup.task.abort();
}
