//! Hostile test guest: every call returns an invalid decision; `budget.step %
//! 10` picks which rule it breaks (the numbers are the host's rules S1-S10).

use minisgl_plugin_sdk::{Budget, PrefillChunk, RequestView, ScheduleDecision, Scheduler};

#[derive(Default)]
pub struct Liar;

fn chunk(r: &RequestView, tokens: u32) -> PrefillChunk {
    PrefillChunk { id: r.id, tokens }
}

impl Scheduler for Liar {
    fn name(&self) -> String {
        "guest-invalid-scheduler".into()
    }

    /// Expects at least two waiting and two running requests.
    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        let mut d = ScheduleDecision::default();
        match b.step % 10 {
            // S1: unknown id.
            0 => d.decode.push(u64::MAX - 7),
            // S2: duplicate id.
            1 => d.decode.extend([r[0].id, r[0].id]),
            // S3: prefill of a running request.
            2 => d.prefill.push(chunk(&r[0], 1)),
            // S4: empty chunk.
            3 => d.prefill.push(chunk(&w[0], 0)),
            // S4: chunk beyond the remaining input.
            4 => d.prefill.push(chunk(&w[0], w[0].remaining_prefill() + 1)),
            // S5: more tokens than max_prefill_tokens (each request whole).
            5 => d
                .prefill
                .extend(w.iter().map(|x| chunk(x, x.remaining_prefill()))),
            // S6: decode of a waiting request.
            6 => d.decode.push(w[0].id),
            // S9: finishes a prefill regardless of max_running.
            7 => d.prefill.push(chunk(&w[0], w[0].remaining_prefill())),
            // S8: preempt and decode the same request.
            8 => {
                d.decode.push(r[0].id);
                d.preempt.push(r[0].id);
            }
            // S10: a whole request, whatever the free pages.
            _ => d.prefill.push(chunk(&w[0], w[0].remaining_prefill())),
        }
        d
    }
}

minisgl_plugin_sdk::export_scheduler!(Liar);
