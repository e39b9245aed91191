//! The sysfs reader on hwloc's own corpus of real machines: the `tests/hwloc/linux` snapshots of
//! open-mpi/hwloc (`*.tar.bz2`, gathered by `hwloc-gather-topology` on each machine) with the
//! `lstopo -v` output hwloc keeps beside each as its reference (`*.console`), vendored in
//! tests/fixtures/hwloc-linux with hwloc's copyright notice (COPYING there).
//!
//! Unlike tests/topology/lstopo.rs this needs no lstopo: the reference is hwloc's recorded
//! output, so it runs wherever `tar` can unpack bzip2. A tree agrees when the reader finds the
//! PUs, packages, cores (with their PUs), NUMA nodes with their CPUs and memory that the
//! reference lists. Levels the reference lists
//! nothing of (no Package, no Core) are not compared, and memory agrees within the unit lstopo
//! rounded it to. One tree exercises what hwloc models and nri-align does not
//! ([`EXPECTED_TO_DISAGREE`], each with why); every other tree must agree, and no tree may be
//! refused outright: every one of them is a real (or realistic) machine.
//!
//! Where lstopo ran in a restricted cpuset (`LinuxCgroup=` other than `/`) it left out the PUs
//! the cgroup disallows: the reader must find that cpuset itself (`Topology::outside_cpuset`,
//! the CPUs no container can be given on such a machine) and leave out the same PUs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use align_core::topology::read_host_checked;
use test_support::lstopo::View;

/// The trees that disagree, each for something hwloc models and nri-align does not. Every
/// other tree must agree, and these must not (a tree that starts to agree leaves the list).
const EXPECTED_TO_DISAGREE: [(&str, &str); 1] = [(
    "40intel64-4n10c+pci-conflicts",
    "hwloc drops package 3 on conflicting data",
)];

fn corpus() -> PathBuf {
    test_support::repo_root().join("tests/fixtures/hwloc-linux")
}

/// The trees with a reference output, by name.
fn trees() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus())
        .expect("tests/fixtures/hwloc-linux")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            let tree = name.strip_suffix(".tar.bz2")?.to_string();
            corpus()
                .join(format!("{tree}.console"))
                .exists()
                .then_some(tree)
        })
        .collect();
    names.sort();
    names
}

/// Unpacks tree `name` into `dir`; returns its root (the one directory the tarball holds, with
/// `sys` and `proc` in it; hwloc named some after the machine rather than the test).
fn unpack(name: &str, dir: &Path) -> PathBuf {
    let status = Command::new("tar")
        .arg("-xjf")
        .arg(corpus().join(format!("{name}.tar.bz2")))
        .arg("-C")
        .arg(dir)
        .status()
        .unwrap_or_else(|e| panic!("cannot run tar ({e}): it unpacks the hwloc corpus"));
    assert!(status.success(), "tar failed on {name}.tar.bz2");
    let mut tops: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("unpacked")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(tops.len(), 1, "{name}.tar.bz2 holds {tops:?}");
    tops.remove(0)
}

/// The reference output of tree `name`. hwloc hides NUMA nodes made of NVIDIA GPU memory unless
/// told to keep them; the kernel, and so the reader, lists them: for that tree the reference is
/// hwloc's own run that keeps them.
fn reference(name: &str) -> String {
    let kept = corpus().join(format!("{name}-kept.console"));
    let file = if kept.exists() {
        kept
    } else {
        corpus().join(format!("{name}.console"))
    };
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// `16GiB`, `512MiB`, `1234KiB`, `17B` (and hwloc 1.x's `KB`/`MB`/`GB`, also powers of 1024),
/// as bytes and the unit printed: `lstopo` rounds memory to a whole number of that unit.
fn size(text: &str) -> Option<(u64, u64)> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(digits);
    let shift = match unit {
        "" | "B" => 0,
        "KiB" | "KB" => 10,
        "MiB" | "MB" => 20,
        "GiB" | "GB" => 30,
        "TiB" | "TB" => 40,
        "PiB" | "PB" => 50,
        _ => return None,
    };
    num.parse::<u64>().ok().map(|n| (n << shift, 1 << shift))
}

