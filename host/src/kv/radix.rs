//! The radix prefix cache: a tree over token ids whose edges are whole pages.
//!
//! Every node holds a run of tokens (a multiple of the page size) and the KV
//! pages that store them; the path from the root spells a cached prefix. Keys
//! are page aligned so a node's pages are never shared with a partial page of
//! another sequence: splitting a node splits its page list at a page boundary.
//!
//! Nodes live in an arena (`Vec` + free list). A node id is `generation << 32
//! | index`, so an id handed to a plugin cannot name a recycled slot.
//!
//! Locking: a request that reads a cached prefix locks the deepest node of it;
//! `lock` counts up that node and every ancestor. Only unlocked leaves can be
//! evicted, so a page a request reads is never freed under it.

use std::collections::HashMap;

use minisgl_plugin_sdk::CacheLeaf;
use thiserror::Error;

use super::pool::{PageId, PagePool};

/// Identifier of a radix node (`generation << 32 | arena index`).
pub type NodeId = u64;

const ROOT: u32 = 0;

/// Why a node cannot be evicted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EvictError {
    #[error("radix node {0:#x} does not exist (stale or invalid id)")]
    NoSuchNode(NodeId),
    #[error("radix node {0:#x} is the root")]
    Root(NodeId),
    #[error("radix node {0:#x} has children")]
    NotLeaf(NodeId),
    #[error("radix node {0:#x} is locked by {1} request(s)")]
    Locked(NodeId, u32),
}

#[derive(Debug, Default)]
struct Node {
    parent: u32,
    /// Tokens of this edge; `key.len() == pages.len() * page_size`.
    key: Vec<u32>,
    pages: Vec<PageId>,
    /// Children by the tokens of their first page.
    children: HashMap<Vec<u32>, u32>,
    lock: u32,
    /// Tokens from the root to the end of this node.
    depth: u32,
    last_access_us: u64,
    hit_count: u32,
    created_us: u64,
    priority: i32,
    generation: u32,
    alive: bool,
}

/// A cached prefix found for a token sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixMatch {
    /// Deepest node of the match (the root when nothing matched).
    pub node: NodeId,
    /// Matched tokens, a multiple of the page size.
    pub len: u32,
    /// The pages holding those tokens, in order.
    pub pages: Vec<PageId>,
}

/// Outcome of inserting a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// Deepest node of the inserted sequence.
    pub node: NodeId,
    /// The tree's pages for the whole key (where the tree already had a page
    /// the caller's duplicate was freed and the tree's is returned).
    pub pages: Vec<PageId>,
    /// Pages of the caller that the tree adopted.
    pub adopted: u32,
    /// Pages of the caller freed because the tree already held those tokens.
    pub duplicates: u32,
}

/// The radix tree. Owns the bookkeeping of `Cached` pages in the pool.
#[derive(Debug)]
pub struct RadixTree {
    page_size: u32,
    nodes: Vec<Node>,
    free_slots: Vec<u32>,
    cached_pages: u32,
    /// Pages in nodes with `lock == 0` (all of them can be evicted, leaf by leaf).
    evictable_pages: u32,
    /// Bumped on every insert and eviction (lets callers cache `match_len`).
    version: u64,
}

impl RadixTree {
    pub fn new(page_size: u32) -> Self {
        let root = Node {
            alive: true,
            ..Node::default()
        };
        RadixTree {
            page_size,
            nodes: vec![root],
            free_slots: Vec::new(),
            cached_pages: 0,
            evictable_pages: 0,
            version: 0,
        }
    }

    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// Pages held by the tree.
    pub fn cached_pages(&self) -> u32 {
        self.cached_pages
    }

    /// Pages in unlocked nodes: what evicting every unlocked leaf, repeatedly,
    /// would free.
    pub fn evictable_pages(&self) -> u32 {
        self.evictable_pages
    }

    /// Changes whenever the tree's content changes.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Id of the root (matching nothing).
    pub fn root(&self) -> NodeId {
        self.id_of(ROOT)
    }

    fn id_of(&self, index: u32) -> NodeId {
        (u64::from(self.nodes[index as usize].generation) << 32) | u64::from(index)
    }

