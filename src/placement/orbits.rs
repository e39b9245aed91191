//! Interchangeable GPUs: on a 16-GPU NVSwitch host most candidate sets of a decision are
//! copies of one another (GPU 0 + 2 of a switch ranks like GPU 1 + 3), so the search ranks one
//! set per class of copies instead of all C(16, k).
//!
//! The decision's search takes the symmetries of the links alone (`nics: false`): NICs would
//! keep every PCIe switch apart (one NIC each on a DGX-2) and leave hundreds of classes. The
//! sets of a class then tie on every rank field but the NIC ones, so the search ranks the
//! classes first and pairs NICs with every set ([`Symmetry::orbit`]) of the classes that can
//! still win only.
//!
//! Two levels, each proven by checking the permutation itself against everything the ranking
//! reads (never inferred from names or switch ids):
//! - GPUs: two free GPUs are interchangeable when swapping them keeps every pair score and
//!   NVLink count among the free GPUs, their NUMA node, name and MIG state, and (when the
//!   request wants NICs) their PCIe level to every NIC. A class's members are then all
//!   interchangeable (swaps compose), so a set only says how many it takes of each class, and
//!   the lowest free indices of each class represent it.
//! - Classes: two classes of the same size are interchangeable when swapping them member for
//!   member (lowest with lowest) keeps the same; a set then only says the counts of a group's
//!   classes as a multiset, represented by counts that never increase along the group.
//!
//! Held GPUs are left out of the check on purpose: the ranking reads the free GPUs only (the
//! set, the look-ahead over what stays free, the links left among the free GPUs), shared GPUs
//! only through their NUMA nodes, and NICs through their PCIe level to the set's GPUs (which
//! the symmetries keep only when asked to).

use super::gpus::{self, LinkTable};
use super::ledger::Ledger;

/// Most sets the reduced search builds before it gives up (then the full search runs).
const MAX_SETS: usize = 13_000;

/// The symmetries of the free GPUs that a decision's ranking cannot tell apart.
pub struct Symmetry<'a> {
    free: &'a [usize],
    /// Classes of interchangeable free GPUs (positions in `free`, ascending), in the order of
    /// their lowest member.
    classes: Vec<Vec<usize>>,
    /// Groups of interchangeable classes (indices into `classes`), in class order.
    groups: Vec<Vec<usize>>,
    /// The class of each free position.
    class_of: Vec<usize>,
}

/// What a permutation of the free GPUs must keep.
struct Check<'a> {
    table: &'a LinkTable,
    ledger: &'a Ledger,
    free: &'a [usize],
    /// Whether the request wants NICs: their PCIe levels to the GPUs then enter the rank.
    nics: bool,
}

impl<'a> Symmetry<'a> {
    /// The symmetries of `free` (ascending GPU indices) for a rank that reads NIC paths
    /// (`nics`) or not.
    pub fn new(table: &LinkTable, ledger: &Ledger, free: &'a [usize], nics: bool) -> Self {
        let check = Check {
            table,
            ledger,
            free,
            nics,
        };
        let classes = check.classes();
        let groups = check.groups(&classes);
        let mut class_of = vec![0; free.len()];
        for (c, members) in classes.iter().enumerate() {
            for &p in members {
                class_of[p] = c;
            }
        }
        Self {
            free,
            classes,
            groups,
            class_of,
        }
    }

    /// Whether any two free GPUs are interchangeable.
    pub fn reduces(&self) -> bool {
        self.classes.len() < self.free.len()
    }

    /// One `k`-set (GPU indices, ascending) per class of interchangeable sets, at least; `None`
    /// when there would be more than [`MAX_SETS`].
    pub fn representatives(&self, k: usize) -> Option<Vec<Vec<usize>>> {
        // The classes in group order, each with whether it opens its group (its count is then
        // free; later ones in the group take at most the count before them).
        let order: Vec<(usize, bool)> = self
            .groups
            .iter()
            .flat_map(|g| g.iter().enumerate().map(|(i, &c)| (c, i == 0)))
            .collect();
        // GPUs the classes from position i on hold: a branch that cannot reach k stops early.
        let mut room = vec![0; order.len() + 1];
        for i in (0..order.len()).rev() {
            room[i] = room[i + 1] + self.classes[order[i].0].len();
        }
        let mut walk = Walk {
            classes: &self.classes,
            order: &order,
            room: &room,
            free: self.free,
            counts: Vec::with_capacity(order.len()),
            out: Vec::new(),
        };
        walk.step(k).then_some(walk.out)
    }

