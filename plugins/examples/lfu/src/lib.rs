//! Least-frequently-used eviction of radix-cache leaves.
//!
//! A prefix matched by many requests (a system prompt, a few-shot template) is
//! worth more than one used once, however recently; LRU forgets that after one
//! burst of unrelated traffic. LFU evicts the leaves with the fewest hits
//! first (ties: least recently accessed, then lower node id) and returns just
//! enough of them to cover the pages needed. Its known weakness — an old,
//! once-popular prefix is never evicted — is what SLRU (`plugins/examples/slru`)
//! trades against recency.

use minisgl_plugin_sdk::{CacheLeaf, Evictor};

/// Fewest hits first.
#[derive(Clone, Debug, Default)]
pub struct Lfu;

impl Evictor for Lfu {
    fn name(&self) -> String {
        "lfu".to_string()
    }

    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        let mut order: Vec<&CacheLeaf> = leaves.iter().collect();
        order.sort_unstable_by_key(|l| (l.hit_count, l.last_access_us, l.node));
        take_until_covered(order, pages_needed)
    }
}

/// The ids of the leading leaves whose pages together cover `pages_needed`.
fn take_until_covered(order: Vec<&CacheLeaf>, pages_needed: u32) -> Vec<u64> {
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

minisgl_plugin_sdk::export_evictor!(Lfu);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewest_hits_first_then_oldest() {
        let leaf = |node, hits, last| CacheLeaf {
            node,
            pages: 1,
            hit_count: hits,
            last_access_us: last,
            ..CacheLeaf::default()
        };
        let leaves = [
            leaf(1, 5, 10),
            leaf(2, 1, 90),
            leaf(3, 1, 50),
            leaf(4, 2, 5),
        ];
        assert_eq!(Lfu.pick_victims(&leaves, 3), vec![3, 2, 4]);
    }
}
