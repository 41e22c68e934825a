//! The loop's acceptance of a scheduling decision.
//!
//! There is one set of rules, [`crate::plugin::validate::schedule`] (S1-S10,
//! the rules the WIT and the plugin guide document). The loop checks every
//! decision with it, whoever produced it, and turns an accepted decision into
//! a [`Plan`] unchanged: nothing is clipped, dropped or reordered. A decision
//! that breaks a rule is not repaired; the caller replaces it as a whole.

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision};

use crate::plugin::validate::{self, InvalidDecision};

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

/// Checks `decision` against the views and budget the policy was given and,
/// when every rule holds, returns it as a plan, exactly as decided.
pub fn accept(
    decision: &ScheduleDecision,
    waiting: &[RequestView],
    running: &[RequestView],
    budget: &Budget,
) -> Result<Plan, InvalidDecision> {
    validate::schedule(decision, waiting, running, budget)?;
    Ok(Plan {
        prefill: decision.prefill.iter().map(|c| (c.id, c.tokens)).collect(),
        decode: decision.decode.clone(),
        preempt: decision.preempt.clone(),
    })
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

    fn budget() -> Budget {
        Budget {
            max_prefill_tokens: 120,
            max_running: 3,
            free_pages: 100,
            page_size: 16,
            ..Budget::default()
        }
    }

    #[test]
    fn a_valid_decision_is_executed_unchanged() {
        let waiting = [view(1, 100, 0, 0), view(2, 50, 16, 1)];
        let running = [view(7, 10, 10, 1), view(8, 10, 10, 1)];
        let decision = ScheduleDecision {
            prefill: vec![
                PrefillChunk { id: 2, tokens: 34 },
                PrefillChunk { id: 1, tokens: 80 },
            ],
            decode: vec![8],
            preempt: vec![7],
        };
        let plan = accept(&decision, &waiting, &running, &budget()).unwrap();
        assert_eq!(plan.prefill, vec![(2, 34), (1, 80)]);
        assert_eq!(plan.decode, vec![8]);
        assert_eq!(plan.preempt, vec![7]);
    }

    #[test]
    fn an_invalid_decision_is_refused_whole_not_clipped() {
        let waiting = [view(1, 100, 0, 0)];
        // 500 tokens for a 100-token prompt: S4, no partial plan.
        let decision = ScheduleDecision {
            prefill: vec![PrefillChunk { id: 1, tokens: 500 }],
            ..ScheduleDecision::default()
        };
        let err = accept(&decision, &waiting, &[], &budget()).unwrap_err();
        assert!(err.0.starts_with("S4"), "{err}");
    }
}