    /// A key equal for two sets of free GPUs exactly when one maps onto the other by the
    /// symmetries found: per group, its classes' counts in the set, largest first. The tests
    /// check orbits and classes with it.
    #[cfg(test)]
    pub fn key(&self, set: &[usize]) -> Vec<u8> {
        let count = self.counts(set);
        let mut key = Vec::with_capacity(count.len() + self.groups.len());
        for group in &self.groups {
            let start = key.len();
            key.extend(group.iter().map(|&c| count[c]));
            key[start..].sort_unstable_by(|a, b| b.cmp(a));
            // Groups differ in length: a separator keeps two keys from running together.
            key.push(u8::MAX);
        }
        key
    }

    /// How many of each class `set` holds.
    fn counts(&self, set: &[usize]) -> Vec<u8> {
        let mut count = vec![0u8; self.classes.len()];
        for g in set {
            if let Ok(p) = self.free.binary_search(g) {
                let c = self.class_of[p];
                count[c] = count[c].saturating_add(1);
            }
        }
        count
    }

    /// Every free set the symmetries map `set` onto, `set` included (GPU indices, ascending):
    /// per group, each distinct arrangement of the set's class counts over the group's
    /// classes, and per class each choice of that many members. For a rank that reads what
    /// the symmetries do not keep (NIC paths): the orbit's sets tie on everything else, and
    /// the search pairs NICs with each of them instead of trusting one.
    pub fn orbit(&self, set: &[usize]) -> Vec<Vec<usize>> {
        let count = self.counts(set);
        let pools = self
            .groups
            .iter()
            .map(|g| {
                let mut v: Vec<u8> = g.iter().map(|&c| count[c]).collect();
                v.sort_unstable();
                v
            })
            .collect();
        let mut o = Orbit {
            sym: self,
            pools,
            cur: Vec::with_capacity(set.len()),
            out: Vec::new(),
        };
        o.arrange(0, 0);
        o.out
    }
}

impl Check<'_> {
    /// Whether GPU `a` can stand for GPU `b` on its own: node, product, MIG state, NIC paths.
    fn same_device(&self, a: usize, b: usize) -> bool {
        let topo = self.ledger.topo();
        let (ga, gb) = (&topo.gpus[a], &topo.gpus[b]);
        self.table.numa_of(a) == self.table.numa_of(b)
            && self.ledger.gpu_node(a) == self.ledger.gpu_node(b)
            && ga.name == gb.name
            && ga.mig_enabled == gb.mig_enabled
            && ga.mig_devices.len() == gb.mig_devices.len()
            && (!self.nics
                || (0..topo.nics.len())
                    .all(|n| self.ledger.nic_gpu_level(n, a) == self.ledger.nic_gpu_level(n, b)))
    }

    /// Whether the permutation `map` of free positions (position p goes to `map[p]`) keeps
    /// every device property and every pair relation the ranking reads.
    fn preserves(&self, map: &[usize]) -> bool {
        let f = self.free;
        let t = self.table;
        // Only pairs touching a moved GPU can change: a swap checks 2 rows, not all pairs
        // (finding the classes of 16 free GPUs runs this some 100 times per decision). Both
        // orientations, so a table that is not symmetric is still compared as read.
        let same = |a: usize, b: usize, x: usize, y: usize| {
            t.pair(a, b) == t.pair(x, y) && t.nvlinks(a, b) == t.nvlinks(x, y)
        };
        (0..f.len()).filter(|&p| map[p] != p).all(|p| {
            self.same_device(f[p], f[map[p]])
                && (0..f.len()).filter(|&q| q != p).all(|q| {
                    let (a, b) = (f[p], f[q]);
                    let (x, y) = (f[map[p]], f[map[q]]);
                    same(a, b, x, y) && same(b, a, y, x)
                })
        })
    }

    /// Classes of interchangeable free GPUs: a GPU joins the first class whose first member it
    /// can swap with (swaps compose, so it can then swap with every member).
    fn classes(&self) -> Vec<Vec<usize>> {
        // One permutation buffer, swapped and swapped back, rather than a copy per check.
        let mut m: Vec<usize> = (0..self.free.len()).collect();
        let mut classes: Vec<Vec<usize>> = Vec::new();
        for p in 0..self.free.len() {
            let home = classes.iter().position(|c| {
                m.swap(c[0], p);
                let kept = self.preserves(&m);
                m.swap(c[0], p);
                kept
            });
            match home {
                Some(i) => classes[i].push(p),
                None => classes.push(vec![p]),
            }
        }
        classes
    }

    /// Groups of interchangeable classes: a class joins the first group whose first class it
    /// can swap with member for member.
    fn groups(&self, classes: &[Vec<usize>]) -> Vec<Vec<usize>> {
        let ident: Vec<usize> = (0..self.free.len()).collect();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (c, members) in classes.iter().enumerate() {
            let home = groups.iter().position(|g| {
                let first = &classes[g[0]];
                // Two single-GPU classes are one swap of GPUs, which `classes` already
                // refused (else they would be one class): a host without interchangeable GPUs
                // (DGX-1V) skips these checks.
                first.len() == members.len() && members.len() > 1 && {
                    let mut m = ident.clone();
                    for (&x, &y) in first.iter().zip(members) {
                        m[x] = y;
                        m[y] = x;
                    }
                    self.preserves(&m)
                }
            });
            match home {
                Some(i) => groups[i].push(c),
                None => groups.push(vec![c]),
            }
        }
        groups
    }
}

