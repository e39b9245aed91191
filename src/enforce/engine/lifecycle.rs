//! The kubelet's lifecycle semantics on top of the per-event engine: a container keeps what it
//! was given until RemoveContainer or its pod's removal (not StopContainer), a restarted
//! container (same pod UID and name, new id) takes its predecessor's decision over, a finished
//! container's CPUs are reusable by the other containers of its pod (the kubelet's reuse of
//! init-container CPUs), exempt namespaces run on the shared pool (or the reserved CPUs), and
//! a container whose cpuset the kubelet already set (static CPU manager) is noticed.

use std::collections::HashSet;
use std::time::Instant;

use super::{pod_name, CreateOutcome, Engine, EngineError, Placer};
use crate::enforce::adjust::{build_adjustment, decision_record, Adjustment, DECISION_KEY};
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::inputs::Built;
use crate::enforce::state::{Record, ResourceSummary};
use crate::metrics::Metrics;
use crate::placement::{Assignment, Policy, Request};
use crate::topology::CpuSet;

/// Pods (UIDs) whose kubelet-set cpuset was already logged: owned by this file.
#[derive(Debug, Default)]
pub(super) struct KubeletCpusets {
    noted: HashSet<String>,
}

impl KubeletCpusets {
    /// Logs once per pod (and counts every time) a container that arrives with a cpuset
    /// already set: the kubelet's static CPU manager is on, and it will rewrite the cpuset
    /// nri-align sets (its reconcile loop runs every 10 s).
    pub(super) fn note(&mut self, pod: &PodView, c: &ContainerView, metrics: Option<&Metrics>) {
        if c.resources.cpuset_cpus.is_unset() {
            return;
        }
        if let Some(m) = metrics {
            m.event("kubelet-cpuset");
        }
        if self.noted.insert(pod.uid.clone()) {
            tracing::warn!(
                pod = %pod_name(pod),
                container = %c.name,
                cpuset = %c.resources.cpuset_cpus,
                "container arrives with a cpuset already set: the kubelet's static CPU manager \
                 is on and will fight nri-align's placement; set cpuManagerPolicy: none, \
                 topologyManagerPolicy: none and memoryManagerPolicy: None on this node"
            );
        }
    }

    /// How many pods were logged.
    #[cfg(test)]
    pub(super) fn pods(&self) -> usize {
        self.noted.len()
    }
}

impl<P: Placer> Engine<P> {
    /// StopContainer: the container keeps its decision (the kubelet keeps a container's CPUs
    /// until it is removed) and is marked stopped, so that its restart takes it over and the
    /// other containers of its pod may reuse its CPUs.
    pub fn container_stopped(&mut self, id: &str) {
        let newly_stopped = match self.doc.containers.get_mut(id) {
            Some(mut r) if !r.stopped => {
                r.stopped = true;
                true
            }
            _ => false,
        };
        if newly_stopped {
            tracing::info!(container = %id, "stopped: keeps its decision until removed");
            self.persist();
        }
    }

    /// StopPodSandbox: every container of the pod is stopped; the decisions go at
    /// RemovePodSandbox (or RemoveContainer).
    pub fn pod_stopped(&mut self, sandbox_id: &str) {
        let ids = self.doc.containers.pod_containers(sandbox_id);
        for id in ids {
            self.container_stopped(&id);
        }
    }

    /// Logs and counts the device references that were not used: one line per container and
    /// origin (`NVIDIA_VISIBLE_DEVICES`, a CDI annotation...) with how many and the first few
    /// reasons, every reference counted in `input_events{event="unread-device"}`. A line per
    /// reference let one container with 1,024 unknown ids write 1,025 lines per creation.
    pub(super) fn note_unread(&self, pod: &PodView, c: &ContainerView, built: &Built) {
        if let Some(m) = &self.metrics {
            m.events("unread-device", built.unread.len() as u64);
        }
        let mut by_origin: Vec<(&str, Vec<&str>)> = Vec::new();
        for u in &built.unread {
            match by_origin.iter_mut().find(|(o, _)| *o == u.origin) {
                Some((_, whys)) => whys.push(&u.why),
                None => by_origin.push((&u.origin, vec![&u.why])),
            }
        }
        for (origin, whys) in by_origin {
            tracing::warn!(
                pod = %pod_name(pod),
                container = %c.name,
                origin = %crate::untrusted::excerpt(origin),
                count = whys.len(),
                "device reference(s) not used (no authoritative source allocated them): {}",
                first_reasons(&whys)
            );
        }
    }

