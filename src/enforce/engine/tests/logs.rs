//! Log volume per creation: a container whose inputs hold a thousand bad device references
//! writes one line per kind of problem, and the metric carries the count.

use super::kubernetes::{events, kctr, kpod, real};
use super::*;

use crate::enforce::testing::LogLines as Lines;

#[test]
fn a_thousand_unknown_visible_devices_write_one_warning_with_the_count() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "many", &[]);
    let ids: Vec<String> = (0..1024).map(|i| format!("GPU-unknown-{i:04}")).collect();
    let mut c = kctr(&p, "c1", "app", 500, None);
    c.env = vec![format!("NVIDIA_VISIBLE_DEVICES={}", ids.join(","))];
    let out = tracing::subscriber::with_default(subscriber, || {
        e.create_container(&p, &c)
            .expect("admitted")
            .expect("not exempt")
    });
    assert!(out.adjustment.add_devices.is_empty());
    let text = lines.text();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("count=1024")
            && warnings[0].contains("origin=NVIDIA_VISIBLE_DEVICES")
            && warnings[0].contains("and 1021 more"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].len() < 1024, "{} bytes", warnings[0].len());
    let metrics = events(&e);
    assert!(
        metrics.contains("event=\"unread-device\"} 1024"),
        "{metrics}"
    );
}
