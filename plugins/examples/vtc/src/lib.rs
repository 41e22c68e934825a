//! Fair scheduling across clients with the Virtual Token Counter (VTC; Sheng
//! et al., "Fairness in Serving Large Language Models", OSDI'24).
//!
//! Each client has a counter of the service it has received, in weighted
//! tokens: `W_INPUT` per prefilled token and `W_OUTPUT` per generated token
//! (output tokens cost more, as in the paper). Every admission goes to the
//! waiting request of the client with the smallest counter (its oldest
//! request), and the counter is charged as soon as the work is scheduled.
//! A client that was idle and comes back has its counter lifted to the
//! smallest counter among the clients that stayed busy, so idling never banks
//! credit. With every client backlogged, the counters — and so the service —
//! of any two clients stay within a bound set by the largest request, however
//! many requests each one sends.
//!
//! State: the counters, kept across calls. They are lost when the plugin is
//! swapped or restarted after a failure; the policy then starts fair from
//! zero, which is safe. Steps are prefill-or-decode as in the default FCFS.

use std::collections::{BTreeMap, BTreeSet};

use minisgl_example_kit::{decode_all, Admission, Offer};
use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};

/// Service charged per prefilled input token.
pub const W_INPUT: u64 = 1;
/// Service charged per generated token.
pub const W_OUTPUT: u64 = 2;
/// Counters kept for clients that went idle before the oldest are forgotten.
const MAX_IDLE_CLIENTS: usize = 4096;

/// Least-served client first.
#[derive(Clone, Debug, Default)]
pub struct Vtc {
    counters: BTreeMap<u64, u64>,
    active: BTreeSet<u64>,
}

impl Vtc {
    /// Service charged to `client` so far (after lifting).
    pub fn counter(&self, client: u64) -> u64 {
        self.counters.get(&client).copied().unwrap_or(0)
    }

    fn lift_returning_clients(&mut self, now_active: &BTreeSet<u64>) {
        let floor = now_active
            .intersection(&self.active)
            .filter_map(|c| self.counters.get(c))
            .min()
            .copied();
        if let Some(floor) = floor {
            for c in now_active.difference(&self.active) {
                let counter = self.counters.entry(*c).or_default();
                *counter = (*counter).max(floor);
            }
        }
        if self.counters.len() > MAX_IDLE_CLIENTS + now_active.len() {
            self.counters.retain(|c, _| now_active.contains(c));
        }
        self.active = now_active.clone();
    }
}

impl Scheduler for Vtc {
    fn name(&self) -> String {
        "vtc".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let now_active: BTreeSet<u64> =
            waiting.iter().chain(running).map(|r| r.client_id).collect();
        self.lift_returning_clients(&now_active);

        // Each client's queue: half-prefilled requests first, then arrival order.
        let mut queues: BTreeMap<u64, Vec<&RequestView>> = BTreeMap::new();
        for r in waiting
            .iter()
            .filter(|r| r.computed_len > 0)
            .chain(waiting.iter().filter(|r| r.computed_len == 0))
        {
            queues.entry(r.client_id).or_default().push(r);
        }
        let mut heads: BTreeMap<u64, usize> = BTreeMap::new();
        let mut admission = Admission::new(budget, running.len());
        let mut prefill = Vec::new();
        loop {
            // The least-served client with work left (ties: lower client id).
            let next = queues
                .iter()
                .filter(|(c, q)| heads.get(*c).copied().unwrap_or(0) < q.len())
                .min_by_key(|(c, _)| (self.counter(**c), **c))
                .map(|(c, _)| *c);
            let Some(client) = next else { break };
            let head = heads.entry(client).or_default();
            let r = queues[&client][*head];
            *head += 1;
            match admission.offer(r) {
                Offer::Admitted(chunk) => {
                    *self.counters.entry(client).or_default() += u64::from(chunk.tokens) * W_INPUT;
                    prefill.push(chunk);
                }
                Offer::NothingToDo => continue,
                // The least-served client's request waits for room; admitting
                // someone else's instead would give away its share.
                Offer::NoPages | Offer::Exhausted => break,
            }
        }
        if !prefill.is_empty() {
            return ScheduleDecision {
                prefill,
                ..ScheduleDecision::default()
            };
        }
        let decision = decode_all(running, budget);
        for r in running.iter().filter(|r| decision.decode.contains(&r.id)) {
            *self.counters.entry(r.client_id).or_default() += W_OUTPUT;
        }
        decision
    }
}

minisgl_plugin_sdk::export_scheduler!(Vtc);
