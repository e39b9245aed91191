//! Pod budgets (`pod_budgets`; pod-level resources, as the kubelet's pod-level resource
//! managers give them): a pod Guaranteed at pod level gets its whole CPU budget on one aligned
//! node set, under the pod's policy, at its first container. Its containers asking whole CPUs
//! (request equal to limit) take exclusive slices out of it; the others share the rest, a pool
//! private to the pod that no other pod's container runs on. The node's shared pool excludes
//! all of it.
//!
//! The budget is a record of its own (`pod-budget:<sandbox id>`, [`Record::pod_budget`]) whose
//! assignment holds the pod's pool exclusively in the ledger and the pod's memory; each slice
//! is held by its container. So every CPU of the budget has one holder, the records and the
//! placer stay one, and the budget survives a restart like any record. It goes with the pod's
//! last container or the pod (RemovePodSandbox); UpdatePodSandbox resizes it by
//! [`budget::resize`], keeping the CPUs the pod runs on.

use std::time::Instant;

use super::{log_decision, pod_name, CreateOutcome, Engine, EngineError, Placer, Rejection};
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::container::{ContainerView, PodView, ResourcesView};
use crate::enforce::inputs::{pod_totals, Built};
use crate::enforce::state::{Record, ResourceSummary};
use crate::placement::budget;
use crate::placement::{Assignment, GpuMode, PodInfo, Request};
use crate::topology::{CpuSet, NodeSet};

/// The record id of the budget of pod sandbox `sandbox_id` (no container id has a colon).
pub(super) fn budget_id(sandbox_id: &str) -> String {
    format!("pod-budget:{sandbox_id}")
}

/// The whole CPUs and memory a pod's resources ask for as a budget, when it is Guaranteed at
/// pod level (CPU request equal to its limit, in whole CPUs, and a memory limit).
fn budget_size(r: &ResourcesView) -> Option<(u32, u64)> {
    let t = pod_totals(r);
    (t.exclusive_cpus > 0 && t.memory_bytes > 0).then_some((t.exclusive_cpus, t.memory_bytes))
}

/// Whether a container of a budget asks for an exclusive slice: whole CPUs, limit = request.
fn wants_slice(req: &Request) -> Option<u32> {
    let milli = req.cpu_request_milli;
    let whole = milli > 0 && milli % 1000 == 0 && req.cpu_limit_milli == Some(milli);
    whole.then(|| u32::try_from(milli / 1000).unwrap_or(u32::MAX))
}

/// The decision of container `c` (asking `req`) in the budget `budget`: `cpus`, exclusive or
/// shared, on the budget's nodes; its memory is the budget's, held once by the budget.
fn member_assignment(
    pod: &PodView,
    c: &ContainerView,
    req: &Request,
    budget: &Assignment,
    cpus: &CpuSet,
    exclusive: bool,
) -> Assignment {
    Assignment {
        container_id: c.id.clone(),
        container_name: c.name.clone(),
        pod_uid: pod.uid.clone(),
        pod_name: pod_name(pod),
        cpus: cpus.clone(),
        exclusive,
        mems: budget.mems.clone(),
        numa_nodes: budget.numa_nodes.clone(),
        gpus: req.allocated_gpus.clone(),
        nics: req.allocated_nics.clone(),
        shared_gpus: req.shared_gpus.clone(),
        policy: budget.policy,
        aligned: budget.aligned,
        reason: match exclusive {
            true => "pod budget: exclusive CPUs out of the pod's".into(),
            false => "pod budget: the pod's private pool".into(),
        },
        ..Assignment::default()
    }
}

impl<P: Placer> Engine<P> {
    /// Whether the containers of `pod` are placed in a budget: it has one, or budgets are on
    /// and its resources are Guaranteed at pod level.
    pub(super) fn in_budget(&self, pod: &PodView) -> bool {
        self.doc.containers.contains_key(&budget_id(&pod.id))
            || (self.config.pod_budgets && pod.resources.as_ref().and_then(budget_size).is_some())
    }

