use super::*;

/// A node with `gpus` GPUs and room for everything else.
fn gpu_bin(gpus: u64) -> Amounts {
    [64, 1 << 40, gpus, 2]
}

fn gpus(n: u64) -> Amounts {
    [1, 1 << 30, n, 0]
}

/// First fit without moves, as an online placement would: the node of each pod in arrival
/// order, or `None` from the first one refused.
fn first_fit(bins: &[Amounts], items: &[Amounts]) -> Option<Vec<usize>> {
    let mut free = bins.to_vec();
    let mut out = Vec::new();
    for it in items {
        let j = (0..free.len()).find(|j| fits(&free[*j], bins[*j][3], it, NicRule::Shared))?;
        for (f, x) in free[j].iter_mut().zip(it) {
            *f = f.saturating_sub(*x);
        }
        out.push(j);
    }
    Some(out)
}

#[test]
fn repacking_fits_where_first_fit_fails() {
    let bins = [gpu_bin(4), gpu_bin(4)];
    // 1 and 2 GPUs on node 0, 2 on node 1: the 3-GPU pod finds 1 and 2 GPUs free.
    let items = [gpus(1), gpus(2), gpus(2), gpus(3)];
    assert_eq!(first_fit(&bins, &items[..3]), Some(vec![0, 0, 1]));
    assert_eq!(first_fit(&bins, &items), None);
    // Moved: 1 + 3 on one node, 2 + 2 on the other.
    assert_eq!(pack(&bins, &items, NicRule::Shared, 1000), Packing::Fits);
}

#[test]
fn nothing_fits_when_no_packing_exists() {
    let bins = [gpu_bin(4), gpu_bin(4)];
    // More than a node: never under single-numa-node, though the host has 8.
    assert_eq!(
        pack(&bins, &[gpus(8)], NicRule::Shared, 1000),
        Packing::Full
    );
    // The host's totals are short.
    let nine = [gpus(4), gpus(4), gpus(1)];
    assert_eq!(pack(&bins, &nine, NicRule::Shared, 1000), Packing::Full);
    // Totals suffice (6 of 8) but no node holds two 3-GPU pods.
    let threes = [gpus(3), gpus(3), gpus(2)];
    assert_eq!(pack(&bins, &threes, NicRule::Shared, 1000), Packing::Full);
    // The CPUs of one node, the GPUs of the other: no node holds both.
    let split = [[8, 0, 0, 0], [1, 0, 4, 0]];
    assert_eq!(
        pack(&split, &[[4, 0, 2, 0]], NicRule::Shared, 1000),
        Packing::Full
    );
    // A NIC is shared, unless it is not.
    let nic = [[8, 1 << 30, 4, 1]];
    let two = [[1, 0, 1, 1], [1, 0, 1, 1]];
    assert_eq!(pack(&nic, &two, NicRule::Shared, 1000), Packing::Fits);
    assert_eq!(pack(&nic, &two, NicRule::Exclusive, 1000), Packing::Full);
    assert_eq!(
        pack(&nic, &[[1, 0, 1, 2]], NicRule::Shared, 1000),
        Packing::Full
    );
}

#[test]
fn the_bound_stops_the_search() {
    // Eight nodes of 7, pods of 2 and 3 whose totals fit (14 x 4 = 56) but whose packing
    // does not (a node holds 2+2+3 = 7 or 2+2+2 = 6 or 3+3 = 6 at best): the search must
    // walk many states to say so.
    let bins = vec![[7, 0, 0, 0]; 8];
    let mut items = vec![[3, 0, 0, 0]; 10];
    items.extend(vec![[2, 0, 0, 0]; 13]);
    assert_eq!(
        pack(&bins, &items, NicRule::Shared, u64::MAX),
        Packing::Full
    );
    assert_eq!(pack(&bins, &items, NicRule::Shared, 3), Packing::Bound);
}

/// Every assignment of `items` to `bins`, tried one by one.
fn brute(bins: &[Amounts], items: &[Amounts], rule: NicRule) -> Packing {
    let n = bins.len();
    let mut code = vec![0usize; items.len()];
    loop {
        let mut free = bins.to_vec();
        let ok = items.iter().zip(&code).all(|(it, j)| {
            let f = fits(&free[*j], bins[*j][3], it, rule);
            for (f, x) in free[*j].iter_mut().zip(it) {
                *f = f.saturating_sub(*x);
            }
            f
        });
        if ok {
            return Packing::Fits;
        }
        let Some(i) = code.iter().position(|c| *c + 1 < n) else {
            return Packing::Full;
        };
        code[i] += 1;
        code[..i].iter_mut().for_each(|c| *c = 0);
    }
}

#[test]
fn the_search_agrees_with_trying_every_assignment() {
    let mut x = 7u64;
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    for case in 0..400 {
        let nbins = 1 + next(3) as usize;
        let bins: Vec<Amounts> = (0..nbins)
            .map(|_| [4 + next(5), 4 + next(5), next(5), next(3)])
            .collect();
        let items: Vec<Amounts> = (0..1 + next(6))
            .map(|_| [1 + next(4), next(4), next(3), next(2)])
            .collect();
        for rule in [NicRule::Shared, NicRule::Exclusive] {
            assert_eq!(
                pack(&bins, &items, rule, u64::MAX),
                brute(&bins, &items, rule),
                "case {case} {rule:?}: {bins:?} {items:?}"
            );
        }
    }
}
