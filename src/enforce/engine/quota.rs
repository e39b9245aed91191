//! The CFS quota of containers with exclusive or isolated CPUs.
//!
//! A container that holds its CPUs alone gains nothing from a CFS quota: it cannot take
//! another container's time, and a quota equal to its CPU count still throttles it whenever
//! its threads' bursts meet a period boundary. The kubelet's static CPU manager therefore runs
//! such containers without one (`DisableCPUQuotaWithExclusiveCPUs`, docs/kubernetes-node.md);
//! with the CPU manager at `none`, as nri-align requires, the kubelet keeps the quota, so
//! nri-align does that part of the job under `exclusive_cpu_quota: disable` (the default).
//!
//! What a container should run with is decided from its record alone ([`wanted`]): no quota
//! (`-1`) for exclusive CPUs, else the kubelet's quota the record remembers
//! ([`Record::kubelet_cpu_quota`]), since the runtime's spec says `-1` once nri-align set it.
//! It is sent in the creation's adjustment, with the answer to every CRI update of the
//! container (the kubelet's update carries its own quota, which would otherwise come back),
//! after a restart (Synchronize) to every container that runs with another, and to every
//! exclusive container when the key is changed by a reload.
//!
//! The pod's cgroup has a quota of its own (the sum of its containers' limits), which would
//! throttle the exclusive container just the same. The kubelet lifts it where *any* container
//! of the pod holds exclusive CPUs (its `podHasExclusiveCPUs`): the pod's shared containers
//! stay bounded by their own quotas. No NRI message carries the pod's cgroup, so nri-align
//! writes it ([`PodQuotaWrite`], applied by the plugin through `host::cgroup`) at the same
//! moments, and puts the kubelet's value back where the pod no longer has exclusive CPUs, or
//! under `keep`; only over no quota, never over one the kubelet wrote.

use std::collections::BTreeMap;

use super::{Engine, Placer};
use crate::config::ExclusiveCpuQuota;
use crate::enforce::container::{ContainerView, PodView, ResourcesView};
use crate::enforce::state::Record;
use crate::host::cgroup::PodQuota;

/// `cpu.quota` meaning none: runc writes `-1` to `cpu.cfs_quota_us` (v1) and `max` to
/// `cpu.max` (v2).
pub const NO_QUOTA: i64 = -1;

/// A quota-only update of a container, sent with the next response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaUpdate {
    /// Container id.
    pub container_id: String,
    /// The new `cpu.quota` (microseconds per period; [`NO_QUOTA`]: none).
    pub quota: i64,
}

/// A pod cgroup's CFS quota to write: the cgroup is the parent of a container's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodQuotaWrite {
    /// The pod's UID (its cgroup's name holds it).
    pub pod_uid: String,
    /// `linux.cgroups_path` of one of its containers.
    pub cgroups_path: String,
    /// What to make of the quota.
    pub want: PodQuota,
}

/// The quota writes waiting for a response: owned by this file.
#[derive(Debug, Default)]
pub(super) struct PendingQuota {
    /// Containers whose CFS quota goes with the next response that can carry it.
    containers: BTreeMap<String, i64>,
    /// Pod cgroups whose CFS quota is to be written, by sandbox id.
    pods: BTreeMap<String, PodQuotaWrite>,
}

impl PendingQuota {
    /// Container `id` is gone (or created anew): nothing waits for it.
    pub(super) fn forget(&mut self, id: &str) {
        self.containers.remove(id);
    }

    /// Container `id` is to run with `quota` (the last one queued wins).
    fn queue(&mut self, id: &str, quota: i64) {
        self.containers.insert(id.to_string(), quota);
    }

    /// Pod sandbox `sandbox_id`'s cgroup is to get `write` (the last one queued wins).
    fn queue_pod(&mut self, sandbox_id: &str, write: PodQuotaWrite) {
        self.pods.insert(sandbox_id.to_string(), write);
    }

    fn take_pod_writes(&mut self) -> Vec<PodQuotaWrite> {
        std::mem::take(&mut self.pods).into_values().collect()
    }

    fn take_updates(&mut self) -> Vec<QuotaUpdate> {
        std::mem::take(&mut self.containers)
            .into_iter()
            .map(|(container_id, quota)| QuotaUpdate {
                container_id,
                quota,
            })
            .collect()
    }
}