/// One object line of `lstopo -v` output: `  Core L#3 (P#5 ...)`.
struct Line<'a> {
    indent: usize,
    kind: &'a str,
    os: Option<u32>,
    attrs: &'a str,
}

fn parse_line(line: &str) -> Option<Line<'_>> {
    let body = line.trim_start_matches(' ');
    let indent = line.len() - body.len();
    let (word, rest) = body.split_once(' ').unwrap_or((body, ""));
    // `NUMANode(NVM)`, `Group0`: the subtype and the level do not matter here.
    let kind = word.split('(').next().unwrap_or(word);
    // Every object but the Machine has a logical index.
    if kind != "Machine" && !rest.starts_with("L#") {
        return None;
    }
    let attrs = if rest.starts_with('(') {
        rest
    } else {
        rest.split_once(" (").map_or("", |(_, a)| a)
    };
    let attrs = attrs.strip_prefix('(').unwrap_or(attrs);
    let attrs = attrs.strip_suffix(')').unwrap_or(attrs);
    let os = attrs
        .strip_prefix("P#")
        .and_then(|a| a.split(' ').next())
        .and_then(|p| p.parse().ok());
    Some(Line {
        indent,
        kind,
        os,
        attrs,
    })
}

/// An object of lstopo's console output: its type, os index and the PUs under it.
struct Obj<'a> {
    kind: &'a str,
    os: Option<u32>,
    pus: Vec<u32>,
}

/// Fills the packages, cores and NUMA nodes of `v` from the objects and their PUs; the unit
/// each node's memory was rounded to, by node.
fn group_pus(
    v: &mut View,
    objs: &[Obj],
    nodes: BTreeMap<u32, (Option<usize>, (u64, u64))>,
) -> BTreeMap<u32, u64> {
    // A Package or Core without an os index keeps u32::MAX (see name_unnumbered_packages). A
    // Package without PUs (all of them outside lstopo's cgroup) lists nothing to compare.
    let mut packages_of_pu: BTreeMap<u32, u32> = BTreeMap::new();
    for o in objs
        .iter()
        .filter(|o| o.kind == "Package" && !o.pus.is_empty())
    {
        let id = o.os.unwrap_or(u32::MAX);
        v.packages.entry(id).or_default().extend(&o.pus);
        for pu in &o.pus {
            packages_of_pu.insert(*pu, id);
        }
    }
    for o in objs.iter().filter(|o| o.kind == "Core") {
        let pkg = o
            .pus
            .first()
            .and_then(|pu| packages_of_pu.get(pu))
            .copied()
            .unwrap_or(u32::MAX);
        v.cores
            .entry((pkg, o.os.unwrap_or(u32::MAX)))
            .or_default()
            .extend(&o.pus);
    }
    let mut units = BTreeMap::new();
    for (id, (parent, (local, unit))) in nodes {
        let cpus = parent
            .map(|i| objs[i].pus.iter().copied().collect())
            .unwrap_or_default();
        v.numa_cpus.insert(id, cpus);
        v.numa_memory.insert(id, local);
        units.insert(id, unit);
    }
    units
}

