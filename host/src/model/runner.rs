//! The model runner: turns a [`StepInput`] into one forward pass on a backend
//! and returns the sampled tokens ([`StepOutput`]). It owns the backend, the
//! weights on the device and the paged KV cache.

use std::collections::HashMap;

use super::config::ModelConfig;
use super::llama::Model;
use super::loader::LoadedModel;
use super::ModelError;
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, KvLayout, StepMeta};
use crate::batch::{SampleSpec, SeqOutput, StepInput, StepOutput};

/// What the engine loop drives. One call = one step; steps are issued in
/// order (an overlapping engine runs `step` on a worker thread while it
/// prepares the next [`StepInput`]).
pub trait ModelRunner: Send {
    /// Run one step. KV of every input token is written to the cache at the
    /// slots given by each sequence's page table; one [`SeqOutput`] comes back
    /// per sequence with `sample: Some(..)`, in input order.
    ///
    /// `first_from_last_step`: `tokens[0]` is replaced by the token this runner
    /// sampled for the same request id in the immediately preceding `step`
    /// call (an error if there was none).
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError>;

    /// Full-vocabulary logits of every sampling row (tests and debugging; it
    /// copies logits to the host). KV is written exactly as in `step`.
    fn logits(&mut self, input: &StepInput) -> Result<Vec<Vec<f32>>, ModelError>;

    /// Tokens per KV page.
    fn page_size(&self) -> u32;
    /// Pages in the KV cache (valid page ids are `0..num_pages`).
    fn num_pages(&self) -> u32;
    /// Rows of the LM head.
    fn vocab_size(&self) -> u32;
    /// The model's config.
    fn config(&self) -> &ModelConfig;
    /// Backend name ("cpu", "cuda").
    fn device_name(&self) -> &'static str;
}

/// [`ModelRunner`] over any [`Backend`].
pub struct Runner<B: Backend> {
    backend: B,
    model: Model<B>,
    kv: B::Kv,
    layout: KvLayout,
    /// Tokens sampled by the previous step, by request id.
    last: HashMap<u64, u32>,
}

impl<B: Backend> Runner<B> {
    /// Upload `model`'s weights to `backend` and allocate a KV cache of
    /// `num_pages` pages of `page_size` tokens.
    pub fn new(
        backend: B,
        model: &LoadedModel,
        num_pages: u32,
        page_size: u32,
    ) -> Result<Self, ModelError> {
        if page_size == 0 || num_pages == 0 {
            return Err(ModelError::InvalidInput(format!(
                "num_pages ({num_pages}) and page_size ({page_size}) must be positive"
            )));
        }
        let m = Model::load(&backend, &model.config, &model.weights)?;
        let layout = m.kv_layout(num_pages as usize, page_size as usize);
        let kv = backend.alloc_kv(layout)?;
        Ok(Runner {
            backend,
            model: m,
            kv,
            layout,
            last: HashMap::new(),
        })
    }

    /// The backend (e.g. for device info).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn build_meta(&self, input: &StepInput) -> Result<StepMeta, ModelError> {
        let ps = self.layout.page_size as u32;
        let vocab = self.model.config().vocab_size() as u32;
        let mut m = StepMeta {
            page_size: ps,
            q_indptr: vec![0],
            page_indptr: vec![0],
            ..Default::default()
        };
        for s in &input.seqs {
            if s.tokens.is_empty() {
                return Err(ModelError::InvalidInput(format!(
                    "request {}: no tokens in this step",
                    s.id
                )));
            }
            let kv_len = s.start_pos as usize + s.tokens.len();
            if s.page_table.len() * (ps as usize) < kv_len {
                return Err(ModelError::InvalidInput(format!(
                    "request {}: {} pages of {ps} cannot hold {kv_len} tokens",
                    s.id,
                    s.page_table.len()
                )));
            }
            for (i, &t) in s.tokens.iter().enumerate() {
                let t = if i == 0 && s.first_from_last_step {
                    *self.last.get(&s.id).ok_or_else(|| {
                        ModelError::InvalidInput(format!(
                            "request {}: first_from_last_step but the previous step sampled \
                             nothing for it",
                            s.id
                        ))
                    })?
                } else {
                    t
                };
                if t >= vocab {
                    return Err(ModelError::InvalidInput(format!(
                        "request {}: token id {t} out of range (vocab {vocab})",
                        s.id
                    )));
                }
                let p = s.start_pos + i as u32;
                m.tokens.push(t);
                m.positions.push(p);
                m.slots.push(s.page_table[(p / ps) as usize] * ps + p % ps);
            }
            m.q_indptr.push(m.tokens.len() as u32);
            m.kv_lens.push(kv_len as u32);
            m.page_table.extend_from_slice(&s.page_table);
            m.page_indptr.push(m.page_table.len() as u32);
            if s.sample.is_some() {
                m.sample_rows.push(m.tokens.len() as u32 - 1);
            }
        }
        m.validate(self.layout.num_pages as u32)?;
        Ok(m)
    }

    fn forward(&mut self, input: &StepInput) -> Result<Option<B::Tensor>, ModelError> {
        let meta = self.build_meta(input)?;
        if meta.tokens.is_empty() {
            return Ok(None);
        }
        let step = self.backend.prepare_step(&meta)?;
        self.model
            .forward(&self.backend, &mut self.kv, &step, meta.sample_rows.len())
    }
}

