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
//! Three levels, each proven by checking the permutation itself against everything the ranking
//! reads (never inferred from names or switch ids):
//! - GPUs: two free GPUs are interchangeable when swapping them keeps every pair score and
//!   NVLink count among the free GPUs, their NUMA node, name and MIG state, and (when the
//!   request wants NICs) their PCIe level to every NIC. A class's members are then all
//!   interchangeable (swaps compose), so a set only says how many it takes of each class, and
//!   the lowest free indices of each class represent it.
//! - Classes: two classes of the same size are interchangeable when swapping them member for
//!   member (lowest with lowest) keeps the same; a set then only says the counts of a group's
//!   classes as a multiset, represented by counts that never increase along the group.
//! - Groups: two groups of the same shape are interchangeable when swapping them class for
//!   class (in group order), member for member, keeps the same: on the HGX-like host a
//!   socket's two host bridges, each a group of two switches (65 classes of 4-sets become 25).
//!   A set then only says a block's groups' count multisets as a multiset, represented by
//!   groups whose counts never increase (lexicographically) along the block.
//!
//! Held GPUs are left out of the check on purpose: the ranking reads the free GPUs only (the
//! set, the look-ahead over what stays free, the links left among the free GPUs), shared GPUs
//! only through their NUMA nodes, and NICs through their PCIe level to the set's GPUs (which
//! the symmetries keep only when asked to).

use super::gpus::{self, LinkTable};
use crate::placement::ledger::Ledger;

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
    /// Blocks of interchangeable groups (indices into `groups`), in group order.
    blocks: Vec<Vec<usize>>,
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
    /// Pair score (high half) and NVLink count (low half) by free positions, row-major.
    links: Vec<u64>,
}

impl<'a> Symmetry<'a> {
    /// The symmetries of `free` (ascending GPU indices) for a rank that reads NIC paths
    /// (`nics`) or not.
    pub fn new(table: &LinkTable, ledger: &Ledger, free: &'a [usize], nics: bool) -> Self {
        // Every free pair's score and NVLink count, read from the table once: the swap checks
        // compare them some 10,000 times per decision on 16 GPUs.
        let n = free.len();
        let mut links = vec![0u64; n * n];
        for (p, &a) in free.iter().enumerate() {
            for (q, &b) in free.iter().enumerate() {
                links[p * n + q] =
                    u64::from(table.pair(a, b)) << 32 | u64::from(table.nvlinks(a, b));
            }
        }
        let check = Check {
            table,
            ledger,
            free,
            nics,
            links,
        };
        let classes = check.classes();
        let groups = check.groups(&classes);
        let blocks = check.blocks(&classes, &groups);
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
            blocks,
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
        let mut out: Vec<Vec<usize>> = Vec::new();
        let ok = self.walk_counts(k, &mut |order, counts| {
            // Sized once: a collected `flat_map` grows its vector step by step (a tenth of an
            // idle 8-of-16 decision went to reallocating these).
            let mut set: Vec<usize> = Vec::with_capacity(k);
            for (&n, s) in counts.iter().zip(order) {
                set.extend(self.classes[s.class][..n].iter().map(|&p| self.free[p]));
            }
            set.sort_unstable();
            out.push(set);
            out.len() <= MAX_SETS
        });
        ok.then_some(out)
    }

    /// Walks the class counts of one `k`-set per class of interchangeable sets, calling `leaf`
    /// with the classes in walk order and each one's count; false once `leaf` does.
    fn walk_counts(&self, k: usize, leaf: &mut dyn FnMut(&[Slot], &[usize]) -> bool) -> bool {
        // The classes in block and group order, each with whether it opens its group (its
        // count is then free; later ones in the group take at most the count before them) and
        // its twin, the class at its place in the block's group before (the group's counts
        // then come lexicographically at most the counts of that group).
        let mut order: Vec<Slot> = Vec::with_capacity(self.classes.len());
        for block in &self.blocks {
            for (b, &g) in block.iter().enumerate() {
                let width = self.groups[g].len();
                let end = order.len() + width;
                for (i, &class) in self.groups[g].iter().enumerate() {
                    order.push(Slot {
                        class,
                        opens: i == 0,
                        twin: (b > 0).then(|| order.len() - width),
                        end,
                    });
                }
            }
        }
        // GPUs the classes from position i on hold: a branch that cannot reach k stops early.
        let mut room = vec![0; order.len() + 1];
        for i in (0..order.len()).rev() {
            room[i] = room[i + 1] + self.classes[order[i].class].len();
        }
        let mut walk = Walk {
            classes: &self.classes,
            order: &order,
            room: &room,
            counts: Vec::with_capacity(order.len()),
            leaf,
        };
        walk.step(k, true)
    }

