//! The host's re-check of a scheduling decision.
//!
//! Whatever the scheduler plugin returns (the plugin runtime validates too, but
//! the loop never relies on that), the loop only acts on a [`Plan`] built here:
//! ids that exist in the right queue, each used once, chunk sizes within what
//! is left to prefill, the prefill token budget and the running-slot limit.
//! Pages are not checked here: allocation handles shortage (evicting, then
//! shrinking chunks or preempting).

use std::collections::{HashMap, HashSet};

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision};

/// A decision the loop can execute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// (request, tokens to prefill).
    pub prefill: Vec<(u64, u32)>,
    pub decode: Vec<u64>,
    pub preempt: Vec<u64>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.prefill.is_empty() && self.decode.is_empty() && self.preempt.is_empty()
    }
}

/// Turns `decision` into a valid plan. `running_now` counts every running
/// request (including those not offered for decode this step). Returns the
/// plan and how many corrections were needed.
pub fn validate(
    decision: &ScheduleDecision,
    waiting: &[RequestView],
    running: &[RequestView],
    budget: &Budget,
    running_now: usize,
) -> (Plan, u32) {
    let waiting: HashMap<u64, &RequestView> = waiting.iter().map(|v| (v.id, v)).collect();
    let running_ids: HashSet<u64> = running.iter().map(|v| v.id).collect();
    let mut fixups = 0u32;
    let mut plan = Plan::default();
    let mut used = HashSet::new();

    let mut preempted_running = 0usize;
    for &id in &decision.preempt {
        let ok = running_ids.contains(&id) || waiting.get(&id).is_some_and(|v| v.pages_held > 0);
        if ok && used.insert(id) {
            preempted_running += usize::from(running_ids.contains(&id));
            plan.preempt.push(id);
        } else {
            fixups += 1;
        }
    }
    for &id in &decision.decode {
        if running_ids.contains(&id) && used.insert(id) {
            plan.decode.push(id);
        } else {
            fixups += 1;
        }
    }
    let mut tokens_left = budget.max_prefill_tokens;
    let mut slots_left =
        (budget.max_running as usize).saturating_sub(running_now - preempted_running);
    for chunk in &decision.prefill {
        let Some(view) = waiting.get(&chunk.id) else {
            fixups += 1;
            continue;
        };
        if !used.insert(chunk.id) {
            fixups += 1;
            continue;
        }
        let remaining = view.remaining_prefill();
        let mut tokens = chunk.tokens.min(remaining).min(tokens_left);
        if tokens != chunk.tokens {
            fixups += 1;
        }
        if tokens == remaining {
            // This chunk makes the request running: it needs a slot.
            if slots_left == 0 {
                fixups += 1;
                tokens = 0;
            } else {
                slots_left -= 1;
            }
        }
        if tokens == 0 {
            continue;
        }
        tokens_left -= tokens;
        plan.prefill.push((chunk.id, tokens));
    }
    (plan, fixups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use minisgl_plugin_sdk::PrefillChunk;

    fn view(id: u64, prompt: u32, computed: u32, held: u32) -> RequestView {
        RequestView {
            id,
            prompt_len: prompt,
            computed_len: computed,
            pages_held: held,
            ..RequestView::default()
        }
    }

    #[test]
    fn drops_unknown_duplicate_and_oversized_parts() {
        let waiting = [view(1, 100, 0, 0), view(2, 50, 10, 1)];
        let running = [view(7, 10, 10, 1), view(8, 10, 10, 1)];
        let budget = Budget {
            max_prefill_tokens: 120,
            max_running: 3,
            ..Budget::default()
        };
        let decision = ScheduleDecision {
            prefill: vec![
                PrefillChunk { id: 1, tokens: 500 },
                PrefillChunk { id: 1, tokens: 5 },
                PrefillChunk { id: 9, tokens: 5 },
                PrefillChunk { id: 2, tokens: 40 },
            ],
            decode: vec![7, 7, 1, 8],
            preempt: vec![8, 1],
        };
        let (plan, fixups) = validate(&decision, &waiting, &running, &budget, 2);
        // 8 is preempted (so not decoded), 1 has no pages (cannot be preempted).
        assert_eq!(plan.preempt, vec![8]);
        assert_eq!(plan.decode, vec![7]);
        // 1 completes (100 tokens) and takes the last slot after 8 left;
        // 2 gets the 20 tokens left of the budget.
        assert_eq!(plan.prefill, vec![(1, 100), (2, 20)]);
        assert_eq!(fixups, 8);
    }

    #[test]
    fn completing_chunks_respect_running_slots() {
        let waiting = [view(1, 10, 0, 0), view(2, 10, 0, 0)];
        let budget = Budget {
            max_prefill_tokens: 100,
            max_running: 1,
            ..Budget::default()
        };
        let decision = ScheduleDecision {
            prefill: vec![
                PrefillChunk { id: 1, tokens: 10 },
                PrefillChunk { id: 2, tokens: 10 },
            ],
            ..ScheduleDecision::default()
        };
        let (plan, _) = validate(&decision, &waiting, &[], &budget, 0);
        assert_eq!(plan.prefill, vec![(1, 10)]);
    }
}