    /// Places container `c` of a budgeted pod: the budget first when it has none, then an
    /// exclusive slice of the pod's pool, or the pool itself for a container that shares it.
    pub(super) fn create_in_budget(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        built: &Built,
        started: Instant,
    ) -> Result<CreateOutcome, EngineError> {
        let (budget, mut updates) = self.ensure_budget(pod, started)?;
        let req = &built.request;
        let pool = budget.assignment.cpus.clone();
        let slice = wants_slice(req);
        let cpus = match slice {
            Some(n) => {
                // A container already sharing the pool keeps at least one CPU of it.
                let keep = usize::from(self.budget_sharers(&pod.id) > 0);
                budget::slice(self.placer.topology(), &pool, n)
                    .filter(|_| pool.len() >= n as usize + keep)
            }
            None => Some(pool.clone()).filter(|p| !p.is_empty()),
        };
        let Some(cpus) = cpus else {
            let total = budget.pod_budget.as_ref().map_or(0, Vec::len);
            let asked = slice.map_or("a share of its pool".to_string(), |n| format!("{n} CPUs"));
            let message = format!(
                "cannot place {}/{} in its pod's budget of {total} CPUs: it asks {asked}, the \
                 pod's pool has {} left ({pool}) once its other containers' exclusive CPUs are \
                 out (and one stays for a container sharing it)",
                pod_name(pod),
                c.name,
                pool.len(),
            );
            return Err(self.budget_refusal(pod, c, message, started));
        };
        let a = member_assignment(pod, c, req, &budget.assignment, &cpus, slice.is_some());
        let adjustment = self.adjustment_for(&a, c, &built.devices, started)?;
        if slice.is_some() {
            self.set_budget_pool(&pod.id, pool.difference(&cpus))
                .map_err(|r| self.rejected(r, started))?;
        }
        if let Err(r) = self.placer.restore(a.clone()) {
            if slice.is_some() {
                // Give the slice back: the budget held it a moment ago.
                let _ = self.set_budget_pool(&pod.id, pool);
            }
            return Err(self.rejected(r, started));
        }
        let mut rec = super::create::new_record(&a, pod, c, &adjustment, built);
        rec.in_pod_budget = true;
        self.doc.containers.insert(c.id.clone(), rec);
        updates.extend(self.follow_pod_pool(&pod.id, Some(&c.id)));
        self.persist();
        if let Some(m) = &self.metrics {
            m.admitted(&a.policy.to_string(), a.aligned, started.elapsed());
        }
        self.refresh_free();
        let timing = super::Timing {
            took: started.elapsed(),
            pool: std::time::Duration::ZERO,
            persist: std::time::Duration::ZERO,
        };
        log_decision(pod, c, &a, timing, updates.len());
        Ok(CreateOutcome {
            adjustment,
            updates,
        })
    }

    /// The budget of `pod`, placed now when it has none (as one request for the pod's CPUs and
    /// memory, under the pod's policy), with the moves of the node's shared containers that
    /// its placement causes.
    fn ensure_budget(
        &mut self,
        pod: &PodView,
        started: Instant,
    ) -> Result<(Record, Vec<CpusetUpdate>), EngineError> {
        let id = budget_id(&pod.id);
        if let Some(rec) = self.doc.containers.get(&id) {
            return Ok((rec.clone(), Vec::new()));
        }
        let (cpus, memory) = pod
            .resources
            .as_ref()
            .and_then(budget_size)
            .unwrap_or_default();
        let milli = u64::from(cpus) * 1000;
        let req = Request {
            container_id: id.clone(),
            pod: PodInfo {
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                annotations: pod.annotations.clone(),
            },
            cpu_request_milli: milli,
            cpu_limit_milli: Some(milli),
            memory_limit_bytes: Some(memory),
            ..Request::default()
        };
        let a = self
            .placer
            .place(&req, GpuMode::Keep)
            .map_err(|r| self.rejected(r, started))?;
        // The record's assignment is the placer's, word for word (`resync_placer` compares).
        let rec = Record {
            applied_cpus: a.cpus.clone(),
            pod_budget: Some(a.cpus.iter().collect()),
            assignment: a,
            pod_sandbox_id: pod.id.clone(),
            namespace: pod.namespace.clone(),
            resources: ResourceSummary::of(&req),
            ..Record::default()
        };
        tracing::info!(
            pod = %pod_name(pod),
            cpus = %rec.assignment.cpus,
            mems = %rec.assignment.mems,
            policy = %rec.assignment.policy,
            "pod budget placed"
        );
        self.doc.containers.insert(id, rec.clone());
        let updates = self.follow_pool(None);
        Ok((rec, updates))
    }