    fn index_of(&self, id: NodeId) -> Option<u32> {
        let index = (id & 0xffff_ffff) as u32;
        let node = self.nodes.get(index as usize)?;
        (node.alive && u64::from(node.generation) == id >> 32).then_some(index)
    }

    fn ps(&self) -> usize {
        self.page_size as usize
    }

    /// Longest cached prefix of `tokens` in tokens (page aligned), without
    /// touching the tree.
    pub fn match_len(&self, tokens: &[u32]) -> u32 {
        let ps = self.ps();
        let mut node = ROOT;
        let mut pos = 0usize;
        loop {
            if tokens.len() - pos < ps {
                return pos as u32;
            }
            let Some(&child) = self.nodes[node as usize]
                .children
                .get(&tokens[pos..pos + ps])
            else {
                return pos as u32;
            };
            let c = &self.nodes[child as usize];
            let same = common_pages(&c.key, &tokens[pos..], ps);
            pos += same * ps;
            if same < c.pages.len() {
                return pos as u32;
            }
            node = child;
        }
    }

    /// Longest cached prefix of `tokens`, splitting a node so that the match
    /// ends exactly at a node. Records the access (time, hit count, priority)
    /// on the matched path. Does not lock.
    pub fn match_prefix(&mut self, tokens: &[u32], now_us: u64, priority: i32) -> PrefixMatch {
        let ps = self.ps();
        let mut node = ROOT;
        let mut pos = 0usize;
        let mut pages = Vec::new();
        while tokens.len() - pos >= ps {
            let Some(&child) = self.nodes[node as usize]
                .children
                .get(&tokens[pos..pos + ps])
            else {
                break;
            };
            let same = common_pages(&self.nodes[child as usize].key, &tokens[pos..], ps);
            let child = if same < self.nodes[child as usize].pages.len() {
                self.split(child, same)
            } else {
                child
            };
            let c = &mut self.nodes[child as usize];
            c.last_access_us = c.last_access_us.max(now_us);
            c.hit_count += 1;
            c.priority = c.priority.max(priority);
            pages.extend_from_slice(&c.pages);
            pos += same * ps;
            node = child;
        }
        PrefixMatch {
            node: self.id_of(node),
            len: pos as u32,
            pages,
        }
    }

    /// Splits `index` after `at` pages: a new node takes the first `at` pages
    /// and becomes the parent of `index`, which keeps its id (so locks held on
    /// it stay valid). Returns the new node.
    fn split(&mut self, index: u32, at: usize) -> u32 {
        let ps = self.ps();
        let (parent, first_key, head_key, head_pages, stats) = {
            let n = &mut self.nodes[index as usize];
            debug_assert!(at > 0 && at < n.pages.len());
            let tail_key = n.key.split_off(at * ps);
            let head_key = std::mem::replace(&mut n.key, tail_key);
            let tail_pages = n.pages.split_off(at);
            let head_pages = std::mem::replace(&mut n.pages, tail_pages);
            let stats = (
                n.lock,
                n.depth - (n.key.len() as u32),
                n.last_access_us,
                n.hit_count,
                n.created_us,
                n.priority,
            );
            (
                n.parent,
                head_key[..ps].to_vec(),
                head_key,
                head_pages,
                stats,
            )
        };
        let (lock, depth, last_access_us, hit_count, created_us, priority) = stats;
        let tail_first = self.nodes[index as usize].key[..ps].to_vec();
        let mid = self.alloc_node(Node {
            parent,
            key: head_key,
            pages: head_pages,
            children: HashMap::from([(tail_first, index)]),
            lock,
            depth,
            last_access_us,
            hit_count,
            created_us,
            priority,
            generation: 0,
            alive: true,
        });
        self.nodes[index as usize].parent = mid;
        self.nodes[parent as usize].children.insert(first_key, mid);
        mid
    }