/// The view hwloc's reference output gives: PUs, packages and cores by os index with their PUs,
/// NUMA nodes with the PUs of the object they hang from (memory-side caches skipped) and their
/// local memory (with the unit it was rounded to, by node).
fn view_from_console(text: &str) -> Result<(View, BTreeMap<u32, u64>), String> {
    let mut v = View::default();
    let mut objs: Vec<Obj> = Vec::new();
    // (indent, object index) of the objects enclosing the current line.
    let mut stack: Vec<(usize, usize)> = Vec::new();
    // NUMA node os index -> (index of the object it hangs from, local memory).
    let mut nodes: BTreeMap<u32, (Option<usize>, (u64, u64))> = BTreeMap::new();
    for line in text.lines() {
        if line.trim_start().starts_with("depth ") || line.starts_with("Special depth") {
            break;
        }
        let Some(l) = parse_line(line) else {
            continue;
        };
        while stack.last().is_some_and(|(indent, _)| *indent >= l.indent) {
            stack.pop();
        }
        let idx = objs.len();
        objs.push(Obj {
            kind: l.kind,
            os: l.os,
            pus: Vec::new(),
        });
        match l.kind {
            "PU" => {
                let os = l.os.ok_or_else(|| format!("PU without P#: {line:?}"))?;
                v.pus.insert(os);
                for (_, i) in &stack {
                    objs[*i].pus.push(os);
                }
            }
            "NUMANode" => {
                let os =
                    l.os.ok_or_else(|| format!("NUMA node without P#: {line:?}"))?;
                let parent = stack
                    .iter()
                    .rev()
                    .map(|(_, i)| *i)
                    .find(|i| !matches!(objs[*i].kind, "MemCache" | "NUMANode"));
                let local = l
                    .attrs
                    .split(' ')
                    .find_map(|a| a.strip_prefix("local="))
                    .map(|s| size(s).ok_or_else(|| format!("memory size {s:?}")))
                    .transpose()?
                    .unwrap_or((0, 1));
                nodes.insert(os, (parent, local));
            }
            _ => {}
        }
        stack.push((l.indent, idx));
    }
    let units = group_pus(&mut v, &objs, nodes);
    Ok((v, units))
}
/// The PUs lstopo left out because the cgroup it ran in does not allow them (it shows what
/// the process may use unless told `--disallowed`), offline ones included. Empty when lstopo
/// ran in the root cgroup: then the PUs it left out are offline, which the reader leaves out
/// too.
fn disallowed(text: &str) -> BTreeSet<u32> {
    let cgroup = text
        .lines()
        .find_map(|l| l.strip_prefix("Topology infos: "))
        .and_then(|l| l.split(' ').find_map(|a| a.strip_prefix("LinuxCgroup=")));
    if matches!(cgroup, None | Some("/")) {
        return BTreeSet::new();
    }
    text.lines()
        .find_map(|l| l.split_once(" processors not represented in topology: "))
        .map(|(_, mask)| bitmap(mask))
        .unwrap_or_default()
}

/// hwloc bitmap text (`0x0000fff0`, `0x00000303,0x1`): 32-bit words, most significant first.
fn bitmap(text: &str) -> BTreeSet<u32> {
    let mut set = BTreeSet::new();
    for (i, word) in text.trim().split(',').rev().enumerate() {
        let bits = u32::from_str_radix(word.trim_start_matches("0x"), 16).unwrap_or(0);
        set.extend(
            (0..32)
                .filter(|b| bits & (1 << b) != 0)
                .map(|b| i as u32 * 32 + b),
        );
    }
    set
}

