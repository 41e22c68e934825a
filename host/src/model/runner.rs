//! The model runner: turns a [`StepInput`] into one forward pass on a backend
//! and returns the sampled tokens ([`StepOutput`]). It owns the backend, the
//! weights on the device and the paged KV cache.

use std::collections::HashMap;

use super::config::ModelConfig;
use super::graphs::DecodeGraphs;
use super::llama::Model;
use super::loader::LoadedModel;
use super::tp::TpShard;
use super::ModelError;
pub use crate::backend::DeviceKind;
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
    /// sampled for the same request id in the immediately preceding step
    /// (an error if there was none).
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError>;

    /// Enqueue a step without waiting for it: the overlapped engine launches
    /// step N+1 while step N still runs on the device, and N+1's
    /// `first_from_last_step` tokens are taken where N's sampling left them.
    /// Returns [`Launched::Done`] when the runner ran the step right away
    /// (the default), else the output comes from [`ModelRunner::finish`];
    /// steps finish in launch order.
    fn launch(&mut self, input: &StepInput) -> Result<Launched, ModelError> {
        self.step(input).map(Launched::Done)
    }

    /// Whether the oldest pending step has finished (`finish` will not wait).
    fn ready(&self) -> bool {
        true
    }

    /// The output of the oldest pending step (waits for it).
    fn finish(&mut self) -> Result<StepOutput, ModelError> {
        Err(ModelError::InvalidInput(
            "finish without a pending step".into(),
        ))
    }

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

/// Runner settings beyond the KV cache's shape.
#[derive(Clone, Debug)]
pub struct RunnerOptions {
    /// Largest decode batch replayed from a recorded graph on backends that
    /// record (CUDA); 0 records none (`--cuda-graph-max-bs`).
    pub cuda_graph_max_bs: usize,
    /// Tensor-parallel ranks (`--tp`). [`build_runner_with`] honours it; a
    /// [`Runner`] is always one rank (its shard is given to
    /// [`Runner::with_shard`]).
    pub tp: usize,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            cuda_graph_max_bs: 256,
            tp: 1,
        }
    }
}

/// What [`ModelRunner::launch`] did with a step.
#[derive(Debug)]
pub enum Launched {
    /// Ran it; here is the output.
    Done(StepOutput),
    /// Enqueued it; [`ModelRunner::finish`] returns the output.
    Pending,
}

/// A launched step whose sampling may still run.
struct Pending<S> {
    /// Request ids of the sampling rows, in order.
    ids: Vec<u64>,
    sampling: Option<S>,
}

/// [`ModelRunner`] over any [`Backend`].
pub struct Runner<B: Backend> {
    backend: B,
    model: Model<B>,
    kv: B::Kv,
    layout: KvLayout,
    /// Sample row of each request in the previous step (its token stays where
    /// the backend's sampling left it).
    last: HashMap<u64, u32>,
    /// Launched steps not yet finished, oldest first.
    pending: std::collections::VecDeque<Pending<B::Sampling>>,
    /// Recorded decode graphs, when the backend records and they are enabled.
    graphs: Option<DecodeGraphs<B>>,
    /// Replay graphs (checks turn this off to compare with eager runs).
    use_graphs: bool,
}

