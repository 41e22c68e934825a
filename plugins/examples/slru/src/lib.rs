//! Segmented LRU eviction of radix-cache leaves.
//!
//! SLRU splits the cache into a *probationary* segment (prefixes hit at most
//! once) and a *protected* segment (hit twice or more). Victims come from the
//! probationary segment first, least recently used first, so a one-off prompt
//! — however recent — goes before a prefix that proved itself reusable; only
//! then is the protected segment evicted, also in LRU order. The protected
//! segment is capped at `PROTECTED_SHARE` of the evictable pages: its least
//! recently used leaves beyond the cap are demoted to probationary, so a
//! formerly popular prefix cannot squat the cache forever (LFU's weakness).
//!
//! Stateless: both segments are recomputed from each call's `hit_count` and
//! `last_access_us`, so nothing is lost on a swap.

use minisgl_plugin_sdk::{CacheLeaf, Evictor};

/// Share of the evictable pages the protected segment may hold, in percent.
pub const PROTECTED_SHARE_PERCENT: u64 = 80;
/// Hits that promote a leaf to the protected segment.
pub const PROTECT_AT_HITS: u32 = 2;

/// Probationary leaves first, then protected ones, each in LRU order.
#[derive(Clone, Debug, Default)]
pub struct Slru;

impl Evictor for Slru {
    fn name(&self) -> String {
        "slru".to_string()
    }

    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        let total: u64 = leaves.iter().map(|l| u64::from(l.pages)).sum();
        let cap = total * PROTECTED_SHARE_PERCENT / 100;
        // Most recently used protected leaves keep their place up to the cap.
        let mut protected: Vec<&CacheLeaf> = leaves
            .iter()
            .filter(|l| l.hit_count >= PROTECT_AT_HITS)
            .collect();
        protected.sort_unstable_by_key(|l| {
            (
                std::cmp::Reverse(l.last_access_us),
                std::cmp::Reverse(l.node),
            )
        });
        let mut kept = 0u64;
        let mut is_protected = std::collections::BTreeSet::new();
        for l in protected {
            if kept + u64::from(l.pages) > cap {
                break;
            }
            kept += u64::from(l.pages);
            is_protected.insert(l.node);
        }
        let mut order: Vec<&CacheLeaf> = leaves.iter().collect();
        order.sort_unstable_by_key(|l| (is_protected.contains(&l.node), l.last_access_us, l.node));
        let mut freed = 0u64;
        let mut victims = Vec::new();
        for leaf in order {
            if freed >= u64::from(pages_needed) {
                break;
            }
            freed += u64::from(leaf.pages);
            victims.push(leaf.node);
        }
        victims
    }
}

minisgl_plugin_sdk::export_evictor!(Slru);