    /// Gives the budget of pod sandbox `sandbox` the pool `pool` (the placer holds it in the
    /// budget's name); on a refusal the budget keeps the pool it had.
    fn set_budget_pool(&mut self, sandbox: &str, pool: CpuSet) -> Result<(), Rejection> {
        let id = budget_id(sandbox);
        let Some(old) = self.doc.containers.get(&id).map(|r| r.assignment.clone()) else {
            return Ok(());
        };
        let a = Assignment {
            cpus: pool,
            ..old.clone()
        };
        self.set_budget_assignment(&id, a, old)
    }

    /// Replaces budget `id`'s assignment `old` with `a` in the placer and the record.
    fn set_budget_assignment(
        &mut self,
        id: &str,
        a: Assignment,
        old: Assignment,
    ) -> Result<(), Rejection> {
        self.placer.release(id);
        if let Err(r) = self.placer.restore(a.clone()) {
            if let Err(e) = self.placer.restore(old) {
                tracing::error!(budget = %id, "pod budget lost from the placer: {}", e.message);
            }
            return Err(r);
        }
        if let Some(mut rec) = self.doc.containers.get_mut(id) {
            rec.applied_cpus = a.cpus.clone();
            rec.assignment = a;
        }
        Ok(())
    }

    /// The shared containers of pod sandbox `sandbox`'s budget.
    fn budget_sharers(&self, sandbox: &str) -> usize {
        self.doc
            .containers
            .pod_containers(sandbox)
            .iter()
            .filter_map(|id| self.doc.containers.get(id))
            .filter(|r| r.in_pod_budget && !r.assignment.exclusive)
            .count()
    }

    /// Moves the shared containers of pod sandbox `sandbox`'s budget (but `except`) onto the
    /// pod's pool as it is now. Returns their updates.
    pub(super) fn follow_pod_pool(
        &mut self,
        sandbox: &str,
        except: Option<&str>,
    ) -> Vec<CpusetUpdate> {
        let Some(pool) = self
            .doc
            .containers
            .get(&budget_id(sandbox))
            .map(|r| r.assignment.cpus.clone())
        else {
            return Vec::new();
        };
        if pool.is_empty() {
            return Vec::new();
        }
        let mut updates = Vec::new();
        for id in self.doc.containers.pod_containers(sandbox) {
            let Some(mut rec) = self.doc.containers.get_mut(&id) else {
                continue;
            };
            if !rec.in_pod_budget || rec.assignment.exclusive || rec.applied_cpus == pool {
                continue;
            }
            rec.applied_cpus = pool.clone();
            if except != Some(id.as_str()) {
                updates.push(CpusetUpdate {
                    container_id: id.clone(),
                    cpus: pool.clone(),
                });
            }
        }
        updates
    }

    /// [`Engine::follow_pod_pool`] for every pod with a budget (after Synchronize).
    pub(super) fn follow_pod_pools(&mut self) -> Vec<CpusetUpdate> {
        let sandboxes: Vec<String> = self
            .doc
            .containers
            .values()
            .filter(|r| r.pod_budget.is_some())
            .map(|r| r.pod_sandbox_id.clone())
            .collect();
        sandboxes
            .iter()
            .flat_map(|s| self.follow_pod_pool(s, None))
            .collect()
    }