    /// A key equal for two sets of free GPUs exactly when one maps onto the other by the
    /// symmetries found: per group, its classes' counts in the set, largest first. The tests
    /// check orbits and classes with it.
    #[cfg(test)]
    pub fn key(&self, set: &[usize]) -> Vec<u8> {
        let count = self.counts(set);
        let mut key = Vec::with_capacity(count.len() + self.groups.len() + self.blocks.len());
        for block in &self.blocks {
            let mut tuples: Vec<Vec<u8>> = block
                .iter()
                .map(|&g| {
                    let mut t: Vec<u8> = self.groups[g].iter().map(|&c| count[c]).collect();
                    t.sort_unstable_by(|a, b| b.cmp(a));
                    t
                })
                .collect();
            tuples.sort_unstable_by(|a, b| b.cmp(a));
            for t in tuples {
                key.extend(t);
                // Groups differ in length: a separator keeps two keys from running together.
                key.push(u8::MAX);
            }
            key.push(u8::MAX - 1);
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
        // Per group, its class counts ascending; per block, its groups' such lists ascending.
        let tuples: Vec<Vec<u8>> = self
            .groups
            .iter()
            .map(|g| {
                let mut v: Vec<u8> = g.iter().map(|&c| count[c]).collect();
                v.sort_unstable();
                v
            })
            .collect();
        let shapes = self
            .blocks
            .iter()
            .map(|b| {
                let mut v: Vec<Vec<u8>> = b.iter().map(|&g| tuples[g].clone()).collect();
                v.sort_unstable();
                v
            })
            .collect();
        let mut o = Orbit {
            sym: self,
            shapes,
            pools: tuples,
            cur: Vec::with_capacity(set.len()),
            out: Vec::new(),
        };
        o.place(0, 0);
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
        let (f, n, l) = (self.free, self.free.len(), &self.links);
        // Only pairs touching a moved GPU can change: a swap checks 2 rows, not all pairs
        // (finding the classes of 16 free GPUs runs this some 100 times per decision). Both
        // orientations, so a table that is not symmetric is still compared as read.
        (0..n).filter(|&p| map[p] != p).all(|p| {
            self.same_device(f[p], f[map[p]])
                && (0..n).filter(|&q| q != p).all(|q| {
                    let (x, y) = (map[p], map[q]);
                    l[p * n + q] == l[x * n + y] && l[q * n + p] == l[y * n + x]
                })
        })
    }

    /// Classes of interchangeable free GPUs: a GPU joins the first class whose first member it
    /// can swap with (swaps compose, so it can then swap with every member).
    fn classes(&self) -> Vec<Vec<usize>> {
        // Links alone on a host of up to 64 GPUs: the topology's table of which GPUs tell a
        // pair apart answers each swap with one AND against the free mask (`twins.rs`), the
        // same answer as the permutation check below.
        let twins = self.table.twins.as_ref().filter(|_| !self.nics);
        if let Some(twins) = twins.filter(|_| self.free.iter().all(|&g| g < 64)) {
            let mask = self.free.iter().fold(0u64, |m, &g| m | 1 << g);
            let mut classes: Vec<Vec<usize>> = Vec::new();
            for (p, &g) in self.free.iter().enumerate() {
                match classes
                    .iter_mut()
                    .find(|c| twins.swap(self.free[c[0]], g, mask))
                {
                    Some(c) => c.push(p),
                    None => classes.push(vec![p]),
                }
            }
            return classes;
        }
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

/// A class in the order of [`Symmetry::representatives`].
struct Slot {
    class: usize,
    /// First class of its group.
    opens: bool,
    /// Position in the order of the class at the same place in the block's group before.
    twin: Option<usize>,
    /// Position in the order past the last class of its group.
    end: usize,
}

/// The enumeration of class counts behind [`Symmetry::representatives`].
struct Walk<'a, 'l> {
    classes: &'a [Vec<usize>],
    order: &'a [Slot],
    room: &'a [usize],
    counts: Vec<usize>,
    /// Called with each complete choice of counts; false stops the walk.
    leaf: &'l mut dyn FnMut(&[Slot], &[usize]) -> bool,
}

impl Walk<'_, '_> {
    /// Chooses the count of the next class with `left` GPUs still to take, `tied` while the
    /// counts of its group so far equal those of the group before in the block; false once
    /// `leaf` says stop.
    fn step(&mut self, left: usize, tied: bool) -> bool {
        let i = self.counts.len();
        if left == 0 {
            return (self.leaf)(self.order, &self.counts);
        }
        if i == self.order.len() || self.room[i] < left {
            return true;
        }
        let slot = &self.order[i];
        let mut most = self.classes[slot.class].len().min(left);
        if !slot.opens {
            most = most.min(self.counts[i - 1]);
        }
        // A group's counts tie with the group before until one falls below its twin's.
        let tied = slot.opens || tied;
        let twin = slot.twin.map(|t| self.counts[t]);
        if let Some(t) = twin.filter(|_| tied) {
            most = most.min(t);
        }
        // The group's later classes (all of its size) take at most `n` each: once they and
        // the classes after the group cannot hold what is left, no smaller `n` can either,
        // and no set lies down there (the walk visited these dead branches one by one, a
        // third of its time on the idle HGX-like host). Only dead branches are cut: the
        // sets and their order stay.
        let (later, after) = (slot.end - i - 1, self.room[slot.end]);
        for n in (0..=most).rev() {
            if later * n + after < left - n {
                break;
            }
            self.counts.push(n);
            let ok = self.step(left - n, tied && twin == Some(n));
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
    /// Per block, the groups' count lists not yet placed (ascending).
    shapes: Vec<Vec<Vec<u8>>>,
    /// Per group, the class counts not yet placed (ascending).
    pools: Vec<Vec<u8>>,
    cur: Vec<usize>,
    out: Vec<Vec<usize>>,
}

impl Orbit<'_, '_> {
    /// Gives group `at` of block `block` one of the distinct count lists left in its block,
    /// then, once every group has one, arranges each group's counts over its classes.
    fn place(&mut self, block: usize, at: usize) {
        let sym = self.sym;
        if block == sym.blocks.len() {
            return self.arrange(0, 0);
        }
        if at == sym.blocks[block].len() {
            return self.place(block + 1, 0);
        }
        let group = sym.blocks[block][at];
        let mut i = 0;
        while i < self.shapes[block].len() {
            let t = self.shapes[block].remove(i);
            self.pools[group] = t.clone();
            self.place(block, at + 1);
            self.shapes[block].insert(i, t);
            // Equal lists give the same arrangements: each distinct list once.
            let t = &self.shapes[block][i];
            while i < self.shapes[block].len() && self.shapes[block][i] == *t {
                i += 1;
            }
        }
    }

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

impl Check<'_> {
    /// Blocks of interchangeable groups: a group joins the first block whose first group has
    /// its shape and swaps with it class for class, member for member.
    fn blocks(&self, classes: &[Vec<usize>], groups: &[Vec<usize>]) -> Vec<Vec<usize>> {
        let ident: Vec<usize> = (0..self.free.len()).collect();
        let size = |g: &[usize]| classes[g[0]].len();
        let mut blocks: Vec<Vec<usize>> = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            let home = blocks.iter().position(|b| {
                let first = &groups[b[0]];
                // Single-class groups are one class swap, which `groups` already refused.
                first.len() == group.len() && group.len() > 1 && size(first) == size(group) && {
                    let mut m = ident.clone();
                    for (&a, &c) in first.iter().zip(group) {
                        for (&x, &y) in classes[a].iter().zip(&classes[c]) {
                            m[x] = y;
                            m[y] = x;
                        }
                    }
                    self.preserves(&m)
                }
            });
            match home {
                Some(i) => blocks[i].push(g),
                None => blocks.push(vec![g]),
            }
        }
        blocks
    }
}

/// Whether no two GPUs of `free` are interchangeable by the links alone, as the topology's
/// table of twins tells without a permutation check: then [`Symmetry::new`] (without NICs)
/// would find every GPU its own class. False when the table cannot tell (no table, a GPU
/// index past 63).
pub fn none_interchangeable(table: &LinkTable, free: &[usize]) -> bool {
    let Some(twins) = &table.twins else {
        return false;
    };
    if free.iter().any(|&g| g >= 64) {
        return false;
    }
    let mask = free.iter().fold(0u64, |m, &g| m | 1 << g);
    // Each pair in the orientation `Check::classes` asks it: the earlier free GPU first.
    !free
        .iter()
        .enumerate()
        .any(|(p, &a)| free[p + 1..].iter().any(|&b| twins.swap(a, b, mask)))
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

mod best;
#[cfg(test)]
mod tests;
