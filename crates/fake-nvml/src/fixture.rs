//! The fixture it serves: the shared schema of `crates/nvml-fixture`, plus the list parsing
//! the C ABI needs.

pub use nvml_fixture::{parse_bus_id, Fixture, FixtureGpu, FixtureLink, FixtureMig};

/// Parses a Linux list (`0-3,8`) into ids; bad parts are skipped.
pub fn parse_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            out.extend(a..=b.min(a.saturating_add(1 << 16)));
        }
    }
    out
}

#[cfg(test)]
#[path = "fixture_tests.rs"]
mod tests;