    fn alloc_node(&mut self, mut node: Node) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => {
                node.generation = self.nodes[slot as usize].generation.wrapping_add(1);
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Adds `tokens` (a multiple of the page size) whose KV is in `pages` (the
    /// caller's `InUse` pages, one per page of tokens; where the caller reused
    /// a cached prefix these are the tree's own pages). Pages the tree did not
    /// have are adopted (`InUse → Cached`); caller pages that duplicate a page
    /// the tree already holds are freed. Afterwards the caller owns none of
    /// `pages`: it must use [`Inserted::pages`] if it goes on reading them.
    pub fn insert(
        &mut self,
        tokens: &[u32],
        pages: &[PageId],
        pool: &mut PagePool,
        now_us: u64,
        priority: i32,
    ) -> Inserted {
        let ps = self.ps();
        assert_eq!(
            tokens.len(),
            pages.len() * ps,
            "insert key must be page aligned"
        );
        let mut node = ROOT;
        let mut pos = 0usize;
        let mut out_pages = Vec::with_capacity(pages.len());
        let mut duplicates = 0u32;
        while pos < tokens.len() {
            let Some(&child) = self.nodes[node as usize]
                .children
                .get(&tokens[pos..pos + ps])
            else {
                break;
            };
            let same = common_pages(&self.nodes[child as usize].key, &tokens[pos..], ps);
            let child = if same < self.nodes[child as usize].pages.len() {
                self.split(child, same)
            } else {
                child
            };
            let c = &mut self.nodes[child as usize];
            c.last_access_us = c.last_access_us.max(now_us);
            c.priority = c.priority.max(priority);
            let first = pos / ps;
            for (i, &tree_page) in c.pages.iter().enumerate() {
                let mine = pages[first + i];
                if mine != tree_page {
                    pool.free(&[mine]);
                    duplicates += 1;
                }
            }
            out_pages.extend_from_slice(&c.pages);
            pos += same * ps;
            node = child;
        }
        let mut adopted = 0;
        if pos < tokens.len() {
            let new_pages = pages[pos / ps..].to_vec();
            pool.cache(&new_pages);
            adopted = new_pages.len() as u32;
            out_pages.extend_from_slice(&new_pages);
            let depth = self.nodes[node as usize].depth + (tokens.len() - pos) as u32;
            let first_key = tokens[pos..pos + ps].to_vec();
            let leaf = self.alloc_node(Node {
                parent: node,
                key: tokens[pos..].to_vec(),
                pages: new_pages,
                children: HashMap::new(),
                lock: 0,
                depth,
                last_access_us: now_us,
                hit_count: 0,
                created_us: now_us,
                priority,
                generation: 0,
                alive: true,
            });
            self.nodes[node as usize].children.insert(first_key, leaf);
            self.cached_pages += adopted;
            self.evictable_pages += adopted;
            node = leaf;
        }
        self.version += 1;
        Inserted {
            node: self.id_of(node),
            pages: out_pages,
            adopted,
            duplicates,
        }
    }

    /// Locks `id` and its ancestors (a request reads this prefix).
    pub fn lock(&mut self, id: NodeId) {
        let mut index = self.index_of(id).expect("lock of a dead radix node");
        while index != ROOT {
            let n = &mut self.nodes[index as usize];
            if n.lock == 0 {
                self.evictable_pages -= n.pages.len() as u32;
            }
            n.lock += 1;
            index = n.parent;
        }
    }

    /// Undoes one [`RadixTree::lock`] of `id`.
    pub fn unlock(&mut self, id: NodeId) {
        let mut index = self.index_of(id).expect("unlock of a dead radix node");
        while index != ROOT {
            let n = &mut self.nodes[index as usize];
            assert!(n.lock > 0, "unlock of an unlocked radix node");
            n.lock -= 1;
            if n.lock == 0 {
                self.evictable_pages += n.pages.len() as u32;
            }
            index = n.parent;
        }
    }

    /// Lock count of a node (0 for dead ids).
    pub fn lock_count(&self, id: NodeId) -> u32 {
        self.index_of(id).map_or(0, |i| self.nodes[i as usize].lock)
    }

    /// The unlocked leaves, as the evictor plugin sees them.
    pub fn evictable_leaves(&self) -> Vec<CacheLeaf> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| *i != ROOT as usize && n.alive && n.lock == 0 && n.children.is_empty())
            .map(|(i, n)| CacheLeaf {
                node: self.id_of(i as u32),
                depth: n.depth,
                tokens: n.key.len() as u32,
                pages: n.pages.len() as u32,
                last_access_us: n.last_access_us,
                hit_count: n.hit_count,
                created_us: n.created_us,
                priority: n.priority,
            })
            .collect()
    }

