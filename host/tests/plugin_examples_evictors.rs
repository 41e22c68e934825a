//! The example evictors' defining behaviour, native and as Wasm components.

#[path = "support/plugin_examples.rs"]
mod support;

use minisgl_example_lfu::Lfu;
use minisgl_example_slru::Slru;
use minisgl_plugin_sdk::{CacheLeaf, Evictor};
use minisgl_policies::Lru;
use support::WasmEvictor;

fn leaf(node: u64, pages: u32, hits: u32, last_access_us: u64) -> CacheLeaf {
    CacheLeaf {
        node,
        depth: pages * 16,
        tokens: pages * 16,
        pages,
        last_access_us,
        hit_count: hits,
        created_us: 0,
        priority: 0,
    }
}

/// A system prompt hit twice long ago, and a one-off prompt hit once since.
fn twice_vs_once() -> Vec<CacheLeaf> {
    vec![leaf(1, 4, 2, 100), leaf(2, 4, 1, 900)]
}

fn slru_keeps_twice_hit_prefix(ev: &mut dyn Evictor) {
    assert_eq!(ev.pick_victims(&twice_vs_once(), 4), vec![2]);
    // Among protected leaves, least recently used goes first.
    let all_protected = [leaf(1, 1, 3, 500), leaf(2, 1, 2, 100), leaf(3, 1, 2, 300)];
    assert_eq!(ev.pick_victims(&all_protected, 1), vec![2]);
    // Probationary leaves go before protected ones, however recent they are.
    let mixed = [
        leaf(1, 2, 2, 10),
        leaf(2, 2, 0, 800),
        leaf(3, 2, 1, 700),
        leaf(4, 2, 5, 20),
    ];
    assert_eq!(ev.pick_victims(&mixed, 5), vec![3, 2, 1]);
}

#[test]
fn slru_native() {
    // LRU, for contrast, drops the twice-hit prefix because it is older.
    assert_eq!(Lru.pick_victims(&twice_vs_once(), 4), vec![1]);
    slru_keeps_twice_hit_prefix(&mut Slru);
}

#[test]
fn slru_wasm() {
    slru_keeps_twice_hit_prefix(&mut WasmEvictor::load("minisgl_example_slru.wasm"));
}

#[test]
fn slru_demotes_protected_leaves_beyond_its_share() {
    // Ten protected leaves of one page and one probationary leaf: 11 pages,
    // so the protected segment keeps its 8 most recently used (3..=10) and
    // demotes 1 and 2. Victims: probationary in LRU order (11 at t=50, then
    // 1, 2), then protected in LRU order (3).
    let mut leaves: Vec<CacheLeaf> = (1..=10).map(|n| leaf(n, 1, 2, n * 100)).collect();
    leaves.push(leaf(11, 1, 1, 50));
    assert_eq!(Slru.pick_victims(&leaves, 4), vec![11, 1, 2, 3]);
}

fn lfu_evicts_fewest_hits(ev: &mut dyn Evictor) {
    let leaves = [
        leaf(1, 1, 9, 10),
        leaf(2, 1, 1, 999),
        leaf(3, 1, 3, 500),
        leaf(4, 1, 1, 100),
    ];
    assert_eq!(ev.pick_victims(&leaves, 2), vec![4, 2]);
    assert_eq!(ev.pick_victims(&leaves, 3), vec![4, 2, 3]);
}

#[test]
fn lfu_native() {
    lfu_evicts_fewest_hits(&mut Lfu);
}

#[test]
fn lfu_wasm() {
    lfu_evicts_fewest_hits(&mut WasmEvictor::load("minisgl_example_lfu.wasm"));
}
