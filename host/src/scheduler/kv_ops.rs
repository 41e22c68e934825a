//! A request's KV memory: prefix hits, page allocation with eviction, and
//! handing pages back (to the radix cache or the pool).

use minisgl_plugin_sdk::Evictor;
use minisgl_policies::Lru;

use super::request::Request;
use super::Scheduler;
use crate::kv::CacheMode;
use crate::kv::RadixTree;
use crate::metrics::FixupCause;

/// The cached prefix a waiting request would get, leaving at least one input
/// token to compute (its logits give the first new token).
pub(super) fn match_len(tree: &RadixTree, r: &Request) -> u32 {
    let limit = r.input_len().saturating_sub(1) as usize;
    if r.output.is_empty() {
        tree.match_len(&r.spec.prompt_tokens[..limit.min(r.spec.prompt_tokens.len())])
    } else {
        tree.match_len(&r.sequence()[..limit])
    }
}

impl Scheduler {
    /// A request starting its prefill takes (and locks) its cached prefix.
    pub(super) fn admit(&mut self, id: u64, now: u64) {
        let r = self.reqs.get_mut(&id).expect("admitted request exists");
        if r.computed > 0 || r.node.is_some() {
            return;
        }
        if self.cfg.cache == CacheMode::Radix {
            let limit = r.input_len() as usize - 1;
            let m = self
                .tree
                .match_prefix(&r.sequence()[..limit], now, r.spec.priority);
            if m.len > 0 {
                self.tree.lock(m.node);
                r.node = Some(m.node);
                r.shared_pages = m.pages.len();
                r.pages = m.pages;
                r.computed = m.len;
            }
        }
        if !r.admitted {
            r.admitted = true;
            r.cached_tokens = r.computed;
            self.metrics.prompt_tokens += r.spec.prompt_tokens.len() as u64;
            self.metrics.cache_hit_tokens += u64::from(r.computed);
            self.metrics.cache_prompt_tokens += r.spec.prompt_tokens.len() as u64;
        }
    }

    /// Undoes [`Scheduler::admit`] for a request whose chunk got no pages and
    /// that holds nothing but its cached prefix (so the prefix is not pinned).
    pub(super) fn unadmit(&mut self, id: u64) {
        let r = self.reqs.get_mut(&id).expect("request exists");
        if r.pages.len() == r.shared_pages
            && r.computed == (r.shared_pages as u32) * self.cfg.page_size
        {
            if let Some(node) = r.node.take() {
                self.tree.unlock(node);
            }
            r.pages.clear();
            r.shared_pages = 0;
            r.computed = 0;
        }
    }

    /// Appends `n` fresh pages to a request's page table, evicting cached
    /// prefixes if needed. False (and nothing taken) if they cannot be had.
    pub(super) fn alloc_pages(&mut self, id: u64, n: u32) -> bool {
        if n == 0 {
            return true;
        }
        if !self.make_room(n) {
            return false;
        }
        let pages = self.pool.alloc(n).expect("make_room freed enough pages");
        self.reqs
            .get_mut(&id)
            .expect("request exists")
            .pages
            .extend(pages);
        true
    }

    /// Evicts unlocked radix leaves until `n` pages are free. The evictor
    /// policy chooses; its victims are checked by the tree (stale, locked or
    /// inner nodes are refused), and if it frees nothing the built-in LRU
    /// finishes the job.
    pub(super) fn make_room(&mut self, n: u32) -> bool {
        while self.pool.free_pages() < n {
            let short = n - self.pool.free_pages();
            if self.tree.evictable_pages() == 0 {
                return false;
            }
            let leaves = self.tree.evictable_leaves();
            let mut victims = self.policy.pick_victims(&leaves, short);
            let mut freed = self.evict_victims(&victims, n);
            if freed == 0 {
                self.fixup(FixupCause::Evictor);
                victims = Lru.pick_victims(&leaves, short);
                freed = self.evict_victims(&victims, n);
            }
            if freed == 0 {
                // Cannot happen with a consistent tree (evictable pages imply
                // an unlocked leaf); refuse rather than loop.
                return false;
            }
        }
        true
    }

    fn evict_victims(&mut self, victims: &[u64], target_free: u32) -> u32 {
        let mut freed = 0;
        for &node in victims {
            if self.pool.free_pages() >= target_free {
                break;
            }
            match self.tree.evict(node, &mut self.pool) {
                Ok(pages) => freed += pages,
                Err(e) => {
                    tracing::warn!(error = %e, "evictor victim refused");
                    self.fixup(FixupCause::Evictor);
                }
            }
        }
        self.metrics.evicted_pages += u64::from(freed);
        freed
    }

    /// Puts a request's full pages of known KV into the radix cache, and
    /// switches its page table and lock to the tree's copy.
    pub(super) fn cache_prefix(&mut self, id: u64, now: u64) {
        if self.cfg.cache != CacheMode::Radix {
            return;
        }
        let r = self.reqs.get_mut(&id).expect("request exists");
        let full = (r.kv_len() / self.cfg.page_size) as usize;
        if full <= r.shared_pages {
            return;
        }
        let tokens = r.tokens(0, full * self.cfg.page_size as usize);
        let ins = self.tree.insert(
            &tokens,
            &r.pages[..full],
            &mut self.pool,
            now,
            r.spec.priority,
        );
        r.pages[..full].copy_from_slice(&ins.pages);
        r.shared_pages = full;
        self.tree.lock(ins.node);
        if let Some(old) = r.node.replace(ins.node) {
            self.tree.unlock(old);
        }
    }

    /// Gives up all of a request's KV: full pages of known tokens go to the
    /// radix cache (radix mode), the rest back to the pool.
    pub(super) fn release(&mut self, id: u64, now: u64) {
        if !self.reqs.contains_key(&id) {
            return;
        }
        self.cache_prefix(id, now);
        let r = self.reqs.get_mut(&id).expect("request exists");
        if let Some(node) = r.node.take() {
            self.tree.unlock(node);
        }
        self.pool.free(&r.pages[r.shared_pages..]);
        r.pages.clear();
        r.shared_pages = 0;
        r.computed = 0;
        r.hit_memo = None;
    }

    /// Drops every cache entry no request holds (`POST /flush_cache`):
    /// unlocked leaves go, repeatedly, until only paths locked by running or
    /// waiting-with-a-match requests remain. Returns the pages freed.
    pub fn flush_cache(&mut self) -> u32 {
        let before = self.pool.free_pages();
        self.evict_all();
        self.pool.free_pages() - before
    }

    /// Empties the cache (every request must have released its KV).
    pub(super) fn evict_all(&mut self) {
        loop {
            let leaves = self.tree.evictable_leaves();
            if leaves.is_empty() {
                break;
            }
            for leaf in leaves {
                let _ = self.tree.evict(leaf.node, &mut self.pool);
            }
        }
    }
}