/// The quota the container of `rec` should run with under `setting`; `None`: whatever it runs
/// with (an exempt container, or a shared one whose kubelet quota is not known).
pub fn wanted(rec: &Record, setting: ExclusiveCpuQuota) -> Option<i64> {
    if rec.exempt {
        return None;
    }
    if rec.assignment.exclusive && setting == ExclusiveCpuQuota::Disable {
        return Some(NO_QUOTA);
    }
    rec.kubelet_cpu_quota.map(as_sent)
}

/// A quota as sent to the runtime: the kubelet's "no limit" (unset, `0` or negative) is
/// [`NO_QUOTA`], since `0` in an update means "no change" to runc.
fn as_sent(quota: i64) -> i64 {
    if quota > 0 {
        quota
    } else {
        NO_QUOTA
    }
}

/// Whether a container running with `has` (its spec's `cpu.quota`) runs with `want`: every
/// value that is no limit is the same.
fn runs_with(has: Option<i64>, want: i64) -> bool {
    as_sent(has.unwrap_or(NO_QUOTA)) == want
}

impl<P: Placer> Engine<P> {
    /// The quota a container decided as `rec` is created with; `None`: the kubelet's. Nothing
    /// where another plugin owns the CPUs (`leave_to_others: [cpus]`): what its CPUs are is
    /// that plugin's to say.
    pub(super) fn quota_at_create(&self, rec: &Record) -> Option<i64> {
        if self.config.leave_to_others.cpus || !rec.assignment.exclusive {
            return None;
        }
        wanted(rec, self.config.exclusive_cpu_quota).filter(|q| *q == NO_QUOTA)
    }

    /// After a CRI update of container `c` to `new`: the record remembers the kubelet's new
    /// quota, and the container gets the quota it should have where the kubelet's would not
    /// be it (exclusive CPUs), or where it runs with another (back from exclusive to shared).
    pub(super) fn quota_after_update(&mut self, c: &ContainerView, new: &ResourcesView) {
        if self.config.leave_to_others.cpus {
            return;
        }
        let Some(had) = self.doc.containers.get(&c.id).map(|r| r.kubelet_cpu_quota) else {
            return;
        };
        // An update without a quota leaves the container's as it was: so does the record.
        if new.cpu_quota.is_some() && had != new.cpu_quota {
            if let Some(mut rec) = self.doc.containers.get_mut(&c.id) {
                rec.kubelet_cpu_quota = new.cpu_quota;
            }
            self.persist();
        }
        let setting = self.config.exclusive_cpu_quota;
        let Some(want) = self
            .doc
            .containers
            .get(&c.id)
            .and_then(|r| wanted(r, setting))
        else {
            return;
        };
        // The kubelet's update sets its quota: -1 must ride along; and a container that ran
        // without one (exclusive until now) gets the kubelet's back, said explicitly, even
        // where the update leaves it out.
        let ran_without = runs_with(c.resources.cpu_quota, NO_QUOTA) && want != NO_QUOTA;
        if !runs_with(new.cpu_quota, want) || ran_without {
            self.quota.queue(&c.id, want);
        }
    }

    /// After Synchronize: records made before the kubelet's quota was remembered learn it
    /// from what runs (nri-align had not changed it), and every live container that runs with
    /// another quota than it should gets it.
    pub(super) fn quota_after_restart(&mut self, pods: &[PodView], live: &[ContainerView]) {
        if self.config.leave_to_others.cpus {
            return;
        }
        for c in live.iter().filter(|c| c.state.is_live()) {
            let Some(had) = self.doc.containers.get(&c.id).map(|r| r.kubelet_cpu_quota) else {
                continue;
            };
            // Where the record has no kubelet quota, nri-align never set one: what runs is
            // the kubelet's. (Synchronize persists after this.)
            if had.is_none() && c.resources.cpu_quota.is_some() {
                if let Some(mut rec) = self.doc.containers.get_mut(&c.id) {
                    rec.kubelet_cpu_quota = c.resources.cpu_quota;
                }
            }
            let setting = self.config.exclusive_cpu_quota;
            let want = self
                .doc
                .containers
                .get(&c.id)
                .and_then(|r| wanted(r, setting));
            if let Some(want) = want.filter(|w| !runs_with(c.resources.cpu_quota, *w)) {
                tracing::info!(container = %c.id, quota = want, "CFS quota put back in line with the record");
                self.quota.queue(&c.id, want);
            }
        }
        // Each pod with exclusive CPUs: lifted, or under `keep` the kubelet's put back.
        for p in pods {
            if self.pod_has_exclusive(&p.id) {
                self.queue_pod_quota(&p.id, Some(p), true);
            }
        }
    }

