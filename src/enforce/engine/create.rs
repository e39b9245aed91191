//! The phases of [`Engine::create_container`]: the request read from the container, the
//! placer's plan (nothing held yet), the adjustment and record the plan becomes, and the
//! commit. Everything that can fail comes before the commit, so that a refusal or a panic
//! never leaves the ledger and the records apart.

use std::time::Instant;

use super::{log_decision, pod_name, Engine, EngineError, Placer, Rejection};
use crate::enforce::adjust::{build_adjustment, Adjustment, CpusetUpdate};
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::inputs::{build, Built, DeviceClaims};
use crate::enforce::state::{Record, ResourceSummary};
use crate::placement::scheduler::{self, Scheduler};
use crate::placement::{Assignment, GpuMode, PlacementError, Request};

impl<P: Placer> Engine<P> {
    /// Phase 1, the request: what `c` asks for and the devices it was given (a request that cannot
    /// be read is counted and refused), with what could not be read noted.
    pub(super) fn read_request(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        started: Instant,
    ) -> Result<Built, EngineError> {
        let trust_env = self.config.trust_visible_devices_env;
        let mut built = build(self.placer.topology(), pod, c, trust_env).inspect_err(|e| {
            self.count_rejection("bad-request", started);
            tracing::warn!(pod = %pod_name(pod), container = %c.name, "rejected: {e}");
        })?;
        built.request.scheduler = self.scheduler_choice(pod, c, &built, started)?;
        self.note_unread(pod, c, &built);
        if let Some(source) = built.devices.source {
            tracing::info!(
                pod = %pod_name(pod),
                container = %c.name,
                source = source.label(),
                gpus = %built.request.allocated_gpus.join(","),
                shared_gpus = %built.request.shared_gpus.join(","),
                "gpus read"
            );
        }
        if !built.request.generic_devices.is_empty() {
            let devices: Vec<String> = built
                .request
                .generic_devices
                .iter()
                .map(|d| {
                    let node = d.numa_node.map_or("?".to_string(), |n| n.to_string());
                    format!("{}@{}/node{node}", d.name, d.pci_bus_id)
                })
                .collect();
            tracing::info!(
                pod = %pod_name(pod),
                container = %c.name,
                devices = %devices.join(","),
                "generic devices read"
            );
        }
        Ok(built)
    }

    /// Phase 2, the plan: the placer's decision for the request, in the GPU mode this container
    /// allows, nothing held yet.
    pub(super) fn plan_create(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        built: &Built,
        started: Instant,
    ) -> Result<P::Plan, EngineError> {
        // `remap` moves only whole GPUs the kubelet allocated that reach the container through
        // NVIDIA_VISIBLE_DEVICES alone, so that nri-align's env and nodes are all it gets.
        // GPUs and RDMA NICs that arrive as device nodes, CDI devices or volume-mounts mounts
        // cannot be taken away: runtimes drop an adjustment's removal of a device that was in
        // the original spec and ignore its device-cgroup rules (containerd/nri#216, NRI
        // v0.6.1 to v0.12), and CDI edits and the toolkit's mounts are applied whatever the
        // adjustment says. GPUs named only by the env are not the kubelet's word (the pod's
        // own env overrides the plugin's) and are used shared, never remapped.
        // A remap may choose only GPUs the kubelet lists as allocatable (its device plugins
        // leave unhealthy ones out): without that list it keeps, never guesses.
        self.expect_pod(pod);
        let mode = match (&built.allocatable_gpus, self.config.placement.gpu_mode) {
            // A remap changes device nodes and env: not nri-align's when they are left.
            (_, GpuMode::Remap) if self.config.leave_to_others.devices => GpuMode::Keep,
            (Some(allocatable), GpuMode::Remap)
                if built.devices.remappable && !built.devices.has_spec_nodes() =>
            {
                let targets = remap_targets(self.placer.topology(), allocatable, &built.request);
                self.placer.set_allocatable_gpus(&targets);
                GpuMode::Remap
            }
            (_, GpuMode::Remap) => GpuMode::Keep,
            (_, mode) => mode,
        };
        let req = &built.request;
        let plan = self.placer.plan(req, mode).inspect_err(|r| {
            self.count_rejection(&r.reason, started);
            tracing::warn!(pod = %pod_name(pod), container = %c.name, reason = %r.reason, "rejected: {}", r.message);
        });
        match (&plan, &req.scheduler) {
            (Ok(p), _) => {
                if let Some(o) = P::planned(p).scheduler_choice {
                    self.count_scheduler_choice(o.scheduler, o.label());
                }
            }
            (Err(r), Some(choice)) if r.reason == "scheduler-choice" => {
                self.count_scheduler_choice(choice.scheduler, "refused");
            }
            (Err(_), _) => {}
        }
        plan.map_err(EngineError::Rejected)
    }

