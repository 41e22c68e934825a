//! Hostile test guest: every call returns invalid plans or picks;
//! `vocab_size % 6` picks how `plan` fails (host rules P1-P5), and `pick`
//! always answers a token outside its list (K2).

use minisgl_plugin_sdk::{CandidateList, SamplePlan, SampleRequest, Sampler, TokenBias};
use minisgl_policies::DefaultSampler;

#[derive(Default)]
pub struct Liar;

impl Sampler for Liar {
    fn name(&self) -> String {
        "guest-invalid-sampler".into()
    }

    fn plan(&mut self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan> {
        let mut plans = DefaultSampler.plan(requests, vocab_size);
        match vocab_size % 6 {
            // P3: biases a token outside the vocabulary.
            0 => plans[0].logit_bias.push(TokenBias {
                token: vocab_size,
                bias: 1.0,
            }),
            // P4: allows a token outside the vocabulary.
            1 => plans[0].allowed_tokens = Some(vec![0, vocab_size + 5]),
            // P2: non-finite temperature.
            2 => plans[0].params.temperature = f32::NAN,
            // P5: too many candidates.
            3 => plans[0].pick_from_top = 65,
            // P1: one plan missing.
            4 => {
                plans.pop();
            }
            // P1: a plan for an unknown request.
            _ => plans[0].id = u64::MAX,
        }
        plans
    }

    fn pick(&mut self, lists: &[CandidateList]) -> Vec<u32> {
        lists.iter().map(|_| u32::MAX - 1).collect()
    }
}

minisgl_plugin_sdk::export_sampler!(Liar);