    fn pod_has_exclusive(&self, sandbox_id: &str) -> bool {
        self.doc
            .containers
            .pod_containers(sandbox_id)
            .iter()
            .filter_map(|id| self.doc.containers.get(id))
            // A pod's budget holds its pool, not a container's exclusive CPUs.
            .any(|r| r.assignment.exclusive && !r.stopped && r.pod_budget.is_none())
    }

    /// After a reload that changed `exclusive_cpu_quota`: every live exclusive container gets
    /// the quota the new setting gives it (the kubelet's back under `keep`, where known).
    pub(super) fn quota_after_reload(&mut self, before: ExclusiveCpuQuota) {
        let now = self.config.exclusive_cpu_quota;
        if now == before || self.config.leave_to_others.cpus {
            return;
        }
        let changed: Vec<(String, i64)> = self
            .doc
            .containers
            .iter()
            .filter(|(_, r)| r.assignment.exclusive && !r.stopped)
            .filter_map(|(id, r)| Some((id.clone(), wanted(r, now)?)))
            .collect();
        let pods: std::collections::BTreeSet<String> = self
            .doc
            .containers
            .iter()
            .filter(|(id, _)| changed.iter().any(|(c, _)| c == *id))
            .map(|(_, r)| r.pod_sandbox_id.clone())
            .collect();
        for (id, q) in changed {
            self.quota.queue(&id, q);
        }
        for p in pods {
            self.queue_pod_quota(&p, None, true);
        }
    }

    /// Queues the pod cgroup write pod sandbox `sandbox_id` needs now that one of its
    /// containers changed: the quota lifted while any live container of it holds exclusive
    /// CPUs (under `disable`), else, where `was_lifted` may be true, the kubelet's put back
    /// (where there is none: see [`PodQuota::PutBack`]). `pod`: its view, when the event had
    /// one (the pod's resources there are the kubelet's sum).
    pub(super) fn queue_pod_quota(
        &mut self,
        sandbox_id: &str,
        pod: Option<&PodView>,
        was_lifted: bool,
    ) {
        if self.config.leave_to_others.cpus {
            return;
        }
        let recs: Vec<&Record> = self
            .doc
            .containers
            .pod_containers(sandbox_id)
            .iter()
            .filter_map(|id| self.doc.containers.get(id))
            .filter(|r| !r.stopped && !r.exempt && r.pod_budget.is_none())
            .collect();
        let Some(first) = recs.iter().find(|r| !r.cgroups_path.is_empty()) else {
            return;
        };
        let exclusive = recs.iter().any(|r| r.assignment.exclusive);
        let want = if exclusive && self.config.exclusive_cpu_quota == ExclusiveCpuQuota::Disable {
            PodQuota::Lift
        } else if was_lifted {
            match kubelet_pod_quota(pod, &recs) {
                Some(q) => PodQuota::PutBack(q),
                None => return,
            }
        } else {
            return;
        };
        let write = PodQuotaWrite {
            pod_uid: pod
                .map(|p| p.uid.clone())
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| first.assignment.pod_uid.clone()),
            cgroups_path: first.cgroups_path.clone(),
            want,
        };
        self.quota.queue_pod(sandbox_id, write);
    }

    /// The pod cgroup writes waiting to be made, each pod once (the last one wins).
    pub fn take_pod_quota_writes(&mut self) -> Vec<PodQuotaWrite> {
        self.quota.take_pod_writes()
    }

    /// The quota updates waiting for a response, each container once (the last one wins).
    pub fn take_quota_updates(&mut self) -> Vec<QuotaUpdate> {
        self.quota.take_updates()
    }
}

/// The quota the kubelet gives the pod of `recs` (its live containers): the pod's resources
/// where the runtime passed them (`LinuxPodSandbox.pod_resources`, the kubelet's sum), else
/// the sum of its containers' quotas where every one has one (the kubelet sets none on the pod
/// otherwise). Its period is taken to be theirs. `None`: none, or not known.
fn kubelet_pod_quota(pod: Option<&PodView>, recs: &[&Record]) -> Option<i64> {
    let from_pod = pod
        .and_then(|p| p.resources.as_ref())
        .and_then(|r| r.cpu_quota)
        .filter(|q| *q > 0);
    if from_pod.is_some() {
        return from_pod;
    }
    recs.iter()
        .map(|r| r.kubelet_cpu_quota.filter(|q| *q > 0))
        .try_fold(0i64, |sum, q| q.map(|q| sum.saturating_add(q)))
        .filter(|sum| *sum > 0)
}
