//! Strict priority with preemption.
//!
//! Waiting requests are admitted in order of `priority` (larger first; ties:
//! half-prefilled first, then arrival). When nothing can be admitted because
//! the running slots or the pages are taken, and the most important waiting
//! request outranks some running requests, the lowest-priority running
//! requests (the most recently started first among equals) are preempted —
//! just enough of them to free a slot and the pages its next chunk needs. The
//! preempting step still decodes everyone else; the next step admits the
//! important request, and the preempted ones return to the waiting queue,
//! keep their generated tokens, and are recomputed once they rank first again.
//!
//! A request is only ever preempted by a strictly higher priority, so equal
//! priorities never thrash.

use minisgl_example_kit::{decode_all, Admission, Offer};
use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::pages_for_chunk;

/// Highest priority first; preempts lower priorities to make room.
#[derive(Clone, Debug, Default)]
pub struct Priority;

impl Scheduler for Priority {
    fn name(&self) -> String {
        "priority".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let mut order: Vec<&RequestView> = waiting.iter().collect();
        order.sort_by_key(|r| (std::cmp::Reverse(r.priority), r.computed_len == 0));

        let mut admission = Admission::new(budget, running.len());
        let mut prefill = Vec::new();
        let mut blocked = None;
        for r in order {
            match admission.offer(r) {
                Offer::Admitted(chunk) => prefill.push(chunk),
                Offer::NothingToDo => continue,
                Offer::NoPages | Offer::Exhausted => {
                    blocked = Some(r);
                    break;
                }
            }
        }
        if !prefill.is_empty() {
            return ScheduleDecision {
                prefill,
                ..ScheduleDecision::default()
            };
        }
        if let Some(head) = blocked {
            if let Some(decision) = preempt_for(head, running, budget, &admission) {
                return decision;
            }
        }
        decode_all(running, budget)
    }
}

/// Preempt lower-priority running requests until `head` would fit, or `None`
/// if all of them together would not be enough.
fn preempt_for(
    head: &RequestView,
    running: &[RequestView],
    budget: &Budget,
    admission: &Admission,
) -> Option<ScheduleDecision> {
    let tokens = head.remaining_prefill().min(budget.max_prefill_tokens);
    let pages_needed = pages_for_chunk(head, tokens, budget.page_size);
    let mut victims: Vec<usize> = (0..running.len())
        .filter(|&i| running[i].priority < head.priority)
        .collect();
    // Lowest priority first; among equals the most recently started (running
    // is in start order, and the sort is stable on the reversed list).
    victims.reverse();
    victims.sort_by_key(|&i| running[i].priority);

    let mut slots = admission.slots_left;
    let mut pages = admission.pages_left;
    let mut chosen = Vec::new();
    for i in victims {
        if slots >= 1 && pages >= pages_needed {
            break;
        }
        slots += 1;
        pages += u64::from(running[i].pages_held);
        chosen.push(i);
    }
    if chosen.is_empty() || slots == 0 || pages < pages_needed {
        return None;
    }
    let rest: Vec<RequestView> = (0..running.len())
        .filter(|i| !chosen.contains(i))
        .map(|i| running[i].clone())
        .collect();
    let mut decision = decode_all(&rest, budget);
    decision
        .preempt
        .extend(chosen.iter().map(|&i| running[i].id));
    Some(decision)
}

minisgl_plugin_sdk::export_scheduler!(Priority);