/// Why the reader's view of tree `name` is not hwloc's, if it is not.
fn disagreement(name: &str) -> Option<String> {
    let text = reference(name);
    let (theirs, units) = match view_from_console(&text) {
        Ok(v) => v,
        Err(e) => return Some(format!("reference output not understood: {e}")),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = unpack(name, dir.path());
    let (ours, outside, offline) = match read_host_checked(&root) {
        Ok((topo, _warnings)) => (
            test_support::lstopo::view_from_topology(&topo),
            topo.outside_cpuset.iter().collect::<BTreeSet<u32>>(),
            topo.offline_cpus.iter().collect::<BTreeSet<u32>>(),
        ),
        Err(e) => return Some(format!("refused: {e}")),
    };
    // Where lstopo left out the PUs its cgroup disallows, the reader must have found that
    // cpuset on its own (the containers' cpuset of such a machine): the same PUs, but those
    // offline, which it never counts. Those PUs are then left out of its view too.
    let hidden = disallowed(&text);
    let removed = if hidden.is_empty() {
        BTreeSet::new()
    } else {
        let expected: BTreeSet<u32> = hidden.difference(&offline).copied().collect();
        if outside != expected {
            return Some(format!(
                "CPUs outside the cpuset: ours {outside:?}, hwloc's cgroup leaves out {expected:?}"
            ));
        }
        outside
    };
    let ours = only_listed_levels(
        without_memoryless(without(ours, &removed, &theirs), &theirs),
        &theirs,
    );
    let mut theirs = name_unnumbered_cores(name_unnumbered_packages(theirs, &ours), &ours);
    // The reference rounds memory to the unit it prints: within one unit is the same figure.
    for (id, unit) in units {
        if let (Some(mine), Some(printed)) =
            (ours.numa_memory.get(&id), theirs.numa_memory.get_mut(&id))
        {
            if mine.abs_diff(*printed) < unit {
                *printed = *mine;
            }
        }
    }
    test_support::lstopo::differences(&ours, &theirs)
}

/// `ours` without the PUs of `hidden` (the cgroup's disallowed ones), and without the NUMA nodes
/// the reference leaves out (the cgroup's disallowed memory nodes, which lstopo does not count).
fn without(mut ours: View, hidden: &BTreeSet<u32>, theirs: &View) -> View {
    if hidden.is_empty() {
        return ours;
    }
    ours.pus.retain(|pu| !hidden.contains(pu));
    for pus in ours.packages.values_mut().chain(ours.cores.values_mut()) {
        pus.retain(|pu| !hidden.contains(pu));
    }
    ours.packages.retain(|_, pus| !pus.is_empty());
    ours.cores.retain(|_, pus| !pus.is_empty());
    let gone: Vec<u32> = ours
        .numa_cpus
        .keys()
        .filter(|id| !theirs.numa_cpus.contains_key(id))
        .copied()
        .collect();
    for id in gone {
        ours.numa_cpus.remove(&id);
        ours.numa_memory.remove(&id);
    }
    for cpus in ours.numa_cpus.values_mut() {
        cpus.retain(|pu| !hidden.contains(pu));
    }
    ours
}

/// `ours` without its nodes that have CPUs and no memory, where the reference lists no such
/// node: hwloc makes a NUMA node an object of memory, so a node without memory is not one (no
/// reference in the corpus lists a NUMA node without memory) and its CPUs stay in their
/// package only. The reader keeps such a node, since its CPUs are not local to any node's
/// memory (`Topology::memory_nodes_for` gives its containers the nearest memory).
fn without_memoryless(mut ours: View, theirs: &View) -> View {
    let gone: Vec<u32> = ours
        .numa_cpus
        .iter()
        .filter(|(id, cpus)| {
            !cpus.is_empty()
                && ours.numa_memory.get(id) == Some(&0)
                && !theirs.numa_cpus.contains_key(id)
        })
        .map(|(id, _)| *id)
        .collect();
    for id in gone {
        ours.numa_cpus.remove(&id);
        ours.numa_memory.remove(&id);
    }
    ours
}

/// `ours` without the levels the reference lists nothing of: a tree without
/// `physical_package_id` (PS3) or `core_id` gets no Package or Core from hwloc, where the
/// reader, which needs both to place, makes one package and one core per PU.
fn only_listed_levels(mut ours: View, theirs: &View) -> View {
    if theirs.packages.is_empty() {
        ours.packages.clear();
        ours.cores = std::mem::take(&mut ours.cores)
            .into_iter()
            .map(|((_, core), pus)| ((u32::MAX, core), pus))
            .collect();
    }
    if theirs.cores.is_empty() {
        ours.cores.clear();
    }
    ours
}

/// A Core the reference prints without an os index (no `core_id`, as on the PS3) gets the id
/// of the reader's core with the same PUs, if any: the grouping is what the reference can say
/// there.
fn name_unnumbered_cores(mut theirs: View, ours: &View) -> View {
    let unnumbered: Vec<(u32, u32)> = theirs
        .cores
        .keys()
        .filter(|(_, core)| *core == u32::MAX)
        .copied()
        .collect();
    for key in unnumbered {
        let Some(pus) = theirs.cores.remove(&key) else {
            continue;
        };
        let named = ours
            .cores
            .iter()
            .find(|(_, mine)| **mine == pus)
            .map_or(key, |(k, _)| *k);
        theirs.cores.insert(named, pus);
    }
    theirs
}

/// A Package the reference prints without an os index (`physical_package_id` unknown to hwloc,
/// as on s390 and ppc) gets the id of the reader's package with the same PUs, if any: the
/// grouping is what the reference can say there.
fn name_unnumbered_packages(mut theirs: View, ours: &View) -> View {
    let Some(pus) = theirs.packages.remove(&u32::MAX) else {
        return theirs;
    };
    let id = ours
        .packages
        .iter()
        .find(|(_, mine)| **mine == pus)
        .map_or(u32::MAX, |(id, _)| *id);
    theirs.packages.insert(id, pus);
    theirs.cores = std::mem::take(&mut theirs.cores)
        .into_iter()
        .map(|((pkg, core), pus)| ((if pkg == u32::MAX { id } else { pkg }, core), pus))
        .collect();
    theirs
}

#[test]
fn reader_agrees_with_hwloc_on_its_corpus_of_real_trees() {
    let trees = trees();
    assert_eq!(trees.len(), 34, "vendored trees: {trees:?}");
    let mut refused = Vec::new();
    let mut disagreeing = Vec::new();
    for name in &trees {
        match disagreement(name) {
            None => {}
            Some(why) if why.starts_with("refused") => refused.push(format!("{name}: {why}")),
            Some(why) => disagreeing.push(format!("{name}: {why}")),
        }
    }
    let agree = trees.len() - refused.len() - disagreeing.len();
    println!("{agree} of {} trees agree with hwloc", trees.len());
    for d in refused.iter().chain(&disagreeing) {
        println!("  {d}");
    }
    assert!(refused.is_empty(), "trees refused: {refused:#?}");
    let names: Vec<&str> = disagreeing
        .iter()
        .map(|d| d.split_once(": ").map_or(d.as_str(), |(n, _)| n))
        .collect();
    let expected: Vec<&str> = EXPECTED_TO_DISAGREE.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names, expected,
        "the trees that disagree are not the expected ones: {disagreeing:#?}"
    );
}

