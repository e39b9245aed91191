//! Huge pages per NUMA node: what a container asks for (its `hugepage_limits`, per page size),
//! what each node has left (its `nr_hugepages` less what placed containers hold), and how a
//! request's pages are split over the nodes it was given.
//!
//! Pages are a node's own: a container whose CPUs and `cpuset.mems` are on a node whose pool of
//! a size is exhausted fails its huge page allocations (SIGBUS on fault), whatever the other
//! nodes have. So the pages join the node choice beside CPUs and memory, and the nodes a
//! container's pages come from are always in its `cpuset.mems`.

use serde::{Deserialize, Serialize};

/// Pages of one size a container asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePageNeed {
    /// Page size in KiB (2048, 1048576), as the node's `hugepages-<size>kB` directory names it.
    pub size_kb: u64,
    /// Pages asked for.
    pub pages: u64,
}

impl HugePageNeed {
    /// The need of a hugetlb limit of `limit_bytes` on pages of `size_kb`: whole pages, rounded
    /// up (the limit is what the container may fault in, a page at a time). `None` for a zero
    /// limit (the kubelet writes one for every host page size the container does not ask)
    /// or a zero page size.
    pub fn of_limit(size_kb: u64, limit_bytes: u64) -> Option<Self> {
        let page = size_kb.checked_mul(1024).filter(|p| *p > 0)?;
        let pages = limit_bytes.div_ceil(page);
        (pages > 0).then_some(Self { size_kb, pages })
    }

    /// The resource name the kubelet uses: `hugepages-2Mi`, `hugepages-1Gi`.
    pub fn resource(&self) -> String {
        resource_name(self.size_kb)
    }
}

/// Pages of one size a container holds on one node (kept in its record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePagesHeld {
    /// Node id.
    pub node: u32,
    /// Page size in KiB.
    pub size_kb: u64,
    /// Pages held.
    pub pages: u64,
}

/// `hugepages-2Mi` for 2048 KiB, `hugepages-1Gi` for 1048576 KiB, `hugepages-64Ki` for 64.
pub fn resource_name(size_kb: u64) -> String {
    let unit = if size_kb % (1 << 20) == 0 {
        format!("{}Gi", size_kb >> 20)
    } else if size_kb % (1 << 10) == 0 {
        format!("{}Mi", size_kb >> 10)
    } else {
        format!("{size_kb}Ki")
    };
    format!("hugepages-{unit}")
}

/// The needs of `needs` merged by page size (a runtime may repeat a size), in size order,
/// without empty ones.
pub fn merged(needs: &[HugePageNeed]) -> Vec<HugePageNeed> {
    let mut by_size = std::collections::BTreeMap::<u64, u64>::new();
    for n in needs.iter().filter(|n| n.pages > 0) {
        let e = by_size.entry(n.size_kb).or_default();
        *e = e.saturating_add(n.pages);
    }
    by_size
        .into_iter()
        .map(|(size_kb, pages)| HugePageNeed { size_kb, pages })
        .collect()
}

/// "300 hugepages-2Mi" for messages.
pub fn fmt_pages(size_kb: u64, pages: u64) -> String {
    format!("{pages} {}", resource_name(size_kb))
}

#[cfg(test)]
#[path = "hugepages_tests.rs"]
mod tests;
