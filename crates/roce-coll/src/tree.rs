//! NCCL's double binary tree (NCCL `src/graph/trees.cc`, after Sanders,
//! Speck and Träff, "Two-tree algorithms for full bandwidth broadcast,
//! reduction and scan", Parallel Computing 2009).
//!
//! Tree 0 is an in-order binary tree over ranks `0..n` rooted at 0 (rank
//! 0's only child is the top of the tree): a rank's level is its lowest set
//! bit, so odd ranks are leaves. Tree 1 is tree 0 mirrored (`r -> n-1-r`)
//! when `n` is even, shifted by one (`r -> r+1 mod n`) when `n` is odd, so
//! a rank that is a leaf in one tree is (mostly) interior in the other and
//! every rank sends and receives about the same data in total.

/// One rank's neighbours in one tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeNode {
    pub parent: Option<usize>,
    pub children: [Option<usize>; 2],
}

/// NCCL's `ncclGetBtree`: the binary tree over `0..n` rooted at 0.
pub fn btree(n: usize, rank: usize) -> TreeNode {
    assert!(rank < n);
    let mut bit = 1usize;
    while bit < n {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return TreeNode { parent: None, children: [None, if n > 1 { Some(bit >> 1) } else { None }] };
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let mut lowbit = bit >> 1;
    let down0 = if lowbit == 0 { None } else { Some(rank - lowbit) };
    let mut down1 = None;
    while lowbit != 0 {
        if rank + lowbit < n {
            down1 = Some(rank + lowbit);
            break;
        }
        lowbit >>= 1;
    }
    TreeNode { parent: Some(up), children: [down0, down1] }
}

/// NCCL's `ncclGetDtree`: the two trees (tree 0, tree 1) for `rank`.
pub fn dtree(n: usize, rank: usize) -> [TreeNode; 2] {
    let t0 = btree(n, rank);
    let t1 = if n % 2 == 1 {
        let f = |r: usize| (r + n - 1) % n; // to tree-0 numbering
        let g = |r: usize| (r + 1) % n; // back
        let t = btree(n, f(rank));
        TreeNode { parent: t.parent.map(g), children: [t.children[0].map(g), t.children[1].map(g)] }
    } else {
        let m = |r: usize| n - 1 - r;
        let t = btree(n, m(rank));
        TreeNode { parent: t.parent.map(m), children: [t.children[0].map(m), t.children[1].map(m)] }
    };
    [t0, t1]
}

/// The root of tree `t` of a double tree over `n` ranks.
pub fn dtree_root(n: usize, t: usize) -> usize {
    match (t, n % 2) {
        (0, _) => 0,
        (_, 1) => 1 % n,
        _ => n - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both trees are spanning trees with consistent parent/child links,
    /// rooted where `dtree_root` says, of depth O(log n).
    #[test]
    fn both_trees_span_and_agree() {
        for n in 1..=70 {
            for t in 0..2 {
                let nodes: Vec<TreeNode> = (0..n).map(|r| dtree(n, r)[t]).collect();
                let root = dtree_root(n, t);
                for (r, node) in nodes.iter().enumerate() {
                    match node.parent {
                        None => assert_eq!(r, root, "n={n} t={t}"),
                        Some(p) => assert!(nodes[p].children.contains(&Some(r)), "n={n} t={t} r={r} p={p}"),
                    }
                    for c in node.children.iter().flatten() {
                        assert_eq!(nodes[*c].parent, Some(r), "n={n} t={t} r={r} c={c}");
                    }
                }
                // every rank reaches the root in few hops: no cycles
                for r in 0..n {
                    let (mut x, mut hops) = (r, 0);
                    while let Some(p) = nodes[x].parent {
                        x = p;
                        hops += 1;
                        assert!(hops <= 2 * (usize::BITS - n.leading_zeros()) as usize + 2, "n={n} t={t}");
                    }
                    assert_eq!(x, root);
                }
            }
        }
    }
}
