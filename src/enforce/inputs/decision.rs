//! nri-align's own decision as a running container carries it: the record it wrote into the
//! container at creation (`adjust::decision_record`), as the `nri-align.io/decision`
//! annotation and the `NRI_ALIGN_DECISION` env entry. Read where the request's own fields no
//! longer say what was decided.

use crate::enforce::adjust::{DECISION_ENV, DECISION_KEY};
use crate::enforce::container::ContainerView;
use crate::topology::CpuSet;

/// The CPUs nri-align placed `c` on exclusively, where `c` carries that decision (its
/// annotation, else its env entry) and runs without a positive CFS quota, as nri-align leaves
/// an exclusive container (`engine/quota.rs`). `None` otherwise.
pub fn placed_exclusive_on(c: &ContainerView) -> Option<CpuSet> {
    if c.resources.cpu_quota.is_some_and(|q| q > 0) {
        return None;
    }
    let record = c
        .annotations
        .get(DECISION_KEY)
        .map(String::as_str)
        .or_else(|| c.env_var(DECISION_ENV))?;
    let field = |key: &str| {
        record
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    if field("exclusive") != Some("true") {
        return None;
    }
    field("cpus")?.parse().ok()
}