    /// After budget member `rec` left the records (removed, or dropped to be placed anew): its
    /// exclusive CPUs go back to the pod's pool; with `last_ends` and no member left, the
    /// budget itself goes. The pod's shared containers follow with the next
    /// [`Engine::follow_pod_pool`].
    pub(super) fn budget_member_gone(&mut self, rec: &Record, last_ends: bool) {
        if !rec.in_pod_budget {
            return;
        }
        let sandbox = rec.pod_sandbox_id.clone();
        let id = budget_id(&sandbox);
        let members = self.doc.containers.pod_containers(&sandbox);
        if last_ends && members.iter().all(|m| *m == id) {
            if self.doc.containers.remove(&id).is_some() {
                self.placer.release(&id);
                tracing::info!(budget = %id, "pod budget released: its last container is gone");
            }
            return;
        }
        if !rec.assignment.exclusive {
            return;
        }
        let Some(mut pool) = self
            .doc
            .containers
            .get(&id)
            .map(|r| r.assignment.cpus.clone())
        else {
            return;
        };
        pool.extend_from(&rec.assignment.cpus);
        if let Err(r) = self.set_budget_pool(&sandbox, pool) {
            tracing::error!(budget = %id, "CPUs not returned to the pod's pool: {}", r.message);
        }
    }

    /// UpdatePodSandbox: resizes `pod`'s budget to its new resources `new` by
    /// [`budget::resize`] (the CPUs it holds stay). Returns the moves of the pod's shared
    /// containers and of the node's. A pod without a budget, or whose new resources are no
    /// longer a budget, is left as it is.
    pub fn update_pod(
        &mut self,
        pod: &PodView,
        new: &ResourcesView,
    ) -> Result<Vec<CpusetUpdate>, EngineError> {
        let id = budget_id(&pod.id);
        let Some(rec) = self.doc.containers.get(&id).cloned() else {
            return Ok(Vec::new());
        };
        let Some((total, memory)) = budget_size(new) else {
            tracing::warn!(pod = %pod_name(pod), "pod update no longer Guaranteed at pod level: its budget stays as it is");
            return Ok(Vec::new());
        };
        let started = Instant::now();
        let order = rec.pod_budget.clone().unwrap_or_default();
        let pool = rec.assignment.cpus.clone();
        let held: CpuSet = order
            .iter()
            .copied()
            .filter(|c| !pool.contains(*c))
            .collect();
        let keep = u32::from(self.budget_sharers(&pod.id) > 0);
        let free = self.placer.shared_pool();
        let topo = self.placer.topology();
        let order = budget::resize(topo, &order, &held, &free, total, keep).map_err(|e| {
            self.budget_refusal(pod, &ContainerView::default(), e.to_string(), started)
        })?;
        let all: CpuSet = order.iter().copied().collect();
        let nodes: NodeSet = topo
            .cpus
            .iter()
            .filter(|c| all.contains(c.id))
            .map(|c| c.numa_node)
            .collect();
        let a = Assignment {
            cpus: all.difference(&held),
            mems: topo.memory_nodes_for(&nodes),
            numa_nodes: nodes,
            memory_bytes: memory,
            ..rec.assignment.clone()
        };
        self.set_budget_assignment(&id, a.clone(), rec.assignment)
            .map_err(|r| self.rejected(r, started))?;
        if let Some(mut r) = self.doc.containers.get_mut(&id) {
            r.pod_budget = Some(order);
        }
        let mut updates = self.follow_pod_pool(&pod.id, None);
        updates.extend(self.follow_pool(None));
        self.persist();
        self.refresh_free();
        tracing::info!(pod = %pod_name(pod), cpus = total, pool = %a.cpus, "pod budget resized");
        Ok(updates)
    }

    /// A refusal of `c` (or of a pod update) for its budget: counted and logged.
    fn budget_refusal(
        &self,
        pod: &PodView,
        c: &ContainerView,
        message: String,
        started: Instant,
    ) -> EngineError {
        tracing::warn!(pod = %pod_name(pod), container = %c.name, reason = "pod-budget", "rejected: {message}");
        self.rejected(
            Rejection {
                reason: "pod-budget".into(),
                message,
                another_holds: false,
            },
            started,
        )
    }

    fn rejected(&self, r: Rejection, started: Instant) -> EngineError {
        self.count_rejection(&r.reason, started);
        EngineError::Rejected(r)
    }
}
