//! The radix tree against a brute-force reference, over seeded random
//! operation sequences (insert, match, lock, unlock, evict).
//!
//! The reference is a map from every cached page-aligned prefix to the page
//! that ends it, plus the list of held locks (each a matched prefix). After
//! every operation the tree must hold exactly the reference's prefixes and
//! pages, and the pool's ledger must be exact.

use std::collections::HashMap;

use minisgl::kv::{NodeId, PagePool, PageState, RadixTree};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

struct Sim {
    ps: usize,
    tree: RadixTree,
    pool: PagePool,
    reference: HashMap<Vec<u32>, u32>,
    /// Held locks: node and the prefix the request matched.
    locks: Vec<(NodeId, Vec<u32>)>,
    /// Sequences inserted so far, to build overlapping ones.
    history: Vec<Vec<u32>>,
    now: u64,
}

impl Sim {
    fn new(ps: usize, pages: u32) -> Self {
        Sim {
            ps,
            tree: RadixTree::new(ps as u32),
            pool: PagePool::new(pages, ps as u32).unwrap(),
            reference: HashMap::new(),
            locks: Vec::new(),
            history: Vec::new(),
            now: 0,
        }
    }

    /// A random sequence that often shares a prefix with an earlier one.
    fn sequence(&self, rng: &mut ChaCha8Rng) -> Vec<u32> {
        let mut seq = Vec::new();
        if !self.history.is_empty() && rng.random_bool(0.7) {
            let base = &self.history[rng.random_range(0..self.history.len())];
            let keep = rng.random_range(0..=base.len());
            seq.extend_from_slice(&base[..keep]);
        }
        let extra = rng.random_range(0..4 * self.ps + 3);
        // A tiny alphabet so unrelated sequences also collide.
        seq.extend((0..extra).map(|_| rng.random_range(0..3u32)));
        seq
    }

    fn ref_match_len(&self, tokens: &[u32]) -> usize {
        let mut len = 0;
        while len + self.ps <= tokens.len() && self.reference.contains_key(&tokens[..len + self.ps])
        {
            len += self.ps;
        }
        len
    }

    fn ref_pages(&self, tokens: &[u32], len: usize) -> Vec<u32> {
        (1..=len / self.ps)
            .map(|k| self.reference[&tokens[..k * self.ps]])
            .collect()
    }

    fn insert(&mut self, rng: &mut ChaCha8Rng) {
        let mut seq = self.sequence(rng);
        seq.truncate(seq.len() / self.ps * self.ps);
        if seq.is_empty() {
            return;
        }
        // Like a request: reuse the cached prefix (locked while computing the
        // rest), allocate pages for the rest, then insert everything.
        self.now += 1;
        let m = self.tree.match_prefix(&seq, self.now, 0);
        assert_eq!(m.len as usize, self.ref_match_len(&seq));
        assert_eq!(m.pages, self.ref_pages(&seq, m.len as usize));
        self.tree.lock(m.node);
        let need = (seq.len() - m.len as usize) / self.ps;
        let own = loop {
            if let Some(own) = self.pool.alloc(need as u32) {
                break Some(own);
            }
            if !self.evict_one(rng) {
                break None;
            }
        };
        let Some(own) = own else {
            self.tree.unlock(m.node);
            return;
        };
        // Sometimes pretend the request recomputed (part of) its cached
        // prefix itself: the tree must free those duplicates.
        let mut pages = m.pages.clone();
        let recompute = rng
            .random_range(0..=pages.len())
            .min(self.pool.free_pages() as usize);
        if recompute > 0 && rng.random_bool(0.3) {
            let dup = self.pool.alloc(recompute as u32).unwrap();
            let start = pages.len() - recompute;
            pages[start..].copy_from_slice(&dup);
        }
        pages.extend_from_slice(&own);
        let before: HashMap<Vec<u32>, u32> = self.reference.clone();
        self.now += 1;
        let ins = self.tree.insert(&seq, &pages, &mut self.pool, self.now, 0);
        self.tree.unlock(m.node);
        for k in 1..=seq.len() / self.ps {
            self.reference
                .entry(seq[..k * self.ps].to_vec())
                .or_insert(pages[k - 1]);
        }
        assert_eq!(ins.pages, self.ref_pages(&seq, seq.len()));
        let added = self.reference.len() - before.len();
        assert_eq!(ins.adopted as usize, added);
        self.history.push(seq);
        if self.history.len() > 64 {
            self.history.remove(0);
        }
    }

    fn lock(&mut self, rng: &mut ChaCha8Rng) {
        let seq = self.sequence(rng);
        assert_eq!(self.tree.match_len(&seq) as usize, self.ref_match_len(&seq));
        self.now += 1;
        let m = self
            .tree
            .match_prefix(&seq, self.now, rng.random_range(-2..3));
        let len = m.len as usize;
        assert_eq!(len, self.ref_match_len(&seq));
        assert_eq!(m.pages, self.ref_pages(&seq, len));
        if len > 0 {
            self.tree.lock(m.node);
            self.locks.push((m.node, seq[..len].to_vec()));
        }
    }

    fn unlock(&mut self, rng: &mut ChaCha8Rng) {
        if self.locks.is_empty() {
            return;
        }
        let (node, _) = self
            .locks
            .swap_remove(rng.random_range(0..self.locks.len()));
        self.tree.unlock(node);
    }