    /// Evicts one unlocked leaf, returning its pages to the pool. Returns the
    /// number of pages freed.
    pub fn evict(&mut self, id: NodeId, pool: &mut PagePool) -> Result<u32, EvictError> {
        let index = self.index_of(id).ok_or(EvictError::NoSuchNode(id))?;
        let n = &self.nodes[index as usize];
        if index == ROOT {
            return Err(EvictError::Root(id));
        }
        if !n.children.is_empty() {
            return Err(EvictError::NotLeaf(id));
        }
        if n.lock > 0 {
            return Err(EvictError::Locked(id, n.lock));
        }
        let n = std::mem::take(&mut self.nodes[index as usize]);
        pool.evict(&n.pages);
        let freed = n.pages.len() as u32;
        self.cached_pages -= freed;
        self.evictable_pages -= freed;
        let ps = self.ps();
        let removed = self.nodes[n.parent as usize].children.remove(&n.key[..ps]);
        debug_assert_eq!(removed, Some(index));
        // Keep the generation so the next occupant of the slot gets a new id.
        self.nodes[index as usize].generation = n.generation;
        self.free_slots.push(index);
        self.version += 1;
        Ok(freed)
    }

    /// Every cached page-aligned prefix and the page ending it, for checks.
    pub fn dump(&self) -> Vec<(Vec<u32>, PageId)> {
        let mut out = Vec::new();
        let mut stack = vec![(ROOT, Vec::new())];
        while let Some((index, prefix)) = stack.pop() {
            let n = &self.nodes[index as usize];
            let mut key = prefix;
            for (i, &page) in n.pages.iter().enumerate() {
                key.extend_from_slice(&n.key[i * self.ps()..(i + 1) * self.ps()]);
                out.push((key.clone(), page));
            }
            for &child in n.children.values() {
                stack.push((child, key.clone()));
            }
        }
        out
    }

    /// Verifies structure and counters: keys page aligned and consistent with
    /// their parent's child map, depths, lock counts at least the sum of the
    /// children's, page counters, and every page `Cached` in the pool.
    pub fn check(&self, pool: &PagePool) -> Result<(), String> {
        let ps = self.ps();
        let (mut cached, mut evictable) = (0u32, 0u32);
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.alive || i == ROOT as usize {
                continue;
            }
            if n.key.is_empty() || n.key.len() != n.pages.len() * ps {
                return Err(format!(
                    "node {i}: key {} tokens, {} pages",
                    n.key.len(),
                    n.pages.len()
                ));
            }
            let p = &self.nodes[n.parent as usize];
            if !p.alive || p.children.get(&n.key[..ps]) != Some(&(i as u32)) {
                return Err(format!("node {i}: not its parent's child"));
            }
            if n.depth != p.depth + n.key.len() as u32 {
                return Err(format!("node {i}: depth {}", n.depth));
            }
            let child_locks: u32 = n
                .children
                .values()
                .map(|&c| self.nodes[c as usize].lock)
                .sum();
            if n.lock < child_locks {
                return Err(format!(
                    "node {i}: lock {} < children's {child_locks}",
                    n.lock
                ));
            }
            for &page in &n.pages {
                if pool.state(page) != Some(super::pool::PageState::Cached) {
                    return Err(format!("node {i}: page {page} is not Cached in the pool"));
                }
            }
            cached += n.pages.len() as u32;
            if n.lock == 0 {
                evictable += n.pages.len() as u32;
            }
        }
        if cached != self.cached_pages || evictable != self.evictable_pages {
            return Err(format!(
                "counters cached {} evictable {}, nodes say {cached} {evictable}",
                self.cached_pages, self.evictable_pages
            ));
        }
        if cached != pool.usage().cached {
            return Err(format!(
                "tree holds {cached} pages, pool says {} cached",
                pool.usage().cached
            ));
        }
        Ok(())
    }
}

/// Whole pages that `key` and `tokens` have in common from the start.
fn common_pages(key: &[u32], tokens: &[u32], ps: usize) -> usize {
    key.chunks_exact(ps)
        .zip(tokens.chunks_exact(ps))
        .take_while(|(a, b)| a == b)
        .count()
}
