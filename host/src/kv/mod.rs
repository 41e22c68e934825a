//! KV memory: the page pool and the radix prefix cache.
//!
//! [`pool::PagePool`] is the ledger of pages (free, in use by a request, or
//! cached); [`radix::RadixTree`] maps token prefixes to cached pages. Neither
//! knows about requests or policies: the scheduler decides, these execute.

pub mod cache_mode;
pub mod pool;
pub mod radix;

pub use cache_mode::CacheMode;
pub use pool::{PageId, PagePool, PageState, PoolError, PoolUsage};
pub use radix::{EvictError, Inserted, NodeId, PrefixMatch, RadixTree};