/// The enumeration of class counts behind [`Symmetry::representatives`].
struct Walk<'a> {
    classes: &'a [Vec<usize>],
    order: &'a [(usize, bool)],
    room: &'a [usize],
    free: &'a [usize],
    counts: Vec<usize>,
    out: Vec<Vec<usize>>,
}

impl Walk<'_> {
    /// Chooses the count of the next class with `left` GPUs still to take; false once the
    /// output passes [`MAX_SETS`].
    fn step(&mut self, left: usize) -> bool {
        let i = self.counts.len();
        if left == 0 {
            let mut set: Vec<usize> = self
                .counts
                .iter()
                .zip(self.order)
                .flat_map(|(&n, &(c, _))| self.classes[c][..n].iter().map(|&p| self.free[p]))
                .collect();
            set.sort_unstable();
            self.out.push(set);
            return self.out.len() <= MAX_SETS;
        }
        if i == self.order.len() || self.room[i] < left {
            return true;
        }
        let (c, opens) = self.order[i];
        let mut most = self.classes[c].len().min(left);
        if !opens {
            most = most.min(self.counts[i - 1]);
        }
        for n in (0..=most).rev() {
            self.counts.push(n);
            let ok = self.step(left - n);
            self.counts.pop();
            if !ok {
                return false;
            }
        }
        true
    }
}

/// The enumeration behind [`Symmetry::orbit`].
struct Orbit<'s, 'a> {
    sym: &'s Symmetry<'a>,
    /// Per group, the class counts not yet placed (ascending).
    pools: Vec<Vec<u8>>,
    cur: Vec<usize>,
    out: Vec<Vec<usize>>,
}

impl Orbit<'_, '_> {
    /// Gives class `at` of group `group` one of the distinct counts left in its pool.
    fn arrange(&mut self, group: usize, at: usize) {
        let sym = self.sym;
        if group == sym.groups.len() {
            let mut set = self.cur.clone();
            set.sort_unstable();
            self.out.push(set);
            return;
        }
        if at == sym.groups[group].len() {
            return self.arrange(group + 1, 0);
        }
        let mut i = 0;
        while i < self.pools[group].len() {
            let n = self.pools[group].remove(i);
            self.take(group, at, 0, usize::from(n));
            self.pools[group].insert(i, n);
            // Equal counts give the same arrangements: each distinct count once.
            while i < self.pools[group].len() && self.pools[group][i] == n {
                i += 1;
            }
        }
    }

    /// Takes `left` more members of class `at` of group `group`, from its member `from` on.
    fn take(&mut self, group: usize, at: usize, from: usize, left: usize) {
        if left == 0 {
            return self.arrange(group, at + 1);
        }
        let sym = self.sym;
        let members = &sym.classes[sym.groups[group][at]];
        if members.len() < from + left {
            return;
        }
        for (j, &p) in members
            .iter()
            .enumerate()
            .take(members.len() - left + 1)
            .skip(from)
        {
            self.cur.push(sym.free[p]);
            self.take(group, at, j + 1, left - 1);
            self.cur.pop();
        }
    }
}

