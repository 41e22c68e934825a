//! First-come-first-served scheduling with chunked prefill (Mini-SGLang's default).
//!
//! Each step:
//! 1. **Prefill first.** Waiting requests that already hold part of their input
//!    (`computed_len > 0`: an earlier chunk ran) continue first, then new ones,
//!    each group in the order the host gave (arrival order). Every prefilled
//!    request takes one running slot (`max_running - running.len()` are free),
//!    so requests that finish their input this step always fit `max_running`.
//!    A request gets a chunk of `min(remaining input, tokens left in
//!    max_prefill_tokens)`; the last one admitted may be cut short (chunked
//!    prefill). A request whose chunk needs more pages than are left stops the
//!    scan: strict FCFS never lets a later request overtake a blocked one, and
//!    memory never goes to a half-prefilled request that cannot finish.
//! 2. **Otherwise decode every running request.** If their new pages do not
//!    fit, the most recently started requests that need a new page are
//!    preempted (their KV is released and they are recomputed later) until
//!    the rest fit.
//!
//! Prefill steps do not also decode: like Mini-SGLang, prefill has priority
//! and a step is either prefill or decode. This keeps each step's token count
//! within `max_prefill_tokens` (decode tokens would otherwise share that
//! budget), gives the lowest time-to-first-token, and lets continuous batching
//! fill the batch before decoding; the cost is that running requests pause
//! while a long prompt is prefilled in chunks (`max_running` bounds how long,
//! since admission stops once the running slots are full). A policy that mixes
//! both kinds in one step is expressible and can be written as a plugin.

use minisgl_plugin_sdk::{Budget, PrefillChunk, RequestView, ScheduleDecision, Scheduler};

/// New KV pages a prefill chunk of `tokens` needs: the request will hold
/// `computed + tokens` tokens, `computed = max(computed_len, prefix_hit_len)`,
/// which fill `ceil(.. / page_size)` pages, minus the pages it holds already.
pub fn pages_for_chunk(r: &RequestView, tokens: u32, page_size: u32) -> u64 {
    let page_size = u64::from(page_size.max(1));
    let computed = u64::from(r.computed_len.max(r.prefix_hit_len));
    let total = (computed + u64::from(tokens)).div_ceil(page_size);
    total.saturating_sub(u64::from(r.pages_held))
}

/// New KV pages one decode step needs: one when the last page is full.
pub fn pages_for_decode(r: &RequestView, page_size: u32) -> u64 {
    u64::from(r.computed_len.is_multiple_of(page_size.max(1)))
}

/// The default scheduler. Stateless: every decision is a function of the views.
#[derive(Clone, Debug, Default)]
pub struct Fcfs;

impl Scheduler for Fcfs {
    fn name(&self) -> String {
        "fcfs".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let prefill = plan_prefill(waiting, running.len(), budget);
        if !prefill.is_empty() {
            return ScheduleDecision {
                prefill,
                ..ScheduleDecision::default()
            };
        }
        plan_decode(running, budget)
    }
}

fn plan_prefill(waiting: &[RequestView], running: usize, budget: &Budget) -> Vec<PrefillChunk> {
    let mut pages_left = u64::from(budget.free_pages) + u64::from(budget.evictable_pages);
    let mut tokens_left = budget.max_prefill_tokens;
    let mut slots_left = (budget.max_running as usize).saturating_sub(running);
    let continuing = waiting.iter().filter(|r| r.computed_len > 0);
    let fresh = waiting.iter().filter(|r| r.computed_len == 0);
    let mut prefill = Vec::new();
    for r in continuing.chain(fresh) {
        if tokens_left == 0 || slots_left == 0 {
            break;
        }
        let remaining = r.remaining_prefill();
        if remaining == 0 {
            // Nothing left to compute, so no valid chunk exists (the host
            // always leaves at least one token to produce logits from).
            continue;
        }
        let tokens = remaining.min(tokens_left);
        let pages = pages_for_chunk(r, tokens, budget.page_size);
        if pages > pages_left {
            break;
        }
        pages_left -= pages;
        tokens_left -= tokens;
        slots_left -= 1;
        prefill.push(PrefillChunk { id: r.id, tokens });
    }
    prefill
}

fn plan_decode(running: &[RequestView], budget: &Budget) -> ScheduleDecision {
    let pages_left = u64::from(budget.free_pages) + u64::from(budget.evictable_pages);
    let needs_page = |r: &RequestView| pages_for_decode(r, budget.page_size) > 0;
    let needed = running.iter().filter(|r| needs_page(r)).count() as u64;
    // Preempt the most recently started requests among those that need a new
    // page (preempting one that needs none would not help this step) until the
    // rest fit.
    let mut excess = needed.saturating_sub(pages_left);
    let mut preempted = vec![false; running.len()];
    for (i, r) in running.iter().enumerate().rev() {
        if excess == 0 {
            break;
        }
        if needs_page(r) {
            preempted[i] = true;
            excess -= 1;
        }
    }
    let mut decision = ScheduleDecision::default();
    for (r, &out) in running.iter().zip(&preempted) {
        if out {
            decision.preempt.push(r.id);
        } else {
            decision.decode.push(r.id);
        }
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u64, prompt: u32, computed: u32, held: u32) -> RequestView {
        RequestView {
            id,
            arrival_us: id,
            prompt_len: prompt,
            computed_len: computed,
            pages_held: held,
            max_new_tokens: 16,
            ..RequestView::default()
        }
    }

    fn budget(tokens: u32, running: u32, free: u32) -> Budget {
        Budget {
            max_prefill_tokens: tokens,
            max_running: running,
            free_pages: free,
            evictable_pages: 0,
            page_size: 16,
            now_us: 0,
            step: 0,
        }
    }

    #[test]
    fn chunks_under_token_budget_and_continues_partial_first() {
        let waiting = [view(1, 100, 0, 0), view(2, 300, 64, 4), view(3, 50, 0, 0)];
        let d = Fcfs.schedule(&waiting, &[], &budget(256, 8, 1000));
        assert_eq!(
            d.prefill,
            vec![
                PrefillChunk { id: 2, tokens: 236 },
                PrefillChunk { id: 1, tokens: 20 }
            ]
        );
        assert!(d.decode.is_empty() && d.preempt.is_empty());
    }

    #[test]
    fn blocked_head_stops_admission() {
        // Request 1 needs 7 pages, only 5 free: request 2 (1 page) must wait too.
        let waiting = [view(1, 100, 0, 0), view(2, 10, 0, 0)];
        let running = [view(9, 40, 40, 3)];
        let d = Fcfs.schedule(&waiting, &running, &budget(256, 8, 5));
        assert!(d.prefill.is_empty());
        assert_eq!(d.decode, vec![9]);
    }

    #[test]
    fn decode_preempts_newest_when_pages_run_out() {
        let running = [view(1, 32, 32, 2), view(2, 16, 16, 1), view(3, 20, 20, 2)];
        // 1 and 2 need a page each (full last page), 3 does not; one page free.
        let d = Fcfs.schedule(&[], &running, &budget(256, 8, 1));
        assert_eq!(d.decode, vec![1, 3]);
        assert_eq!(d.preempt, vec![2]);
    }

    #[test]
    fn respects_max_running() {
        let waiting = [view(1, 10, 0, 0), view(2, 10, 0, 0)];
        let running = [view(9, 40, 40, 3)];
        let d = Fcfs.schedule(&waiting, &running, &budget(256, 2, 100));
        assert_eq!(d.prefill, vec![PrefillChunk { id: 1, tokens: 10 }]);
    }
}