    /// A container of an exempt namespace: the shared pool (or the reserved CPUs when some
    /// are set), never CPUs another container holds exclusively; no devices, no memory nodes.
    /// Recorded so that it follows the pool.
    pub(super) fn create_exempt(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
    ) -> Result<CreateOutcome, EngineError> {
        // An exempt container takes nothing over, but the instance it replaces is gone: left
        // behind, its record would keep what it held and shadow this one at the next restart.
        while let Some(old) = self.predecessor(pod, c) {
            tracing::info!(container = %c.name, old = %old, "restarted in an exempt namespace: predecessor released");
            self.drop_record(&old);
        }
        let cpus = self.exempt_cpus();
        let a = Assignment {
            container_id: c.id.clone(),
            container_name: c.name.clone(),
            pod_uid: pod.uid.clone(),
            pod_name: pod_name(pod),
            cpus: cpus.clone(),
            policy: Policy::None,
            reason: "exempt namespace: shared pool, not aligned".into(),
            ..Assignment::default()
        };
        self.placer
            .restore(a.clone())
            .map_err(EngineError::Rejected)?;
        let record = decision_record(&a);
        let adjustment = Adjustment {
            cpuset_cpus: cpus.clone(),
            annotations: [(DECISION_KEY.to_string(), record)].into(),
            ..Adjustment::default()
        };
        self.doc.containers.insert(
            c.id.clone(),
            Record {
                assignment: a,
                pod_sandbox_id: pod.id.clone(),
                namespace: pod.namespace.clone(),
                cgroups_path: c.cgroups_path.clone(),
                applied_cpus: cpus.clone(),
                exempt: true,
                kubelet_cpu_quota: c.resources.cpu_quota,
                ..Record::default()
            },
        );
        let updates = self.follow_pool(Some(&c.id));
        self.persist();
        if let Some(m) = &self.metrics {
            m.event("exempt");
        }
        tracing::info!(pod = %pod_name(pod), container = %c.name, cpus = %cpus, "exempt namespace: shared pool, not aligned");
        Ok(CreateOutcome {
            adjustment,
            updates,
        })
    }

    /// Where exempt containers run now ([`exempt_target`]).
    pub(super) fn exempt_cpus(&self) -> CpuSet {
        exempt_target(
            &self.config.placement.reserved_cpus,
            &self.placer.shared_pool(),
        )
    }

    /// The record of the container this one restarts: same pod UID and container name, another
    /// id (the kubelet never runs two instances of one container of a pod at once).
    pub(super) fn predecessor(&self, pod: &PodView, c: &ContainerView) -> Option<String> {
        if c.name.is_empty() || pod.uid.is_empty() {
            return None;
        }
        self.doc
            .containers
            .of_pod_uid(&pod.uid)
            .find(|(id, r)| *id != &c.id && r.assignment.container_name == c.name)
            .map(|(id, _)| id.clone())
    }

    /// A restarted container gets its predecessor's decision back (CPUs, memory nodes, GPUs,
    /// remapped ones included), when it asks for the same resources and devices. `None` when
    /// there is no predecessor, or the request changed (then the predecessor is released and
    /// the container placed anew).
    pub(super) fn take_over(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        built: &Built,
        started: Instant,
    ) -> Option<CreateOutcome> {
        let old_id = self.predecessor(pod, c)?;
        let old = self.doc.containers.get(&old_id)?.clone();
        self.drop_record(&old_id);
        // Records from before exempt containers released their predecessors can hold more
        // than one instance: only one runs, so the others go too.
        while let Some(stale) = self.predecessor(pod, c) {
            self.drop_record(&stale);
        }
        // A container of a pod budget is placed anew in its budget (its CPUs went back to the
        // pod's pool with its predecessor).
        if old.in_pod_budget || !may_keep(&old, &old_id, c, &built.request) {
            return None;
        }
        let mut a = old.assignment.clone();
        a.container_id = c.id.clone();
        if !a.exclusive {
            a.cpus = self.placer.shared_on(&a.numa_nodes);
            // The restarted container's env gets the map of the pool as it is now.
            if !a.device_map.is_empty() {
                a.device_map =
                    crate::placement::device_map::DeviceMap::of(self.placer.topology(), &a);
            }
        }
        if let Err(r) = self.placer.restore(a.clone()) {
            tracing::warn!(container = %c.name, "predecessor's decision not restorable, placed anew: {}", r.message);
            return None;
        }
        let mut adjustment = match build_adjustment(
            &a,
            self.placer.topology(),
            c,
            &built.devices,
            self.devices.as_ref(),
        ) {
            Ok(adj) => adj,
            Err(e) => {
                tracing::warn!(container = %c.name, "predecessor's devices not available, placed anew: {e}");
                self.placer.release(&c.id);
                return None;
            }
        };
        let mempolicy_left_out =
            self.mempolicy
                .fit(&mut adjustment, &c.name, self.metrics.as_deref());
        self.doc.containers.insert(
            c.id.clone(),
            Record {
                applied_cpus: a.cpus.clone(),
                assignment: a.clone(),
                pod_sandbox_id: pod.id.clone(),
                namespace: pod.namespace.clone(),
                cgroups_path: c.cgroups_path.clone(),
                devices: adjustment.visible_devices.clone(),
                resources: old.resources,
                // An exclusive record found running stays what it was (its CPUs were never
                // nri-align's choice): the flag goes with the reason the decision keeps, so a
                // reason that says "recorded as running" always has the flag and the upgrade
                // at load (`Record::upgrade`) never flags a decision.
                found_running: old.found_running,
                cdi_names: built.devices.spec.cdi_names.clone(),
                dra_claims: built.devices.spec.dra_claims.clone(),
                // The decision taken over is the predecessor's, and so is what of it is a
                // sibling's hold.
                shared_devices: old.shared_devices.clone(),
                mempolicy_left_out,
                kubelet_cpu_quota: c.resources.cpu_quota,
                ..Record::default()
            },
        );
        if let Some(rec) = self.doc.containers.get(&c.id) {
            adjustment.cpu_quota = self.quota_at_create(rec);
        }
        let updates = self.follow_pool(Some(&c.id));
        self.persist();
        if let Some(m) = &self.metrics {
            m.event("restart-kept");
            m.admitted(&a.policy.to_string(), a.aligned, started.elapsed());
        }
        self.refresh_free();
        tracing::info!(pod = %pod_name(pod), container = %c.name, old = %old_id, cpus = %a.cpus, gpus = %a.gpus.join(","), "restarted: decision kept");
        Some(CreateOutcome {
            adjustment,
            updates,
        })
    }