/// Where a step's logits are: nowhere (no row samples), in a fresh tensor
/// (eager run), or in the graphs' output tensor (replay).
enum Logits<T> {
    None,
    Owned(T),
    Graph,
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
        let opts = RunnerOptions {
            cuda_graph_max_bs: 0,
            ..RunnerOptions::default()
        };
        Self::with_options(backend, model, num_pages, page_size, &opts)
    }

    /// [`Runner::new`] with options: on a backend that records graphs, decode
    /// graphs up to `opts.cuda_graph_max_bs` are recorded here (a failure to
    /// record is logged and leaves the runner eager).
    pub fn with_options(
        backend: B,
        model: &LoadedModel,
        num_pages: u32,
        page_size: u32,
        opts: &RunnerOptions,
    ) -> Result<Self, ModelError> {
        if opts.tp != 1 {
            return Err(ModelError::InvalidInput(format!(
                "a Runner holds one rank; tp = {} needs build_runner_with or a TpRunner",
                opts.tp
            )));
        }
        Self::with_shard(backend, model, TpShard::WHOLE, num_pages, page_size, opts)
    }

    /// A runner over rank `shard`'s part of the model: its KV cache holds
    /// that rank's KV heads only (the page ids mean the same on every rank),
    /// and `backend` must be a member of the rank's group when the model is
    /// split (see [`Backend::all_reduce`]).
    pub fn with_shard(
        backend: B,
        model: &LoadedModel,
        shard: TpShard,
        num_pages: u32,
        page_size: u32,
        opts: &RunnerOptions,
    ) -> Result<Self, ModelError> {
        if page_size == 0 || num_pages == 0 {
            return Err(ModelError::InvalidInput(format!(
                "num_pages ({num_pages}) and page_size ({page_size}) must be positive"
            )));
        }
        let t_load = std::time::Instant::now();
        let m = Model::load_shard(&backend, &model.config, &model.weights, shard)?;
        let layout = m.kv_layout(num_pages as usize, page_size as usize);
        let t_kv = std::time::Instant::now();
        let mut kv = backend.alloc_kv(layout)?;
        // Start-up is device time on a lent GPU: say where it goes.
        tracing::info!(
            "weights loaded in {:.2} s, KV cache of {num_pages} pages allocated in {:.2} s",
            (t_kv - t_load).as_secs_f64(),
            t_kv.elapsed().as_secs_f64()
        );
        // A sequence can neither outgrow the model's context nor the pool.
        let max_pages = model
            .config
            .max_position_embeddings()
            .div_ceil(page_size as usize)
            .min(num_pages as usize);
        let t0 = std::time::Instant::now();
        let graphs =
            match DecodeGraphs::capture(&backend, &m, &mut kv, opts.cuda_graph_max_bs, max_pages) {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!("decode graphs disabled: recording failed: {e}");
                    None
                }
            };
        if let Some(g) = &graphs {
            tracing::info!(
                "recorded {} decode graphs (batch sizes up to {}) in {:.2} s",
                g.sizes().len(),
                opts.cuda_graph_max_bs,
                t0.elapsed().as_secs_f64()
            );
        }
        Ok(Runner {
            backend,
            model: m,
            kv,
            layout,
            last: HashMap::new(),
            pending: Default::default(),
            graphs,
            use_graphs: true,
        })
    }

    fn graph_logits(&self) -> Result<&B::Tensor, ModelError> {
        self.graphs
            .as_ref()
            .map(|g| g.logits())
            .ok_or_else(|| ModelError::InvalidInput("graph logits without recorded graphs".into()))
    }

    /// Batch sizes with a recorded decode graph (empty when none).
    pub fn graph_sizes(&self) -> Vec<usize> {
        self.graphs.as_ref().map(|g| g.sizes()).unwrap_or_default()
    }

    /// Decode steps replayed from graphs so far.
    pub fn graph_replays(&self) -> u64 {
        self.graphs.as_ref().map_or(0, |g| g.replays)
    }

    /// Turn graph replay on or off (checks compare the two on one runner).
    pub fn set_use_graphs(&mut self, on: bool) {
        self.use_graphs = on;
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
                    let src = *self.last.get(&s.id).ok_or_else(|| {
                        ModelError::InvalidInput(format!(
                            "request {}: first_from_last_step but the previous step sampled \
                             nothing for it",
                            s.id
                        ))
                    })?;
                    m.from_last.push([m.tokens.len() as u32, src]);
                    0 // placeholder; the backend substitutes the sampled token
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

    /// One forward pass: a graph replay when one fits, else eager.
    fn forward(&mut self, input: &StepInput) -> Result<Logits<B::Tensor>, ModelError> {
        let meta = self.build_meta(input)?;
        if meta.tokens.is_empty() {
            return Ok(Logits::None);
        }
        if let Some(g) = self.graphs.as_mut().filter(|_| self.use_graphs) {
            if let Some(i) = g.fit(&meta) {
                g.run(&self.backend, &meta, i)?;
                return Ok(Logits::Graph);
            }
        }
        let step = self.backend.prepare_step(&meta)?;
        Ok(
            match self
                .model
                .forward(&self.backend, &mut self.kv, &step, meta.sample_rows.len())?
            {
                Some(t) => Logits::Owned(t),
                None => Logits::None,
            },
        )
    }
}

impl<B: Backend> ModelRunner for Runner<B> {
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError> {
        match self.launch(input)? {
            Launched::Done(out) => Ok(out),
            Launched::Pending => self.finish(),
        }
    }

    fn launch(&mut self, input: &StepInput) -> Result<Launched, ModelError> {
        let (ids, specs): (Vec<u64>, Vec<SampleSpec>) = input
            .seqs
            .iter()
            .filter_map(|s| s.sample.as_ref().map(|sp| (s.id, sp.clone())))
            .unzip();
        let sampling = match self.forward(input)? {
            Logits::None => None,
            Logits::Owned(t) => Some(self.backend.sample_launch(&t, &specs)?),
            Logits::Graph => Some(self.backend.sample_launch(self.graph_logits()?, &specs)?),
        };
        self.last = ids
            .iter()
            .enumerate()
            .map(|(row, &id)| (id, row as u32))
            .collect();
        self.pending.push_back(Pending { ids, sampling });
        Ok(Launched::Pending)
    }

    fn ready(&self) -> bool {
        self.pending
            .front()
            .and_then(|p| p.sampling.as_ref())
            .is_none_or(|s| self.backend.sample_ready(s))
    }

    fn finish(&mut self) -> Result<StepOutput, ModelError> {
        let p = self
            .pending
            .pop_front()
            .ok_or_else(|| ModelError::InvalidInput("finish without a pending step".into()))?;
        let mut out = StepOutput::default();
        if let Some(s) = p.sampling {
            let sampled = self.backend.sample_finish(s)?;
            for (id, s) in p.ids.into_iter().zip(sampled) {
                out.outputs.push(SeqOutput {
                    id,
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
        let rows = input.seqs.iter().filter(|s| s.sample.is_some()).count();
        let flat = match self.forward(input)? {
            Logits::None => return Ok(vec![]),
            Logits::Owned(t) => self.backend.to_host(&t)?,
            Logits::Graph => self.backend.to_host(self.graph_logits()?)?,
        };
        let vocab = self.model.config().vocab_size();
        Ok(flat.chunks(vocab).take(rows).map(<[f32]>::to_vec).collect())
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
