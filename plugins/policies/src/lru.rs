//! Least-recently-used eviction of radix-cache leaves.

use minisgl_plugin_sdk::{CacheLeaf, Evictor};

/// Evicts the leaves accessed longest ago first (ties: lower node id first),
/// returning just enough of them to cover the pages needed.
#[derive(Clone, Debug, Default)]
pub struct Lru;

impl Evictor for Lru {
    fn name(&self) -> String {
        "lru".to_string()
    }

    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        let mut order: Vec<&CacheLeaf> = leaves.iter().collect();
        order.sort_unstable_by_key(|l| (l.last_access_us, l.node));
        let mut freed: u64 = 0;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(node: u64, pages: u32, last: u64) -> CacheLeaf {
        CacheLeaf {
            node,
            pages,
            last_access_us: last,
            ..CacheLeaf::default()
        }
    }

    #[test]
    fn oldest_first_ties_by_node_and_stops_when_covered() {
        let leaves = [
            leaf(5, 2, 30),
            leaf(3, 1, 10),
            leaf(1, 4, 10),
            leaf(7, 9, 40),
        ];
        assert_eq!(Lru.pick_victims(&leaves, 5), vec![1, 3]);
        assert_eq!(Lru.pick_victims(&leaves, 6), vec![1, 3, 5]);
        assert!(Lru.pick_victims(&leaves, 0).is_empty());
        assert_eq!(Lru.pick_victims(&leaves, 100).len(), 4);
    }
}