    /// Evicts a random evictable leaf; false when there is none.
    fn evict_one(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let leaves = self.tree.evictable_leaves();
        if leaves.is_empty() {
            return false;
        }
        let leaf = leaves[rng.random_range(0..leaves.len())].clone();
        let freed = self.tree.evict(leaf.node, &mut self.pool).unwrap();
        assert_eq!(freed, leaf.pages);
        // What disappeared must be one chain ending at `depth`, starting
        // right after depth - tokens, extended by nothing, covered by no lock.
        let after: HashMap<Vec<u32>, u32> = self.tree.dump().into_iter().collect();
        let mut removed: Vec<(Vec<u32>, u32)> = self
            .reference
            .iter()
            .filter(|(k, _)| !after.contains_key(*k))
            .map(|(k, &p)| (k.clone(), p))
            .collect();
        removed.sort_by_key(|(k, _)| k.len());
        assert_eq!(removed.len() as u32, leaf.pages);
        let longest = removed.last().unwrap().0.clone();
        assert_eq!(longest.len() as u32, leaf.depth);
        for (i, (k, page)) in removed.iter().enumerate() {
            assert_eq!(k.len(), longest.len() - (removed.len() - 1 - i) * self.ps);
            assert_eq!(&longest[..k.len()], &k[..]);
            assert_eq!(self.pool.state(*page), Some(PageState::Free));
        }
        assert!(
            !self
                .reference
                .keys()
                .any(|k| k.len() > longest.len() && k.starts_with(&longest)),
            "evicted a node that had children"
        );
        assert!(
            !self.locks.iter().any(|(_, p)| p.starts_with(&longest)),
            "evicted a locked node"
        );
        for (k, _) in &removed {
            self.reference.remove(k);
        }
        true
    }

    fn try_bad_evictions(&mut self, rng: &mut ChaCha8Rng) {
        if let Some((node, _)) = self.locks.get(rng.random_range(0..self.locks.len().max(1))) {
            let before = self.pool.usage();
            assert!(self.tree.evict(*node, &mut self.pool).is_err());
            assert_eq!(before, self.pool.usage());
        }
        assert!(self.tree.evict(self.tree.root(), &mut self.pool).is_err());
        assert!(self.tree.evict(0xdead_0000_0007, &mut self.pool).is_err());
    }

    fn check(&self) {
        self.pool.check().unwrap();
        self.tree.check(&self.pool).unwrap();
        let dump: HashMap<Vec<u32>, u32> = self.tree.dump().into_iter().collect();
        assert_eq!(dump, self.reference);
        let usage = self.pool.usage();
        assert_eq!(usage.cached as usize, self.reference.len());
        assert_eq!(
            usage.in_use, 0,
            "a caller page was neither adopted nor freed"
        );
        assert_eq!(usage.free + usage.cached, usage.total);
        let locked = self
            .reference
            .keys()
            .filter(|k| self.locks.iter().any(|(_, p)| p.starts_with(k)))
            .count();
        assert_eq!(
            self.tree.evictable_pages() as usize,
            self.reference.len() - locked
        );
    }
}

fn run(seed: u64, ps: usize, pages: u32, ops: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sim = Sim::new(ps, pages);
    for _ in 0..ops {
        match rng.random_range(0..100) {
            0..40 => sim.insert(&mut rng),
            40..65 => sim.lock(&mut rng),
            65..85 => sim.unlock(&mut rng),
            85..95 => {
                sim.evict_one(&mut rng);
            }
            _ => sim.try_bad_evictions(&mut rng),
        }
        sim.check();
    }
    // Release everything: the whole cache must drain back to the pool.
    while let Some((node, _)) = sim.locks.pop() {
        sim.tree.unlock(node);
    }
    while sim.evict_one(&mut rng) {}
    sim.check();
    assert_eq!(sim.pool.free_pages(), pages);
    assert_eq!(sim.tree.cached_pages(), 0);
}

#[test]
fn random_ops_page_size_1() {
    for seed in 0..3 {
        run(seed, 1, 64, 3000);
    }
}

#[test]
fn random_ops_page_size_2() {
    for seed in 10..13 {
        run(seed, 2, 48, 3000);
    }
}

#[test]
fn random_ops_page_size_4_tight_pool() {
    for seed in 20..23 {
        run(seed, 4, 12, 3000);
    }
}

#[test]
fn split_keeps_locked_node_id_valid() {
    let mut pool = PagePool::new(8, 2).unwrap();
    let mut tree = RadixTree::new(2);
    let pages = pool.alloc(3).unwrap();
    let ins = tree.insert(&[1, 2, 3, 4, 5, 6], &pages, &mut pool, 1, 0);
    tree.lock(ins.node);
    // Matching a shorter prefix splits the node; the locked id stays valid
    // and its new parent inherits the lock.
    let m = tree.match_prefix(&[1, 2, 3, 4, 9, 9], 2, 0);
    assert_eq!(m.len, 4);
    assert_eq!(m.pages, pages[..2].to_vec());
    assert_eq!(tree.lock_count(m.node), 1);
    assert_eq!(tree.lock_count(ins.node), 1);
    assert!(tree.evictable_leaves().is_empty());
    tree.unlock(ins.node);
    assert_eq!(tree.evictable_pages(), 3);
    tree.check(&pool).unwrap();
}
