//! One way for a test to skip: say so where every run's output shows it, and fail instead
//! where skipping is forbidden.
//!
//! A test that skips passes while asserting nothing, so a skip must never go unseen: the line
//! is written straight to the process's stderr (libtest captures `eprintln!` of passing
//! tests, which would hide it), starting `SKIP ` so that `hack/test` can count the skips of a
//! whole run. Where `NRI_ALIGN_FORBID_SKIPS=1` (set by `.ci/run`), a skip is a failure with
//! the same text: CI makes every prerequisite present, so a missing one is a broken machine,
//! not a reason to pass.

use std::io::Write;

/// The variable that turns every skip into a failure.
pub const FORBID_VAR: &str = "NRI_ALIGN_FORBID_SKIPS";

/// Whether skips are forbidden in this run.
pub fn forbidden() -> bool {
    std::env::var(FORBID_VAR).as_deref() == Ok("1")
}

/// Skips `test` because of `why`: prints `SKIP {test}: {why}` to stderr, or panics with it
/// where skips are forbidden. The caller returns right after.
pub fn skip(test: &str, why: &str) {
    let line = format!("SKIP {test}: {why}");
    if forbidden() {
        panic!("{line}\n{FORBID_VAR}=1: make the prerequisite present instead of skipping");
    }
    // Straight to the process's stderr: libtest would capture `eprintln!` of a passing test.
    let _ = writeln!(std::io::stderr(), "{line}");
}
