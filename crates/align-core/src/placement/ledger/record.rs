//! Recording, replacing and releasing a decision: each write checks first that nothing would
//! be held twice (an exclusive CPU, a GPU), that memory and huge pages fit their nodes and that
//! every device is known, so the record never holds more than the host has.

use super::Ledger;
use crate::placement::assignment::Assignment;
use crate::placement::error::PlacementError;

/// Huge pages to record: pages by (node index, page size in KiB).
type HeldPages = Vec<((usize, u64), u64)>;

impl Ledger {
    /// Records `a`, with its memory split over node indices. Refuses a second holder of an
    /// exclusive CPU or a GPU, memory beyond a node's size, and unknown devices.
    pub fn record(
        &mut self,
        a: Assignment,
        split: Vec<(usize, u64)>,
    ) -> Result<(), PlacementError> {
        if let Some(old) = self.assignments.get(&a.container_id) {
            return Err(PlacementError::Conflict {
                resource: "container".into(),
                id: a.container_id.clone(),
                holder: old.container_id.clone(),
            });
        }
        let gpus = a
            .gpus
            .iter()
            .map(|b| self.gpu_index(b))
            .collect::<Result<Vec<_>, _>>()?;
        let nics = a
            .nics
            .iter()
            .map(|n| self.nic_index(n))
            .collect::<Result<Vec<_>, _>>()?;
        let shared_gpus = a
            .shared_gpus
            .iter()
            .map(|b| self.gpu_index(b))
            .collect::<Result<Vec<_>, _>>()?;
        self.check_free(&a, &gpus, &split)?;
        let huge = self.check_huge(&a)?;
        if a.exclusive {
            self.exclusive.extend_from(&a.cpus);
        }
        let exclusive = a.exclusive;
        let opens = (!exclusive && self.headroom() > 0).then(|| a.cpus.clone());
        for g in gpus {
            self.gpu_owner.insert(g, a.container_id.clone());
        }
        for g in shared_gpus {
            *self.gpu_sharers.entry(g).or_insert(0) += 1;
        }
        for n in nics {
            if let Some(c) = self.nic_users.get_mut(n) {
                *c += 1;
            }
        }
        for (i, bytes) in &split {
            self.mem_used[*i] += bytes;
        }
        for (key, pages) in huge {
            *self.huge_used.entry(key).or_insert(0) += pages;
        }
        self.mem_split.insert(a.container_id.clone(), split);
        self.assignments.insert(a.container_id.clone(), a);
        if exclusive {
            self.settle_pool(false);
        } else if let Some(cpus) = opens.as_ref() {
            self.open_pool(cpus);
        }
        Ok(())
    }

    /// Whether what `a` holds (its GPUs `gpus` as indices, its memory `split` by node index)
    /// is free: no exclusive CPU held or reserved, no GPU held, no node's memory exceeded.
    fn check_free(
        &self,
        a: &Assignment,
        gpus: &[usize],
        split: &[(usize, u64)],
    ) -> Result<(), PlacementError> {
        if a.exclusive {
            if let Some(cpu) = a.cpus.intersection(&self.exclusive).first() {
                return Err(PlacementError::Conflict {
                    resource: "exclusive cpu".into(),
                    id: cpu.to_string(),
                    holder: self.cpu_holder(cpu).unwrap_or("?").to_string(),
                });
            }
            if let Some(cpu) = a.cpus.intersection(&self.reserved).first() {
                return Err(PlacementError::Restore {
                    container: a.container_id.clone(),
                    reason: format!("cpu {cpu} is reserved"),
                });
            }
        }
        for g in gpus {
            if let Some(holder) = self.gpu_owner.get(g) {
                return Err(PlacementError::Conflict {
                    resource: "gpu".into(),
                    id: self.topo.gpus[*g].pci_bus_id.clone(),
                    holder: holder.clone(),
                });
            }
        }
        for (i, bytes) in split {
            if *bytes > self.free_mem(*i) {
                return Err(PlacementError::Restore {
                    container: a.container_id.clone(),
                    reason: format!(
                        "node {} has {} bytes free, {} needed",
                        self.topo.numa_nodes.get(*i).map_or(0, |n| n.id),
                        self.free_mem(*i),
                        bytes
                    ),
                });
            }
        }
        Ok(())
    }

    /// Whether the huge pages `a` holds are free on their nodes; the pages by (node index, page
    /// size) to record.
    fn check_huge(&self, a: &Assignment) -> Result<HeldPages, PlacementError> {
        let mut huge: HeldPages = Vec::new();
        for h in &a.hugepages {
            let refuse = |reason: String| PlacementError::Restore {
                container: a.container_id.clone(),
                reason,
            };
            let i = self
                .topo
                .node_index(h.node)
                .ok_or_else(|| refuse(format!("node {} is not in the topology", h.node)))?;
            let key = (i, h.size_kb);
            let before: u64 = huge.iter().filter(|(k, _)| *k == key).map(|(_, p)| p).sum();
            let free = self.free_huge(i, h.size_kb).saturating_sub(before);
            if h.pages > free {
                return Err(refuse(format!(
                    "node {} has {} free, {} needed",
                    h.node,
                    crate::placement::hugepages::fmt_pages(h.size_kb, free),
                    h.pages
                )));
            }
            huge.push((key, h.pages));
        }
        Ok(huge)
    }

    /// Forgets container `id`; its resources become free.
    pub fn release(&mut self, id: &str) -> Option<Assignment> {
        let a = self.assignments.remove(id)?;
        if a.exclusive {
            self.exclusive.subtract(&a.cpus);
            self.settle_pool(false);
        }
        self.gpu_owner.retain(|_, holder| holder != id);
        for bus in &a.shared_gpus {
            if let Ok(g) = self.gpu_index(bus) {
                if let Some(n) = self.gpu_sharers.get_mut(&g) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.gpu_sharers.remove(&g);
                    }
                }
            }
        }
        for name in &a.nics {
            if let Ok(n) = self.nic_index(name) {
                if let Some(c) = self.nic_users.get_mut(n) {
                    *c = c.saturating_sub(1);
                }
            }
        }
        for (i, bytes) in self.mem_split.remove(id).unwrap_or_default() {
            self.mem_used[i] = self.mem_used[i].saturating_sub(bytes);
        }
        for h in &a.hugepages {
            let Some(i) = self.topo.node_index(h.node) else {
                continue;
            };
            if let Some(used) = self.huge_used.get_mut(&(i, h.size_kb)) {
                *used = used.saturating_sub(h.pages);
                if *used == 0 {
                    self.huge_used.remove(&(i, h.size_kb));
                }
            }
        }
        Some(a)
    }

    /// Replaces container `a.container_id`'s assignment by `a` with its memory `split` (an
    /// in-place resize). On a refusal the old assignment stays recorded as it was.
    pub fn replace(
        &mut self,
        a: Assignment,
        split: Vec<(usize, u64)>,
    ) -> Result<(), PlacementError> {
        let id = a.container_id.clone();
        let old_split = self.mem_split.get(&id).cloned().unwrap_or_default();
        let Some(old) = self.release(&id) else {
            return self.record(a, split);
        };
        match self.record(a, split) {
            Ok(()) => Ok(()),
            Err(e) => {
                // What it held was free a moment ago: recording it again cannot conflict.
                self.record(old, old_split)?;
                Err(e)
            }
        }
    }
}
