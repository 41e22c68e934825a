//! Mixed prefill + decode steps under one token budget (Sarathi-Serve style).
//!
//! The default FCFS runs either a prefill step or a decode step, so running
//! requests stall while a long prompt is prefilled. Sarathi-Serve instead
//! builds every step from a fixed token budget: all running requests decode
//! first (one token each, so decode latency stays flat), and chunks of waiting
//! prompts fill whatever budget is left ("stall-free batching"). Here the
//! budget is `max_prefill_tokens`, shared by both kinds of token.
//!
//! Decodes are planned exactly as the default does (the most recently started
//! requests are preempted if their new pages do not fit); a step that has to
//! preempt admits nothing. Prefill chunks come in FCFS order (half-prefilled
//! requests first) under the tokens and pages the decodes leave.

use minisgl_example_kit::{admit_in_order, continuing_then_sorted_by, decode_all};
use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::pages_for_decode;

/// Decodes first; prefill chunks fill the rest of the token budget.
#[derive(Clone, Debug, Default)]
pub struct Sarathi;

impl Scheduler for Sarathi {
    fn name(&self) -> String {
        "sarathi".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let mut decision = decode_all(running, budget);
        if !decision.preempt.is_empty() {
            return decision;
        }
        let decode_pages: u64 = running
            .iter()
            .map(|r| pages_for_decode(r, budget.page_size))
            .sum();
        let decode_tokens = u32::try_from(decision.decode.len()).unwrap_or(u32::MAX);
        let pages = u64::from(budget.free_pages) + u64::from(budget.evictable_pages);
        let left = Budget {
            max_prefill_tokens: budget.max_prefill_tokens.saturating_sub(decode_tokens),
            free_pages: u32::try_from(pages.saturating_sub(decode_pages)).unwrap_or(u32::MAX),
            evictable_pages: 0,
            ..budget.clone()
        };
        let order = continuing_then_sorted_by(waiting, |r| r.arrival_us);
        decision.prefill = admit_in_order(order, &left, running.len());
        decision
    }
}

minisgl_plugin_sdk::export_scheduler!(Sarathi);

#[cfg(test)]
mod tests {
    use super::*;
    use minisgl_plugin_sdk::PrefillChunk;

    #[test]
    fn decodes_first_and_chunk_fills_the_rest() {
        let run = |id| RequestView {
            id,
            prompt_len: 20,
            computed_len: 20,
            pages_held: 2,
            ..RequestView::default()
        };
        let waiting = [RequestView {
            id: 7,
            prompt_len: 1000,
            ..RequestView::default()
        }];
        let budget = Budget {
            max_prefill_tokens: 64,
            max_running: 8,
            free_pages: 100,
            page_size: 16,
            ..Budget::default()
        };
        let d = Sarathi.schedule(&waiting, &[run(1), run(2), run(3)], &budget);
        assert_eq!(d.decode, vec![1, 2, 3]);
        assert_eq!(d.prefill, vec![PrefillChunk { id: 7, tokens: 61 }]);
    }
}