    /// After a CRI update's new decision `a` (made in GPU mode Keep with `old`'s GPUs): the
    /// container keeps exactly the GPUs it held, alone or shared, and whether nri-align chose
    /// them. A resize is about CPUs; without this, a GPU it held alone that another container
    /// names in its env (and so shares) would be demoted to shared, and a remap forgotten, and
    /// the container's restart would no longer match its predecessor.
    pub(super) fn keep_devices(
        &mut self,
        mut a: Assignment,
        old: &Assignment,
    ) -> Result<Assignment, super::Rejection> {
        if a.gpus == old.gpus
            && a.shared_gpus == old.shared_gpus
            && a.chosen_gpus == old.chosen_gpus
        {
            return Ok(a);
        }
        self.placer.release(&a.container_id);
        a.gpus = old.gpus.clone();
        a.shared_gpus = old.shared_gpus.clone();
        a.chosen_gpus = old.chosen_gpus.clone();
        self.placer.restore(a.clone())?;
        Ok(a)
    }

    /// Before a new container of a pod is placed: its stopped siblings (finished init
    /// containers, above all) give their CPUs back, as the kubelet lets app containers reuse
    /// the CPUs of finished init containers. A sibling that restarts later is placed anew.
    pub(super) fn reuse_finished(&mut self, pod: &PodView, c: &ContainerView) {
        let done: Vec<String> = self
            .doc
            .containers
            .of_pod_uid(&pod.uid)
            .filter(|(id, r)| {
                r.stopped
                    && r.pod_budget.is_none()
                    && *id != &c.id
                    && r.assignment.container_name != c.name
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in done {
            tracing::info!(container = %id, for_container = %c.name, "finished container's decision released for its pod");
            self.drop_record(&id);
        }
    }
}

/// Where exempt containers run: the reserved CPUs when set (the kubelet's system-reserved
/// cores), else the shared pool `pool`.
pub(super) fn exempt_target(reserved: &CpuSet, pool: &CpuSet) -> CpuSet {
    if reserved.is_empty() {
        pool.clone()
    } else {
        reserved.clone()
    }
}

/// Whether a restarted container (`c`, asking for `req`) may take over its predecessor's
/// record `old` (container `old_id`): the same request and devices, and a decision nri-align
/// made, not a record of how the predecessor happened to run.
fn may_keep(old: &Record, old_id: &str, c: &ContainerView, req: &Request) -> bool {
    let same_devices = {
        let mut had: Vec<&String> = old.assignment.shared_gpus.iter().collect();
        let mut now: Vec<&String> = req.shared_gpus.iter().collect();
        had.sort();
        now.sort();
        had == now && old.assignment.gpus.len() == req.allocated_gpus.len()
    };
    if old.resources != ResourceSummary::of(req) || !same_devices {
        tracing::info!(container = %c.name, old = %old_id, "restarted with another request: placed anew");
        return false;
    }
    // A shared record made as the predecessor ran (Synchronize, the CRI listing or
    // PostStartContainer of a container created while nri-align was away) was never a
    // decision for its request: a Guaranteed container runs on the shared pool there only
    // because nri-align could not place it. Kept, it would stay there across every restart
    // without being refused either (the soak test, tests/e2e/soak.rs, found it). Its restart asks
    // nri-align, so it is placed anew, as the kubelet's static CPU manager would do; an
    // exclusive one keeps its CPUs. Such a record is known by its typed flag (set where it
    // is made, and at load for earlier versions' records), never by its reason's text.
    if !old.assignment.exclusive && old.found_running {
        tracing::info!(container = %c.name, old = %old_id, "restarted; its predecessor was recorded as it ran, never placed: placed anew");
        return false;
    }
    true
}

/// Reasons shown in one line: the first three (each cut to a bounded excerpt) and how many
/// more there were.
fn first_reasons(whys: &[&str]) -> String {
    const SHOWN: usize = 3;
    let mut text = whys
        .iter()
        .take(SHOWN)
        .map(|w| crate::untrusted::excerpt(w))
        .collect::<Vec<_>>()
        .join("; ");
    if whys.len() > SHOWN {
        text.push_str(&format!("; and {} more", whys.len() - SHOWN));
    }
    text
}
