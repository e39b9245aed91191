//! The `topology` command and the scripts over it: its JSON and readable views of the fixture
//! trees, `hack/gpu-check` against the fake NVML, and the topology picture in a real browser.
//! The readers themselves are align-core's tests (`crates/align-core/tests/topology/`).

mod cli;
mod gpu_check;
mod picture_browser;
