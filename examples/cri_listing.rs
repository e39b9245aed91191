//! Times the CRI listing nri-align makes where the runtime sends a launched plugin no
//! Synchronize (`nri_align::enforce::cri_listing::list_running_with`), on a running runtime.
//!
//!   cargo run --release --example cri_listing -- SOCKET [ROUNDS] [IN_FLIGHT...]
//!
//! Each round lists once with each IN_FLIGHT (default: 1, i.e. one `ContainerStatus` after
//! another, then the daemon's bound), in alternating order from one round to the next so that
//! load drift from other jobs hits every setting alike. Prints one line per listing:
//! `in_flight=N round=R ms=T pods=P containers=C status_only=S vanished=V`
//! (hack/bench-cri-listing reads them). A listing that fails ends the run with its error.

use std::path::PathBuf;
use std::time::Instant;

use nri_align::enforce::cri_listing::{list_running_with, STATUS_IN_FLIGHT};

fn usage() -> ! {
    eprintln!("usage: cri_listing SOCKET [ROUNDS] [IN_FLIGHT...]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(socket) = args.next().map(PathBuf::from) else {
        usage()
    };
    let rounds: usize = match args.next() {
        Some(r) => r.parse().unwrap_or_else(|_| usage()),
        None => 5,
    };
    let mut settings: Vec<usize> = args
        .map(|a| a.parse().unwrap_or_else(|_| usage()))
        .collect();
    if settings.is_empty() {
        settings = vec![1, STATUS_IN_FLIGHT];
    }
    for round in 0..rounds {
        let mut order = settings.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for in_flight in order {
            let t0 = Instant::now();
            let l = list_running_with(&socket, in_flight).await?;
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            println!(
                "in_flight={in_flight} round={round} ms={ms:.2} pods={} containers={} status_only={} vanished={}",
                l.pods.len(),
                l.containers.len(),
                l.status_only,
                l.vanished
            );
        }
    }
    Ok(())
}
