//! Building blocks shared by the example research policies.
//!
//! Every example scheduler differs from FCFS only in *which* waiting request
//! it considers next (or, for Sarathi, in how a step is filled); the
//! bookkeeping of the step budget is the same everywhere and lives here, so
//! each example reads as its ordering rule. The accounting is the default
//! policy's (`minisgl_policies::pages_for_chunk`), which is also what the host
//! validates against.

use minisgl_plugin_sdk::{Budget, PrefillChunk, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::{pages_for_chunk, Fcfs};

/// What is left of one step's budget while requests are admitted.
#[derive(Clone, Debug)]
pub struct Admission {
    /// Prompt tokens that may still be prefilled this step.
    pub tokens_left: u32,
    /// Pages still available (free plus evictable).
    pub pages_left: u64,
    /// Running slots still free; every prefilled request takes one.
    pub slots_left: usize,
    page_size: u32,
}

/// Outcome of offering one request to an [`Admission`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Admitted with this chunk.
    Admitted(PrefillChunk),
    /// The request has no input left to compute; skip it.
    NothingToDo,
    /// Its chunk needs more pages than are left.
    NoPages,
    /// No tokens or running slots are left this step.
    Exhausted,
}

impl Admission {
    /// The whole step budget, with `running` requests already decoding.
    pub fn new(budget: &Budget, running: usize) -> Self {
        Admission {
            tokens_left: budget.max_prefill_tokens,
            pages_left: u64::from(budget.free_pages) + u64::from(budget.evictable_pages),
            slots_left: (budget.max_running as usize).saturating_sub(running),
            page_size: budget.page_size,
        }
    }

    /// Admit `r` with the largest chunk that fits the tokens left.
    pub fn offer(&mut self, r: &RequestView) -> Offer {
        if self.tokens_left == 0 || self.slots_left == 0 {
            return Offer::Exhausted;
        }
        let remaining = r.remaining_prefill();
        if remaining == 0 {
            return Offer::NothingToDo;
        }
        let tokens = remaining.min(self.tokens_left);
        let pages = pages_for_chunk(r, tokens, self.page_size);
        if pages > self.pages_left {
            return Offer::NoPages;
        }
        self.pages_left -= pages;
        self.tokens_left -= tokens;
        self.slots_left -= 1;
        Offer::Admitted(PrefillChunk { id: r.id, tokens })
    }
}

/// Admit requests in the given order until the budget runs out. A request
/// whose chunk does not fit the pages left stops the scan (as in FCFS): a
/// later, smaller request never overtakes it, so the order is a promise.
pub fn admit_in_order<'a>(
    order: impl IntoIterator<Item = &'a RequestView>,
    budget: &Budget,
    running: usize,
) -> Vec<PrefillChunk> {
    let mut admission = Admission::new(budget, running);
    let mut chunks = Vec::new();
    for r in order {
        match admission.offer(r) {
            Offer::Admitted(chunk) => chunks.push(chunk),
            Offer::NothingToDo => continue,
            Offer::NoPages | Offer::Exhausted => break,
        }
    }
    chunks
}

/// Waiting requests that already hold part of their input (an earlier chunk
/// ran) come first, in the host's order: finishing them frees the pages they
/// pin. The rest follow, sorted by `key` (a stable sort: ties keep arrival
/// order).
pub fn continuing_then_sorted_by<K: Ord>(
    waiting: &[RequestView],
    key: impl Fn(&RequestView) -> K,
) -> Vec<&RequestView> {
    let mut fresh: Vec<&RequestView> = waiting.iter().filter(|r| r.computed_len == 0).collect();
    fresh.sort_by_key(|r| key(r));
    waiting
        .iter()
        .filter(|r| r.computed_len > 0)
        .chain(fresh)
        .collect()
}

/// The default decode step: every running request decodes, and if their new
/// pages do not fit, the most recently started ones that need a page are
/// preempted.
pub fn decode_all(running: &[RequestView], budget: &Budget) -> ScheduleDecision {
    Fcfs.schedule(&[], running, budget)
}

/// A prefill step if `prefill` is not empty, otherwise the default decode step
/// (prefill has priority, as in the default FCFS).
pub fn prefill_or_decode(
    prefill: Vec<PrefillChunk>,
    running: &[RequestView],
    budget: &Budget,
) -> ScheduleDecision {
    if prefill.is_empty() {
        decode_all(running, budget)
    } else {
        ScheduleDecision {
            prefill,
            ..ScheduleDecision::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u64, prompt: u32, computed: u32) -> RequestView {
        RequestView {
            id,
            prompt_len: prompt,
            computed_len: computed,
            pages_held: computed.div_ceil(16),
            ..RequestView::default()
        }
    }

    fn budget(tokens: u32, pages: u32) -> Budget {
        Budget {
            max_prefill_tokens: tokens,
            max_running: 4,
            free_pages: pages,
            page_size: 16,
            ..Budget::default()
        }
    }

    #[test]
    fn ordered_admission_equals_fcfs_on_arrival_order() {
        let waiting = [view(1, 40, 0), view(2, 300, 32), view(3, 500, 0)];
        let order = continuing_then_sorted_by(&waiting, |r| r.arrival_us);
        let ours = admit_in_order(order, &budget(256, 100), 1);
        let fcfs = Fcfs.schedule(&waiting, &[view(9, 20, 20)], &budget(256, 100));
        assert_eq!(ours, fcfs.prefill);
    }

    #[test]
    fn blocked_request_stops_the_scan() {
        let waiting = [view(1, 200, 0), view(2, 10, 0)];
        assert!(admit_in_order(&waiting, &budget(256, 5), 0).is_empty());
    }
}
