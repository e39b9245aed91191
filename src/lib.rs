//! nri-align: an NRI plugin that places each container's CPUs, memory, GPUs and NICs on the same
//! part of the machine.
//!
//! This page is the architecture walk: the modules and what each may use, the path of one
//! CreateContainer from the runtime's socket to the adjustment it gets back, and the daemon's
//! start-up. Every step links to the item that does it, so `cargo doc` (run with
//! `RUSTDOCFLAGS="-D warnings"` by `hack/test`) fails when one is renamed and the walk cannot
//! go stale. `docs/architecture.md` has the picture.
//!
//! # Modules and what each may use
//!
//! Lowest layer first; a module uses only those above it, so there are no import cycles.
//!
//! | module | what it is | what it may use |
//! |---|---|---|
//! | [`untrusted`] | how much outside input is read at all, how much of a bad value an error repeats | nothing of the crate |
//! | [`topology`] | the host model, every way to read it (sysfs under a root, NVML, hwloc XML, host descriptions), emulated hosts, the one loader [`topology::load::load`] | `untrusted` |
//! | [`placement`] | the allocator: [`placement::Request`] and the [`placement::ledger`] in, [`placement::Assignment`] or [`placement::PlacementError`] out | `topology` |
//! | [`host`] | the only code touching the live host: cgroups, `/proc`, device nodes, capabilities, file permissions, the files nri-align owns | `topology` (id sets) |
//! | [`nrt`] | the cluster view: the NodeResourceTopology object, its builder and background [`nrt::Publisher`] | `placement`, `topology`; the `kube` client only here and in `evict` |
//! | [`config`] | the configuration file, its validation and its reload | `placement`, `topology`, `host`, `nrt` |
//! | [`metrics`] | the Prometheus registry, the health state and their HTTP responder | nothing of the crate |
//! | [`enforce`] | the plugin: NRI adapter, engine, requests, adjustments, persisted state, CRI listing, PodResources lookups, the drift check | everything above |
//! | [`evict`] | opt-in eviction of pods refused for `evict_refused_after`: a task fed by the engine's [`RefusalObserver`](enforce::engine::RefusalObserver) | `enforce` (the observer seam), `nrt` (the API client) |
//! | [`simulate`] | workload replay against the allocator or a kubelet-like baseline (the `simulate` crate, re-exported) | `placement`, `topology` (align-core only) |
//! | [`cli`] | one module per subcommand | everything above |
//!
//! The rules the layout keeps:
//!
//! - `untrusted`, `topology` and `placement` are the crate `align-core` ([`align_core`]): it
//!   has no dependency on the host or the wire, so the compiler keeps the pure core pure, and
//!   [`simulate`], the benches and the property tests run the same placement code as the
//!   plugin.
//! - [`host`] is the only code that opens `/proc`, cgroup files or device nodes, or changes
//!   capabilities. `topology` reads sysfs too, but only to describe a host under a root
//!   (`--host-root`), never to act on one.
//! - Only [`enforce::nri`] names `nri_protocol` (the NRI wire, [`nri_protocol`]); the engine
//!   sees plain structs ([`enforce::container`]), so it runs in unit tests without a runtime.
//! - The engine places through the [`Placer`] seam (implemented by
//!   [`placement::Allocator`]), and never waits for the API server: it tells its
//!   [`StateObserver`] what is free after each change, which [`cli::run`] fills with the
//!   NodeResourceTopology [`nrt::Feed`], and its refusal observer each refusal and admission,
//!   which the eviction task ([`evict::Evictor`]) follows.
//! - The ledger and the records never disagree: a decision is planned ([`Placer::plan`],
//!   nothing held), its adjustment built, and only then are the plan committed
//!   ([`Placer::commit`]) and the record inserted, with nothing fallible between them. The
//!   records are the truth: after a panic the plugin calls [`Engine::resync_placer`].
//!
//! # One CreateContainer, from the socket to the response
//!
//! 1. The runtime writes a ttrpc frame on the plugin's socket; the multiplexer
//!    ([`nri_protocol::mux::Mux`]) hands the Plugin service its bytes, and the stub decodes
//!    `CreateContainerRequest` and calls the handler, [`nri_protocol::stub::Plugin`].
//! 2. [`AlignPlugin`] (its `Plugin::create_container`) converts the NRI pod and container into
//!    the engine's [`PodView`] and [`ContainerView`] ([`enforce::nri::convert::pod_view`],
//!    [`enforce::nri::convert::container_view`]); the runtime's cpusets are read there, once
//!    ([`enforce::container::RuntimeIds`]).
//! 3. **Before the engine lock**, the CRI-listing wait: where the runtime sends this plugin no
//!    Synchronize (containerd 1.7 launching it), [`enforce::nri::learning::spawn`] lists what
//!    runs over the runtime's CRI and has [`AlignPlugin::learning_begins`]; a creation waits
//!    up to [`LEARN_WAIT`] for [`AlignPlugin::learned`], which adopts the listing
//!    ([`Engine::adopt_listed`]), so that it is never given what an unrecorded container holds.
//! 4. **Before the engine lock**, the PodResources lookup: [`KubeletSource::devices_for`] asks
//!    the kubelet which devices it allocated to the container (bounded by a deadline, cached
//!    per pod, fail-open), into [`ContainerView::kubelet_devices`] (and its DRA claims, from
//!    the same answer, into [`ContainerView::kubelet_claims`]). A slow kubelet delays this
//!    container only, never the engine's other callers. Then the container's CDI names are
//!    looked up in the CDI spec registry's in-memory index ([`enforce::inputs::resolve_cdi`],
//!    [`host::cdi::CdiRegistry`], which a watcher keeps current off this path) into
//!    [`ContainerView::cdi_resolved`]. Both are gathered apart from the runtime's view, as one
//!    [`enforce::container::NodeFacts`], and joined to it once
//!    ([`ContainerView::with_node`]).
//! 5. The engine lock is taken; one found poisoned by a panic is cleared and the placer brought
//!    back onto the records ([`Engine::resync_placer`]).
//! 6. [`Engine::create_container`], in order: a create for an id already recorded (a retried
//!    create) drops that record; a cpuset the kubelet already set is logged (its static CPU
//!    manager is on); a container of an exempt namespace ([`Config::is_exempt`]) goes on the
//!    shared pool or the reserved CPUs and is recorded so it follows the pool.
//! 7. The request: [`enforce::inputs::build`] turns the view into a [`placement::Request`]
//!    (CPU request and limit from shares and quota, memory limit, the GPUs and RDMA NICs
//!    allocated, from the kubelet's answer, device nodes, CDI devices or env, and the generic
//!    PCI devices CDI specs resolve to), into
//!    [`enforce::inputs::Built`], with those devices read once into
//!    [`enforce::inputs::DeviceClaims`] (each with its source, authority, share, CDI name or
//!    DRA claim, and what the spec and env say of them): the rest of the walk reads that value,
//!    never the env, device nodes or CDI names again. References no authoritative source
//!    allocated are logged and counted. Where a scheduler placed the pod (Koordinator, Crane), its choice is read from
//!    the pod's annotations ([`placement::scheduler::read`]) into [`placement::Request`]'s
//!    `scheduler` constraint; a malformed one is refused here (`docs/scheduler.md`).
//! 8. A restart: a container with its predecessor's pod UID and name takes that decision over
//!    when it asks for the same resources and devices, else the predecessor is released and
//!    it is placed anew; the pod's stopped siblings (finished init containers) give their
//!    CPUs back first (`enforce/engine/lifecycle.rs`). A GPU a sibling of the pod already
//!    uses through the same CDI name (one DRA claim) is used shared, not held twice
//!    (`enforce/engine/claims.rs`). On a node whose cpusets another NRI plugin owns
//!    (`leave_to_others`), this step and the next are replaced: the container's CPUs are read
//!    from that plugin's choice and recorded, and its memory nodes follow them, also when
//!    the CPUs show only later (`enforce/engine/others.rs`); where the memory nodes are
//!    another plugin's, those it set become the request's node choice, as a scheduler's
//!    is; the fields left are taken out of every answer. For pod scope the placer learns the
//!    pod's totals ([`Placer::expect_pod`]), and the GPU mode of this decision is chosen
//!    (`remap` only for GPUs that reach the container through the env alone).
//! 9. Placement: [`Placer::plan`], for the allocator [`Allocator::plan_in`], resolves the
//!    annotations and the Guaranteed rule, checks the scheduler's choice
//!    ([`placement::resolve::honour::check`]: the nodes, CPUs and devices the search must
//!    keep to, or the refusal saying who holds them) and searches the candidates; nothing is
//!    held yet. A refusal becomes [`EngineError::Rejected`], whose message reaches the CRI
//!    caller.
//! 10. The adjustment: [`enforce::adjust::build_adjustment`] gives the cpuset and memory nodes
//!     (typed sets, made text only in `enforce/nri/convert.rs`),
//!     device nodes looked up on the host ([`host::devices::DeviceLookup`]) with their cgroup
//!     rules, env and the decision annotation. Then the device-link check: in a systemd scope,
//!     a device node without its `/dev/char` link would be dropped from the scope by systemd,
//!     so nri-align links the nodes it hands out and reports the rest at risk (warning,
//!     metrics, `/readyz`) (`enforce/engine/devlinks.rs`).
//! 11. Commit: [`Placer::commit`] puts the plan into the ledger and the record goes into the
//!     [`enforce::state::Records`] together.
//! 12. Persistence: the record is appended to the state log ([`StateStore::write`]), then the
//!     shared containers that must move after the pool get cpuset-only updates
//!     ([`enforce::adjust::CpusetUpdate`], per node from [`placement::cpus::shared_on`]) and
//!     their records are written; the metrics count it ([`Metrics::admitted`]), the observer
//!     hears what is free ([`StateObserver::state_changed`]) and one log line says it all.
//! 13. [`AlignPlugin`] converts the adjustment ([`enforce::nri::convert::container_adjustment`])
//!     and the updates, with any queued for the next response, into
//!     `CreateContainerResponse`; the stub encodes it and the multiplexer writes the frame.
//!
//! # Start-up
//!
//! `nri-align run` is [`cli::run::run`]:
//!
//! 1. Configuration: [`cli::run::prepare`] reads the file ([`config::read_config_file`],
//!    [`Config::from_bytes`]), or, for a fleet ConfigMap's directory, chooses this node's
//!    section ([`config::select::select_in_dir`]); sets up logging ([`cli::run::init_logging`]),
//!    settles the plugin index and opens the state dir ([`StateStore::open_or_wait`]).
//! 2. Topology discovery: [`topology::load::load`] under `--host-root`, NVML included; the
//!    configuration is checked against it ([`Config::validate_for`]; a section this host cannot
//!    take falls back instead, [`config::settle::settle`]). The API access for
//!    NodeResourceTopology is read now ([`cli::run::NrtPlan::prepare`]), and the
//!    [`Allocator`], the PodResources source ([`KubeletSource::new`]) and the [`Engine`] are
//!    built.
//! 3. State load: [`Engine::recover`] restores the state log ([`Engine::start`]) and releases
//!    the records of containers with no process left ([`Engine::prune_gone`], judged by
//!    [`host::procfs::live_containers`]).
//! 4. NRI connect: [`enforce::nri::Connection::new`], then capabilities are dropped
//!    ([`host::caps::drop_capabilities`]) before any other thread starts; the metrics and
//!    health endpoints are served ([`metrics::serve`]), the NodeResourceTopology publisher is
//!    started as the engine's observer ([`cli::run::NrtPlan::start`]), the CRI-listing follower
//!    ([`enforce::nri::learning::spawn`]), the hot-plug follower (`src/cli/run/hotplug.rs`:
//!    every 10 s and at kernel uevents, [`AlignPlugin::follow_hotplug`] re-reads the online
//!    CPUs and memory nodes, as every runtime event does, and [`Engine::poll_hotplug`] applies
//!    a change) and the configuration reloader ([`config::spawn_reloader`]) are spawned, and
//!    [`enforce::nri::Connection::serve`] serves until a signal.
//! 5. Synchronize/reconcile: the runtime's Synchronize reaches [`Engine::synchronize`], which
//!    reconciles the records with what runs ([`enforce::engine::reconcile::reconcile`]):
//!    shared containers follow the pool, unrecorded ones are recorded as they run. Where no
//!    Synchronize comes, the CRI listing (step 3 above) does it instead.
//! 6. Health: the runtime link, the publisher and an engine heartbeat feed [`metrics::Health`]
//!    (`src/cli/run/health.rs`), which `/healthz` and `/readyz` and systemd's watchdog report.
//!
//! [`AlignPlugin`]: enforce::nri::AlignPlugin
//! [`AlignPlugin::learning_begins`]: enforce::nri::AlignPlugin::learning_begins
//! [`AlignPlugin::learned`]: enforce::nri::AlignPlugin::learned
//! [`AlignPlugin::follow_hotplug`]: enforce::nri::AlignPlugin::follow_hotplug
//! [`Engine::poll_hotplug`]: enforce::engine::Engine::poll_hotplug
//! [`LEARN_WAIT`]: enforce::nri::plugin::LEARN_WAIT
//! [`PodView`]: enforce::container::PodView
//! [`ContainerView`]: enforce::container::ContainerView
//! [`ContainerView::kubelet_devices`]: enforce::container::ContainerView::kubelet_devices
//! [`ContainerView::kubelet_claims`]: enforce::container::ContainerView::kubelet_claims
//! [`ContainerView::cdi_resolved`]: enforce::container::ContainerView::cdi_resolved
//! [`ContainerView::with_node`]: enforce::container::ContainerView::with_node
//! [`KubeletSource::devices_for`]: enforce::podresources::KubeletSource::devices_for
//! [`KubeletSource::new`]: enforce::podresources::KubeletSource::new
//! [`Engine`]: enforce::engine::Engine
//! [`Engine::create_container`]: enforce::engine::Engine::create_container
//! [`Engine::adopt_listed`]: enforce::engine::Engine::adopt_listed
//! [`Engine::resync_placer`]: enforce::engine::Engine::resync_placer
//! [`Engine::recover`]: enforce::engine::Engine::recover
//! [`Engine::start`]: enforce::engine::Engine::start
//! [`Engine::prune_gone`]: enforce::engine::Engine::prune_gone
//! [`Engine::synchronize`]: enforce::engine::Engine::synchronize
//! [`EngineError::Rejected`]: enforce::engine::EngineError::Rejected
//! [`Placer`]: enforce::engine::Placer
//! [`Placer::plan`]: enforce::engine::Placer::plan
//! [`Placer::commit`]: enforce::engine::Placer::commit
//! [`Placer::expect_pod`]: enforce::engine::Placer::expect_pod
//! [`StateObserver`]: enforce::engine::StateObserver
//! [`StateObserver::state_changed`]: enforce::engine::StateObserver::state_changed
//! [`StateStore::write`]: enforce::state::StateStore::write
//! [`StateStore::open_or_wait`]: enforce::state::StateStore::open_or_wait
//! [`Allocator`]: placement::Allocator
//! [`Allocator::plan_in`]: placement::Allocator::plan_in
//! [`Config::is_exempt`]: config::Config::is_exempt
//! [`Config::from_bytes`]: config::Config::from_bytes
//! [`Config::validate_for`]: config::Config::validate_for
//! [`Metrics::admitted`]: metrics::Metrics::admitted

pub mod cli;
pub mod config;
pub mod enforce;
pub mod evict;
pub mod host;
pub mod metrics;
pub mod nrt;
pub use ::simulate;

// The pure core lives in its own crate so that it cannot reach the host or the wire; its
// modules keep their paths here.
pub use align_core::{placement, topology, untrusted};
