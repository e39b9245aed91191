//! The setting of the memory-locality report (`verify`, the daemon's
//! `container_local_memory_ratio`): how much of a container's resident memory may be off its
//! nodes before it is flagged.

/// `verify_remote_memory_threshold` when the file names none: a container is flagged when most
/// of its resident memory is off its nodes.
pub const DEFAULT_REMOTE_MEMORY_THRESHOLD: u8 = 50;

/// The remote-memory threshold asked for: a percent below 100 (at 100 nothing could ever be
/// flagged, which is what leaving the report unread does).
pub(super) fn remote_memory_threshold(asked: Option<u8>) -> Result<u8, String> {
    match asked {
        Some(t) if t >= 100 => Err(format!(
            "verify_remote_memory_threshold {t} is not a percent below 100"
        )),
        t => Ok(t.unwrap_or(DEFAULT_REMOTE_MEMORY_THRESHOLD)),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn the_threshold_is_a_percent_below_100_defaulting_to_50() {
        assert_eq!(Config::default().verify_remote_memory_threshold, 50);
        let c = Config::parse("verify_remote_memory_threshold: 10\n", "t").expect("valid");
        assert_eq!(c.verify_remote_memory_threshold, 10);
        let e = Config::parse("verify_remote_memory_threshold: 100\n", "t").expect_err("100");
        assert!(e.to_string().contains("not a percent below 100"), "{e}");
        assert!(Config::parse("verify_remote_memory_threshold: 300\n", "t").is_err());
    }
}