/// The comparison must see a difference, or the count above proves nothing.
#[test]
fn console_reading_and_comparison_catch_a_wrong_reading() {
    let name = "8em64t-2s2ca2c";
    let (theirs, _) = view_from_console(&reference(name)).expect("reference understood");
    assert_eq!(theirs.pus.len(), 8, "{theirs:?}");
    assert_eq!(theirs.packages.len(), 2, "{theirs:?}");
    assert_eq!(theirs.cores.len(), 8, "{theirs:?}");
    assert!(theirs.numa_memory.values().all(|m| *m > 0), "{theirs:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = unpack(name, dir.path());
    let (mut topo, _) = read_host_checked(&root).expect("read");
    assert_eq!(theirs.numa_cpus.len(), 1, "{theirs:?}");
    topo.cpus[3].core = 99;
    let wrong = test_support::lstopo::view_from_topology(&topo);
    assert!(test_support::lstopo::differences(&wrong, &theirs).is_some());
}

#[test]
fn sizes_are_read_in_every_unit_lstopo_prints() {
    assert_eq!(size("16GiB"), Some((16 << 30, 1 << 30)));
    assert_eq!(size("7980MB"), Some((7980 << 20, 1 << 20)));
    assert_eq!(size("1234KiB"), Some((1234 << 10, 1 << 10)));
    assert_eq!(size("17B"), Some((17, 1)));
    assert_eq!(size("3XB"), None);
}
