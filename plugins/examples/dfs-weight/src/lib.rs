//! DFS-weight scheduling (SGLang's `dfs-weight`), approximated from the views.
//!
//! SGLang walks the radix tree depth first, visiting the child with the most
//! waiting requests underneath first, so requests that share a cached prefix
//! are admitted together and the shared pages are used by as many requests as
//! possible before they can be evicted.
//!
//! A plugin sees no tree: each request view carries only how many of its
//! tokens hit the cache (`prefix_hit_len`). Requests whose match ends at the
//! same node have the same hit length, so this policy uses the hit length as
//! the node's identity: requests are grouped by it, heavier groups (more
//! waiting requests) first, deeper groups first among equal weights, and
//! requests without a hit last. Two different nodes at the same depth are
//! merged into one group — the approximation's cost. Within a group, arrival
//! order. Half-prefilled requests continue first; steps are prefill-or-decode
//! as in the default FCFS.

use std::collections::BTreeMap;

use minisgl_example_kit::{admit_in_order, continuing_then_sorted_by, prefill_or_decode};
use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};

/// Heaviest shared-prefix group first.
#[derive(Clone, Debug, Default)]
pub struct DfsWeight;

impl Scheduler for DfsWeight {
    fn name(&self) -> String {
        "dfs-weight".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        // Weight of each group: waiting requests whose match ends there.
        let mut weight: BTreeMap<u32, u32> = BTreeMap::new();
        for r in waiting.iter().filter(|r| r.computed_len == 0) {
            *weight.entry(r.prefix_hit_len).or_default() += 1;
        }
        let order = continuing_then_sorted_by(waiting, |r| {
            let hit = r.prefix_hit_len;
            let no_hit = hit == 0;
            (no_hit, u32::MAX - weight[&hit], u32::MAX - hit)
        });
        prefill_or_decode(
            admit_in_order(order, budget, running.len()),
            running,
            budget,
        )
    }
}

minisgl_plugin_sdk::export_scheduler!(DfsWeight);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavier_group_first_no_hit_last() {
        let v = |id: u64, hit: u32| RequestView {
            id,
            arrival_us: id,
            prompt_len: 100,
            prefix_hit_len: hit,
            pages_held: hit / 16,
            ..RequestView::default()
        };
        let waiting = [v(1, 0), v(2, 64), v(3, 32), v(4, 32), v(5, 64), v(6, 32)];
        let budget = Budget {
            max_prefill_tokens: 10_000,
            max_running: 16,
            free_pages: 1000,
            page_size: 16,
            ..Budget::default()
        };
        let d = DfsWeight.schedule(&waiting, &[], &budget);
        let ids: Vec<u64> = d.prefill.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![3, 4, 6, 2, 5, 1]);
    }
}
