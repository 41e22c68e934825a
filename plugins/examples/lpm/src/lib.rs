//! Longest-prefix-match scheduling (SGLang's `lpm`) with an anti-starvation
//! age bound.
//!
//! Waiting requests with the longest cached prefix (`prefix_hit_len`) are
//! admitted first: they cost the fewest prefill tokens per request and keep hot
//! prefixes in use while they are still in the cache. Pure LPM can starve a
//! request that shares nothing with the others for as long as requests with
//! long hits keep arriving, so a request that has waited `age_bound_us` or more
//! jumps ahead of every non-starving one (oldest first). Admission then packs
//! the step budget in that order; a request whose chunk does not fit the free
//! pages stops the scan, so the starving request at the head gets the next
//! pages released. Half-prefilled requests always continue first, and steps
//! are prefill-or-decode as in the default FCFS.
//!
//! Guarantee: a request is considered first once it is `age_bound_us` old
//! (among starving requests, by arrival), so it is served within the age bound
//! plus the time the starving requests ahead of it need.

use minisgl_example_kit::{admit_in_order, prefill_or_decode};
use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};

/// Longest cached prefix first; requests older than the bound go first.
#[derive(Clone, Debug)]
pub struct Lpm {
    /// Waiting time (µs since arrival) after which a request is served first.
    pub age_bound_us: u64,
}

impl Lpm {
    /// The age bound of the Wasm plugin built from this crate.
    pub const DEFAULT_AGE_BOUND_US: u64 = 2_000_000;
}

impl Default for Lpm {
    fn default() -> Self {
        Lpm {
            age_bound_us: Self::DEFAULT_AGE_BOUND_US,
        }
    }
}

impl Scheduler for Lpm {
    fn name(&self) -> String {
        "lpm".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let starving =
            |r: &RequestView| budget.now_us.saturating_sub(r.arrival_us) >= self.age_bound_us;
        let mut order: Vec<&RequestView> = waiting.iter().collect();
        // Stable sort: ties keep the host's (arrival) order.
        order.sort_by_key(|r| {
            let continuing = r.computed_len > 0;
            if continuing {
                (0u8, 0u64, 0u32)
            } else if starving(r) {
                (1, r.arrival_us, 0)
            } else {
                (2, 0, u32::MAX - r.prefix_hit_len)
            }
        });
        prefill_or_decode(
            admit_in_order(order, budget, running.len()),
            running,
            budget,
        )
    }
}

minisgl_plugin_sdk::export_scheduler!(Lpm);

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u64, arrival: u64, prompt: u32, hit: u32) -> RequestView {
        RequestView {
            id,
            arrival_us: arrival,
            prompt_len: prompt,
            prefix_hit_len: hit,
            pages_held: hit / 16,
            max_new_tokens: 8,
            ..RequestView::default()
        }
    }

    fn budget(now: u64, tokens: u32) -> Budget {
        Budget {
            max_prefill_tokens: tokens,
            max_running: 8,
            free_pages: 1000,
            page_size: 16,
            now_us: now,
            ..Budget::default()
        }
    }

    #[test]
    fn longest_hit_first_then_starving_first() {
        let waiting = [
            view(1, 0, 100, 0),
            view(2, 10, 100, 64),
            view(3, 20, 100, 32),
        ];
        let mut lpm = Lpm { age_bound_us: 1000 };
        let ids = |d: ScheduleDecision| d.prefill.iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(
            ids(lpm.schedule(&waiting, &[], &budget(100, 4096))),
            vec![2, 3, 1]
        );
        assert_eq!(
            ids(lpm.schedule(&waiting, &[], &budget(1000, 4096))),
            vec![1, 2, 3]
        );
    }
}
