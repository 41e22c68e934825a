//! The KV page pool: which page belongs to whom.
//!
//! The pool does not hold KV data (the model runner does, indexed by page id);
//! it is the ledger. Every page is in exactly one state:
//! - `Free`: on the free list;
//! - `InUse`: owned by one request's page table (not shared);
//! - `Cached`: owned by the radix prefix cache (requests may read it while
//!   they hold a lock on its node).
//!
//! so `free + in_use + cached == total` always; [`PagePool::check`] verifies
//! the ledger against the free list.

use thiserror::Error;

/// Largest page size the engine accepts (tokens per page).
pub const MAX_PAGE_SIZE: u32 = 256;

/// A page id, an index into the runner's KV buffers.
pub type PageId = u32;

/// Errors from sizing or using the pool.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PoolError {
    #[error("page_size must be in 1..={MAX_PAGE_SIZE}, got {0}")]
    PageSize(u32),
    #[error("num_pages must be at least 1, got {0}")]
    NumPages(u64),
    #[error("KV memory budget of {budget} bytes holds no page of {per_page} bytes")]
    Budget { budget: u64, per_page: u64 },
    #[error("page ledger is inconsistent: {0}")]
    Inconsistent(String),
}

/// Ownership of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    Free,
    InUse,
    Cached,
}

/// Page counts by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    pub total: u32,
    pub free: u32,
    pub in_use: u32,
    pub cached: u32,
}

/// Bytes of KV memory one page takes: K and V for every layer and KV head.
pub fn bytes_per_page(
    page_size: u32,
    num_layers: u32,
    num_kv_heads: u32,
    head_dim: u32,
    dtype_bytes: u32,
) -> u64 {
    2 * u64::from(page_size)
        * u64::from(num_layers)
        * u64::from(num_kv_heads)
        * u64::from(head_dim)
        * u64::from(dtype_bytes)
}

/// How many pages of `per_page` bytes fit in `budget` bytes.
pub fn pages_for_budget(budget: u64, per_page: u64) -> Result<u32, PoolError> {
    let pages = budget.checked_div(per_page).unwrap_or(0);
    if pages == 0 {
        return Err(PoolError::Budget { budget, per_page });
    }
    Ok(pages.min(u64::from(u32::MAX)) as u32)
}

/// The ledger of KV pages.
#[derive(Debug)]
pub struct PagePool {
    page_size: u32,
    state: Vec<PageState>,
    /// Free pages; popped from the end so recently freed pages are reused first.
    free: Vec<PageId>,
    in_use: u32,
    cached: u32,
}