/// Whether the look-ahead over what `k` GPUs of `free` leave is a function of values only (no
/// tie broken by index), so interchangeable sets get the same look-ahead: the exact search of
/// the best `2k`-set stays within its enumeration limit and every NUMA node's free GPUs are
/// few enough for the exact partition.
pub fn lookahead_invariant(table: &LinkTable, free: &[usize], k: usize) -> bool {
    let rest = free.len().saturating_sub(k) as u64;
    let mut nodes: Vec<Option<u32>> = free.iter().map(|&g| table.numa_of(g)).collect();
    nodes.sort_unstable();
    gpus::exact_enumeration(rest, 2 * k as u64)
        && gpus::exact_enumeration(rest, k as u64)
        && nodes
            .chunk_by(|a, b| a == b)
            .all(|n| n.len() <= gpus::PARTITION_EXACT_GPUS)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::topology::testing::fixture_or_shipped;
    use crate::topology::CpuSet;

    /// The link table and an empty ledger of host `name`.
    fn host(name: &str) -> (LinkTable, Ledger) {
        let topo = fixture_or_shipped(name);
        (
            LinkTable::new(&topo),
            Ledger::new(Arc::new(topo), CpuSet::new()),
        )
    }

    #[test]
    fn dgx2_like_gpus_pair_by_switch_and_switches_group_by_socket() {
        let (table, ledger) = host("dgx2-like");
        let free: Vec<usize> = (0..16).collect();
        // Links alone: 8 switch pairs, 4 interchangeable switches per socket.
        let links = Symmetry::new(&table, &ledger, &free, false);
        assert_eq!(links.classes.len(), 8);
        assert_eq!(links.groups, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        // Multisets of 4 counts of at most 2 per socket: 3 x 3 + 2 x 2 + 1 for 4 GPUs.
        assert_eq!(links.representatives(4).map(|r| r.len()), Some(14));
        assert_eq!(links.representatives(8).map(|r| r.len()), Some(29));
        // Each switch's NIC tells the switches apart, not the GPUs of a switch.
        let nics = Symmetry::new(&table, &ledger, &free, true);
        assert_eq!(nics.classes.len(), 8);
        assert_eq!(nics.groups.len(), 8);
        // Sets that map onto each other share a key, others do not.
        assert_eq!(links.key(&[0, 2]), links.key(&[5, 7]));
        assert_ne!(links.key(&[0, 1]), links.key(&[0, 2]));
        assert_ne!(links.key(&[0, 2]), links.key(&[0, 8]));
    }

    #[test]
    fn orbits_of_the_representatives_cover_every_set_once() {
        // Idle DGX-2-like host, and islands16 with GPU 0 and 9 held (classes of one and of
        // two, groups of one and of three).
        for (name, free) in [
            ("dgx2-like", (0..16).collect::<Vec<usize>>()),
            ("islands16", (1..16).filter(|g| *g != 9).collect()),
        ] {
            let (table, ledger) = host(name);
            let sym = Symmetry::new(&table, &ledger, &free, false);
            for k in 1..=6 {
                let reps = sym.representatives(k).expect("few");
                let mut seen = std::collections::HashSet::new();
                for rep in &reps {
                    for set in sym.orbit(rep) {
                        assert_eq!(sym.key(&set), sym.key(rep), "{name} k={k}: {set:?}");
                        assert!(set.iter().all(|g| free.contains(g)), "{name}: {set:?}");
                        assert!(seen.insert(set), "{name} k={k}: twice");
                    }
                }
                let all = gpus::candidates(&table, &free, &[], k).len();
                assert_eq!(seen.len(), all, "{name} k={k}");
            }
        }
    }

    #[test]
    fn dgx1_cube_mesh_has_no_interchangeable_gpus() {
        let (table, ledger) = host("dgx1-v100");
        let free: Vec<usize> = (0..8).collect();
        let sym = Symmetry::new(&table, &ledger, &free, false);
        // NV1 / NV2 differ between every two GPUs' rows: each GPU is its own class.
        assert_eq!(sym.classes.len(), 8);
        let reps = sym.representatives(3).expect("few");
        assert_eq!(reps.len(), 56);
    }

    #[test]
    fn held_gpus_leave_their_mates_alone() {
        let (table, ledger) = host("islands16");
        // GPU 0 held: GPU 1 (its switch mate, NV4 to it) has no mate left; the other three
        // switches of island 0 stay interchangeable as pairs.
        let free: Vec<usize> = (1..16).collect();
        let sym = Symmetry::new(&table, &ledger, &free, false);
        assert_eq!(sym.classes.len(), 8);
        assert_eq!(sym.classes[0], vec![0]);
        assert_eq!(sym.groups[0], vec![0]);
        assert_eq!(sym.groups[1], vec![1, 2, 3]);
        assert!(lookahead_invariant(&table, &free, 4));
    }
}