    /// Phase 3, the adjustment: the planned decision as cpuset, device nodes and env (a chosen
    /// device the host lacks is counted and refused).
    pub(super) fn adjustment_for(
        &mut self,
        planned: &Assignment,
        c: &ContainerView,
        claims: &DeviceClaims,
        started: Instant,
    ) -> Result<Adjustment, EngineError> {
        let topo = self.placer.topology();
        let mut adjustment = build_adjustment(planned, topo, c, claims, self.devices.as_ref())
            .inspect_err(|_| self.count_rejection("device", started))?;
        self.mempolicy
            .fit(&mut adjustment, &c.name, self.metrics.as_deref());
        self.check_systemd_device_links(c, &adjustment.add_devices);
        Ok(adjustment)
    }

    /// Phase 4, the commit: the placer holds the plan and the record goes in, together, then both
    /// are persisted and the shared containers follow the pool. Returns their updates.
    pub(super) fn commit_create(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        plan: P::Plan,
        rec: Record,
        started: Instant,
    ) -> Result<Vec<CpusetUpdate>, EngineError> {
        // Everything that can fail is done: the ledger and the record change together, so
        // neither a failure nor a panic above leaves one holding what the other does not.
        let a = self
            .placer
            .commit(plan)
            .inspect_err(|r| self.count_rejection(&r.reason, started))
            .map_err(EngineError::Rejected)?;
        self.doc.containers.insert(c.id.clone(), rec);
        let (updates, timing) = self.persist_and_follow_pool(&c.id, started);
        if let Some(m) = &self.metrics {
            m.admitted(&a.policy.to_string(), a.aligned, timing.took);
        }
        let takes_something = a.exclusive
            || !a.gpus.is_empty()
            || !a.shared_gpus.is_empty()
            || !a.nics.is_empty()
            || a.memory_bytes > 0;
        if takes_something || !updates.is_empty() {
            // Only a shared container without devices or memory changes no node's free
            // resources (its CPUs are the pool's): the gauges and the NRT stay as they are.
            self.refresh_free();
        }
        log_decision(pod, c, &a, timing, updates.len());
        Ok(updates)
    }
}

