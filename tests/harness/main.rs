//! The test harness itself: the runtime instances it starts (on every runtime), and the
//! kubelet-shaped CRI requests it builds, against the kubelet's own formulas.

mod kubelet_requests;
mod runtimes;