impl<B: Backend> ModelRunner for Runner<B> {
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError> {
        let logits = self.forward(input)?;
        let sampling: Vec<(u64, &SampleSpec)> = input
            .seqs
            .iter()
            .filter_map(|s| s.sample.as_ref().map(|sp| (s.id, sp)))
            .collect();
        let mut out = StepOutput::default();
        self.last.clear();
        if let Some(logits) = logits {
            let specs: Vec<SampleSpec> = sampling.iter().map(|(_, s)| (*s).clone()).collect();
            let sampled = self.backend.sample(&logits, &specs)?;
            for ((id, _), s) in sampling.iter().zip(sampled) {
                self.last.insert(*id, s.token);
                out.outputs.push(SeqOutput {
                    id: *id,
                    token: s.token,
                    logprob: s.logprob,
                    top_logprobs: s.top_logprobs,
                    candidates: s.candidates,
                });
            }
        }
        Ok(out)
    }

    fn logits(&mut self, input: &StepInput) -> Result<Vec<Vec<f32>>, ModelError> {
        let Some(logits) = self.forward(input)? else {
            return Ok(vec![]);
        };
        let vocab = self.model.config().vocab_size();
        let flat = self.backend.to_host(&logits)?;
        Ok(flat.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    fn page_size(&self) -> u32 {
        self.layout.page_size as u32
    }

    fn num_pages(&self) -> u32 {
        self.layout.num_pages as u32
    }

    fn vocab_size(&self) -> u32 {
        self.model.config().vocab_size() as u32
    }

    fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    fn device_name(&self) -> &'static str {
        self.backend.name()
    }
}

/// Which backend to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceKind {
    Cpu,
    Cuda,
    /// CUDA when a driver and GPU are present, else CPU.
    #[default]
    Auto,
}

impl std::str::FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" => Ok(DeviceKind::Cuda),
            "auto" => Ok(DeviceKind::Auto),
            o => Err(format!("unknown device `{o}` (expected cpu, cuda or auto)")),
        }
    }
}

/// A runner on the CPU backend.
pub fn cpu_runner(
    model: &LoadedModel,
    num_pages: u32,
    page_size: u32,
) -> Result<Runner<CpuBackend>, ModelError> {
    Runner::new(CpuBackend::new(), model, num_pages, page_size)
}

/// A runner on the requested device. `Auto` falls back to the CPU (with a
/// log line) when CUDA is unavailable.
pub fn build_runner(
    model: &LoadedModel,
    device: DeviceKind,
    num_pages: u32,
    page_size: u32,
) -> Result<Box<dyn ModelRunner>, ModelError> {
    use crate::backend::cuda::{CudaBackend, CudaOptions};
    let cuda = || {
        CudaBackend::new(&CudaOptions::default())
            .map_err(|e| ModelError::Backend(crate::backend::BackendError::Device(e.to_string())))
    };
    match device {
        DeviceKind::Cpu => Ok(Box::new(cpu_runner(model, num_pages, page_size)?)),
        DeviceKind::Cuda => Ok(Box::new(Runner::new(cuda()?, model, num_pages, page_size)?)),
        DeviceKind::Auto => match cuda() {
            Ok(b) => Ok(Box::new(Runner::new(b, model, num_pages, page_size)?)),
            Err(e) => {
                tracing::info!("CUDA unavailable ({e}); using the CPU backend");
                Ok(Box::new(cpu_runner(model, num_pages, page_size)?))
            }
        },
    }
}