impl<P: Placer> Engine<P> {
    /// The scheduler's choice for `c`: a trusted scheduler's (`trusted_schedulers`) alone, its
    /// devices narrowed to those an authoritative source gave the container. A choice is a
    /// constraint of the request: a trusted scheduler's malformed value refuses the container
    /// rather than letting the node decide on its own where the scheduler said. An untrusted
    /// scheduler's annotations are ignored whole, with one log line and a count.
    fn scheduler_choice(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        built: &Built,
        started: Instant,
    ) -> Result<Option<scheduler::SchedulerChoice>, EngineError> {
        let read = scheduler::read_trusted(&pod.annotations, &self.config.trusted_schedulers)
            .map_err(|e| {
                let who = match &e {
                    PlacementError::InvalidAnnotation { key, .. } => scheduler::owner_of(key),
                    _ => None,
                };
                self.count_scheduler_choice(who.unwrap_or(Scheduler::Koordinator), "malformed");
                self.count_rejection(e.reason(), started);
                tracing::warn!(pod = %pod_name(pod), container = %c.name, "rejected: {e}");
                EngineError::Rejected(Rejection {
                    reason: e.reason().to_string(),
                    message: e.to_string(),
                    another_holds: false,
                })
            })?;
        let first = !read.untrusted.is_empty() && self.pods.first_untrusted_note(&pod.id);
        for s in &read.untrusted {
            self.count_scheduler_choice(*s, "untrusted");
            if !first {
                continue;
            }
            tracing::warn!(
                pod = %pod_name(pod),
                container = %c.name,
                scheduler = s.label(),
                "ignored {} placement annotations: trusted_schedulers does not name {}",
                s.label(),
                s.label()
            );
        }
        let Some(mut choice) = read.choice else {
            return Ok(None);
        };
        // Only what the kubelet, a DRA claim or the runtime gave is the container's: GPUs the
        // environment alone names are not, unless the administrator vouches for it.
        let authoritative = built.devices.source.is_some_and(|s| s.is_authoritative());
        let req = &built.request;
        let shared: &[String] = if authoritative { &req.shared_gpus } else { &[] };
        let dropped = choice.narrow_to_given(
            self.placer.topology(),
            &req.allocated_gpus,
            shared,
            &req.allocated_nics,
        );
        if !dropped.is_empty() {
            tracing::warn!(
                pod = %pod_name(pod),
                container = %c.name,
                scheduler = choice.scheduler.label(),
                "{}'s choice names devices the container was not given ({}): a choice only \
                 narrows what the kubelet, a DRA claim or the runtime gave, never adds",
                choice.scheduler.label(),
                dropped.join(", ")
            );
        }
        Ok(Some(choice).filter(|c| !c.is_empty()))
    }

    /// Counts what became of a scheduler's choice (`nri_align_scheduler_choice_total`).
    fn count_scheduler_choice(&self, scheduler: Scheduler, outcome: &str) {
        if let Some(m) = &self.metrics {
            m.scheduler_choice(scheduler.label(), outcome);
        }
    }
}

/// The record of a planned decision: what the container holds and sees, as it will be
/// persisted once the plan is committed. The claim devices a sibling holds go with it.
pub(super) fn new_record(
    planned: &Assignment,
    pod: &PodView,
    c: &ContainerView,
    adjustment: &Adjustment,
    built: &Built,
) -> Record {
    Record {
        assignment: planned.clone(),
        pod_sandbox_id: pod.id.clone(),
        namespace: pod.namespace.clone(),
        cgroups_path: c.cgroups_path.clone(),
        applied_cpus: planned.cpus.clone(),
        devices: adjustment.visible_devices.clone(),
        resources: ResourceSummary::of(&built.request),
        cdi_names: built.devices.spec.cdi_names.clone(),
        dra_claims: built.devices.spec.dra_claims.clone(),
        shared_devices: built.shared_claim_devices.clone(),
        mempolicy_left_out: planned.mempolicy.is_some() && adjustment.memory_policy.is_none(),
        kubelet_cpu_quota: c.resources.cpu_quota,
        ..Record::default()
    }
}

/// The GPUs a remap of `req` may choose: those the kubelet lists as allocatable, and always
/// the ones its device plugin gave this container (the kubelet's word too), so that an empty
/// or lagging allocatable list (a device plugin re-registering) keeps the container on its
/// own GPUs rather than refusing it.
fn remap_targets(
    topo: &crate::topology::Topology,
    allocatable: &std::collections::BTreeSet<usize>,
    req: &Request,
) -> std::collections::BTreeSet<usize> {
    let own = req
        .allocated_gpus
        .iter()
        .filter_map(|bus| topo.gpus.iter().position(|g| g.pci_bus_id == *bus));
    allocatable.iter().copied().chain(own).collect()
}