impl PagePool {
    /// A pool of `num_pages` pages of `page_size` tokens, all free.
    pub fn new(num_pages: u32, page_size: u32) -> Result<Self, PoolError> {
        if page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(PoolError::PageSize(page_size));
        }
        if num_pages == 0 {
            return Err(PoolError::NumPages(0));
        }
        Ok(PagePool {
            page_size,
            state: vec![PageState::Free; num_pages as usize],
            // Reversed so that the first allocations get pages 0, 1, 2, ...
            free: (0..num_pages).rev().collect(),
            in_use: 0,
            cached: 0,
        })
    }

    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    pub fn total(&self) -> u32 {
        self.state.len() as u32
    }

    pub fn free_pages(&self) -> u32 {
        self.free.len() as u32
    }

    pub fn usage(&self) -> PoolUsage {
        PoolUsage {
            total: self.total(),
            free: self.free_pages(),
            in_use: self.in_use,
            cached: self.cached,
        }
    }

    /// State of one page (for tests and assertions).
    pub fn state(&self, page: PageId) -> Option<PageState> {
        self.state.get(page as usize).copied()
    }

    /// Pages needed to hold `tokens` tokens.
    pub fn pages_for_tokens(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.page_size)
    }

    /// Takes `n` free pages for a request, or `None` (and takes nothing) if
    /// fewer than `n` are free. The pages come in the order they would be popped, and
    /// pages are pushed back so that a run freed together comes back ascending: a
    /// fresh pool, or a freed request's run, hands out consecutive page ids (easier to
    /// read in a dump; since 2026-12-03 no kernel depends on it for speed).
    pub fn alloc(&mut self, n: u32) -> Option<Vec<PageId>> {
        let n = n as usize;
        if n > self.free.len() {
            return None;
        }
        let mut pages = self.free.split_off(self.free.len() - n);
        pages.reverse();
        for &p in &pages {
            debug_assert_eq!(self.state[p as usize], PageState::Free);
            self.state[p as usize] = PageState::InUse;
        }
        self.in_use += n as u32;
        self.debug_check();
        Some(pages)
    }

    /// Returns request-owned pages to the free list.
    pub fn free(&mut self, pages: &[PageId]) {
        for &p in pages.iter().rev() {
            self.transition(p, PageState::InUse, PageState::Free);
            self.free.push(p);
        }
        self.debug_check();
    }

    /// Hands request-owned pages to the radix cache.
    pub fn cache(&mut self, pages: &[PageId]) {
        for &p in pages {
            self.transition(p, PageState::InUse, PageState::Cached);
        }
    }

    /// Returns pages evicted from the radix cache to the free list.
    pub fn evict(&mut self, pages: &[PageId]) {
        for &p in pages.iter().rev() {
            self.transition(p, PageState::Cached, PageState::Free);
            self.free.push(p);
        }
        self.debug_check();
    }

    fn transition(&mut self, page: PageId, from: PageState, to: PageState) {
        let slot = &mut self.state[page as usize];
        // A wrong transition is a host bug (double free, freeing a cached
        // page); it would corrupt another request's KV, so stop loudly.
        assert_eq!(
            *slot, from,
            "page {page}: expected {from:?}, found {slot:?}"
        );
        *slot = to;
        match from {
            PageState::InUse => self.in_use -= 1,
            PageState::Cached => self.cached -= 1,
            PageState::Free => {}
        }
        match to {
            PageState::InUse => self.in_use += 1,
            PageState::Cached => self.cached += 1,
            PageState::Free => {}
        }
    }

    fn debug_check(&self) {
        debug_assert_eq!(
            self.free.len() as u32 + self.in_use + self.cached,
            self.total()
        );
    }

    /// Verifies the ledger: counts per state match the states, the free list
    /// holds exactly the free pages, once each, and the sum is the total.
    pub fn check(&self) -> Result<(), PoolError> {
        let mut counts = [0u32; 3];
        for s in &self.state {
            counts[*s as usize] += 1;
        }
        let [free, in_use, cached] = counts;
        if free != self.free.len() as u32 || in_use != self.in_use || cached != self.cached {
            return Err(PoolError::Inconsistent(format!(
                "states say free {free} in_use {in_use} cached {cached}, counters say free {} in_use {} cached {}",
                self.free.len(),
                self.in_use,
                self.cached
            )));
        }
        let mut seen = vec![false; self.state.len()];
        for &p in &self.free {
            let i = p as usize;
            if i >= seen.len() || seen[i] || self.state[i] != PageState::Free {
                return Err(PoolError::Inconsistent(format!(
                    "free list entry {p} is duplicated or not free"
                )));
            }
            seen[i] = true;
        }
        if free + in_use + cached != self.total() {
            return Err(PoolError::Inconsistent("states do not sum to total".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_and_freed_runs_come_back_as_ascending_pages() {
        let mut pool = PagePool::new(64, 16).unwrap();
        let a = pool.alloc(8).unwrap();
        let b = pool.alloc(5).unwrap();
        assert_eq!(a, (0..8).collect::<Vec<_>>());
        assert_eq!(b, (8..13).collect::<Vec<_>>());
        pool.free(&a);
        // The freed run is reused first, in the same order.
        assert_eq!(pool.alloc(6).unwrap(), (0..6).collect::<Vec<_>>());
        assert_eq!(pool.alloc(4).unwrap(), vec![6, 7, 13, 14]);
        pool.check().unwrap();
    }

    #[test]
    fn alloc_free_cache_evict_keep_the_ledger() {
        let mut pool = PagePool::new(8, 16).unwrap();
        let a = pool.alloc(3).unwrap();
        assert_eq!(a, vec![0, 1, 2]);
        assert!(pool.alloc(6).is_none());
        assert_eq!(pool.free_pages(), 5);
        pool.cache(&a[..2]);
        pool.free(&a[2..]);
        assert_eq!(
            pool.usage(),
            PoolUsage {
                total: 8,
                free: 6,
                in_use: 0,
                cached: 2
            }
        );
        pool.evict(&a[..2]);
        assert_eq!(pool.free_pages(), 8);
        pool.check().unwrap();
    }

    #[test]
    fn sizing_errors_name_the_value() {
        assert_eq!(PagePool::new(4, 0).unwrap_err(), PoolError::PageSize(0));
        assert_eq!(PagePool::new(4, 257).unwrap_err(), PoolError::PageSize(257));
        assert!(PagePool::new(0, 16).is_err());
        let per_page = bytes_per_page(16, 28, 8, 128, 2);
        assert_eq!(per_page, 2 * 16 * 28 * 8 * 128 * 2);
        assert_eq!(pages_for_budget(per_page * 10 + 5, per_page).unwrap(), 10);
        assert!(pages_for_budget(5, per_page).is_err());
    }

    #[test]
    #[should_panic(expected = "expected InUse")]
    fn double_free_is_caught() {
        let mut pool = PagePool::new(2, 1).unwrap();
        let a = pool.alloc(1).unwrap();
        pool.free(&a);
        pool.free(&a);
    }
}
