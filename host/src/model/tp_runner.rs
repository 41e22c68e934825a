//! A [`ModelRunner`] that splits the model across tensor-parallel ranks, one
//! thread per rank.
//!
//! Each rank thread owns a backend, a [`Runner`] over its shard
//! ([`super::tp`]) and a KV cache of its KV heads. Every step goes to every
//! rank unchanged (the page tables mean the same everywhere); the ranks meet
//! in the model's all-reduces and come back with the same logits, so each
//! samples the same tokens, keeps them for its own next step
//! (`first_from_last_step`), and rank 0's output is the step's. The engine
//! above sees one runner and runs its scheduler and plugins once.
//!
//! Overlap scheduling passes through: [`ModelRunner::launch`] enqueues the
//! step on every rank's device and returns, [`ModelRunner::finish`] collects
//! it, so on CUDA the engine prepares step N+1 while the GPUs run step N,
//! as with one GPU.
//!
//! Threads rather than processes: a rank is a backend, and on CUDA a backend
//! is one device's context, which a thread can hold; NCCL wants one
//! communicator per device, which is one per thread here. The scheduler, the
//! radix tree and the plugins then stay in one process with no step
//! broadcast over sockets.
//!
//! Failure: a rank whose step fails aborts the group's collectives, so the
//! ranks waiting for it in an all-reduce fail too instead of waiting forever;
//! once every rank has answered, the group is recovered and the step's error
//! (the failing rank's, not the others' "aborted") is returned. A rank thread
//! that dies (panics) breaks the runner: every later step fails at once.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::config::ModelConfig;
use super::loader::LoadedModel;
use super::runner::Launched;
use super::runner::{ModelRunner, Runner, RunnerOptions};
use super::tp::TpShard;
use super::ModelError;
use crate::backend::comm::{Communicator, Group, ThreadGroup};
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, BackendError};
use crate::batch::{StepInput, StepOutput};

enum Cmd {
    Launch(Arc<StepInput>),
    Ready,
    Finish,
    Logits(Arc<StepInput>),
}

enum Reply {
    Launched(Launched),
    Ready(bool),
    Step(StepOutput),
    Logits(Vec<Vec<f32>>),
}

type Answer = Result<Reply, ModelError>;

/// [`ModelRunner`] over `world` rank threads.
pub struct TpRunner {
    cmds: Vec<Sender<Cmd>>,
    answers: Vec<Receiver<Answer>>,
    threads: Vec<JoinHandle<()>>,
    /// Any rank's handle: abort and recover act on the whole group.
    comm: Arc<dyn Group>,
    cfg: ModelConfig,
    page_size: u32,
    num_pages: u32,
    device_name: &'static str,
    /// Why the runner cannot run steps any more (a rank is gone).
    broken: Option<String>,
}

/// A rank that panics must not leave the others blocked in an all-reduce.
struct AbortOnPanic(Arc<dyn Group>);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort("its thread panicked");
        }
    }
}

fn serve<B: Backend>(
    mut runner: Runner<B>,
    comm: Arc<dyn Group>,
    cmds: Receiver<Cmd>,
    answers: Sender<Answer>,
) {
    let _guard = AbortOnPanic(comm.clone());
    for cmd in cmds {
        let a = match cmd {
            Cmd::Launch(input) => runner.launch(&input).map(Reply::Launched),
            Cmd::Ready => Ok(Reply::Ready(runner.ready())),
            Cmd::Finish => runner.finish().map(Reply::Step),
            Cmd::Logits(input) => runner.logits(&input).map(Reply::Logits),
        };
        if let Err(e) = &a {
            comm.abort(&e.to_string());
        }
        if answers.send(a).is_err() {
            break;
        }
    }
}

fn is_aborted(e: &ModelError) -> bool {
    matches!(e, ModelError::Backend(BackendError::Aborted(_)))
}

impl TpRunner {
    /// One rank per communicator of `comms` (rank `i` must be `comms[i]`),
    /// each on its own thread with the backend `make_backend` builds for it
    /// (which must route [`Backend::all_reduce`] through that communicator).
    /// The ranks load their shards in parallel; the first rank's error, if
    /// any, is returned.
    pub fn new<B, G, F>(
        model: &LoadedModel,
        comms: Vec<G>,
        num_pages: u32,
        page_size: u32,
        opts: &RunnerOptions,
        make_backend: F,
    ) -> Result<Self, ModelError>
    where
        B: Backend,
        G: Group + Clone + 'static,
        F: Fn(G) -> Result<B, ModelError> + Sync,
    {
        let world = comms.len();
        TpShard::check(&model.config, world)?;
        if let Some((i, c)) = comms
            .iter()
            .enumerate()
            .find(|(i, c)| c.rank() != *i || c.world() != world)
        {
            return Err(ModelError::InvalidInput(format!(
                "communicator {i} says it is rank {} of {}, expected rank {i} of {world}",
                c.rank(),
                c.world()
            )));
        }
        let opts = RunnerOptions {
            tp: 1,
            ..opts.clone()
        };
        // Loaded on scoped threads because they borrow `model`; the runners
        // then move to threads of their own that outlive this call.
        let runners: Vec<Result<Runner<B>, ModelError>> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .map(|comm| {
                    let (make_backend, opts) = (&make_backend, &opts);
                    s.spawn(move || {
                        let shard = TpShard::new(&model.config, comm.rank(), world)?;
                        let b = make_backend(comm.clone())?;
                        Runner::with_shard(b, model, shard, num_pages, page_size, opts)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ModelError::InvalidInput(
                            "a rank panicked while loading its shard".into(),
                        ))
                    })
                })
                .collect()
        });
        let runners = runners.into_iter().collect::<Result<Vec<_>, _>>()?;
        let (page_size, num_pages, device_name) = (
            runners[0].page_size(),
            runners[0].num_pages(),
            runners[0].device_name(),
        );
        let mut r = TpRunner {
            cmds: Vec::new(),
            answers: Vec::new(),
            threads: Vec::new(),
            comm: Arc::new(comms[0].clone()),
            cfg: model.config.clone(),
            page_size,
            num_pages,
            device_name,
            broken: None,
        };
        for (runner, comm) in runners.into_iter().zip(comms) {
            let (cmd_tx, cmd_rx) = channel();
            let (ans_tx, ans_rx) = channel();
            let t = std::thread::Builder::new()
                .name(format!("tp-rank-{}", comm.rank()))
                .spawn(move || serve(runner, Arc::new(comm), cmd_rx, ans_tx))
                .map_err(|e| ModelError::InvalidInput(format!("spawning a rank thread: {e}")))?;
            r.cmds.push(cmd_tx);
            r.answers.push(ans_rx);
            r.threads.push(t);
        }
        Ok(r)
    }

    /// Ranks in the group.
    pub fn world(&self) -> usize {
        self.threads.len()
    }

    /// Run `cmd` on every rank; rank 0's answer once all have answered.
    fn all(&mut self, cmd: impl Fn() -> Cmd) -> Result<Reply, ModelError> {
        if let Some(why) = &self.broken {
            return Err(broken(why));
        }
        let mut sent = Vec::with_capacity(self.cmds.len());
        for (rank, tx) in self.cmds.iter().enumerate() {
            if tx.send(cmd()).is_ok() {
                sent.push(rank);
            } else {
                // Those that got the step would wait for this one.
                self.comm.abort(&format!("rank {rank} is gone"));
                self.broken = Some(format!("rank {rank}'s thread stopped"));
            }
        }
        let mut answers = Vec::with_capacity(sent.len());
        for rank in sent {
            let a = match self.answers[rank].recv() {
                Ok(a) => a,
                Err(_) => {
                    let why = format!("rank {rank}'s thread stopped");
                    self.broken = Some(why.clone());
                    Err(broken(&why))
                }
            };
            answers.push(a);
        }
        if let Some(why) = &self.broken {
            // Prefer the failing rank's own error if one answered.
            let cause = answers
                .into_iter()
                .filter_map(Result::err)
                .find(|e| !is_aborted(e));
            return Err(cause.unwrap_or_else(|| broken(why)));
        }
        if answers.iter().any(Result::is_err) {
            if let Err(e) = self.comm.recover() {
                self.broken = Some(format!("the group did not recover: {e}"));
            }
            let mut errs: Vec<ModelError> = answers.into_iter().filter_map(Result::err).collect();
            let i = errs.iter().position(|e| !is_aborted(e)).unwrap_or(0);
            return Err(errs.swap_remove(i));
        }
        let mut answers = answers.into_iter().map(|a| a.ok());
        let first = answers.next().flatten();
        // Ranks that sampled different tokens would feed different tokens to
        // their next steps; that is a broken all-reduce, not a result.
        if let Some(Reply::Step(out0)) = &first {
            for (rank, a) in answers.enumerate() {
                if let Some(Reply::Step(out)) = a {
                    let toks =
                        |o: &StepOutput| o.outputs.iter().map(|s| s.token).collect::<Vec<_>>();
                    if toks(&out) != toks(out0) {
                        let why = format!(
                            "rank {} sampled {:?}, rank 0 sampled {:?}",
                            rank + 1,
                            toks(&out),
                            toks(out0)
                        );
                        self.broken = Some(why.clone());
                        return Err(broken(&why));
                    }
                }
            }
        }
        first.ok_or_else(|| broken("rank 0 gave no answer"))
    }
}

fn broken(why: &str) -> ModelError {
    ModelError::Backend(BackendError::Device(format!(
        "tensor-parallel runner is broken: {why}"
    )))
}

impl ModelRunner for TpRunner {
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError> {
        match self.launch(input)? {
            Launched::Done(out) => Ok(out),
            Launched::Pending => self.finish(),
        }
    }

    fn launch(&mut self, input: &StepInput) -> Result<Launched, ModelError> {
        let input = Arc::new(input.clone());
        match self.all(|| Cmd::Launch(input.clone()))? {
            Reply::Launched(l) => Ok(l),
            _ => Err(broken("a rank answered a launch with something else")),
        }
    }

    fn ready(&self) -> bool {
        // Rank 0 stands for all: the ranks run the same step in lockstep
        // and `finish` waits for every one anyway. A rank that cannot
        // answer is "ready", so that `finish` runs and reports it.
        if self.broken.is_some() || self.cmds[0].send(Cmd::Ready).is_err() {
            return true;
        }
        match self.answers[0].recv() {
            Ok(Ok(Reply::Ready(r))) => r,
            _ => true,
        }
    }

    fn finish(&mut self) -> Result<StepOutput, ModelError> {
        match self.all(|| Cmd::Finish)? {
            Reply::Step(out) => Ok(out),
            _ => Err(broken("a rank answered finish with something else")),
        }
    }

    fn logits(&mut self, input: &StepInput) -> Result<Vec<Vec<f32>>, ModelError> {
        let input = Arc::new(input.clone());
        match self.all(|| Cmd::Logits(input.clone()))? {
            Reply::Logits(l) => Ok(l),
            _ => Err(broken("a rank answered logits with something else")),
        }
    }

    fn page_size(&self) -> u32 {
        self.page_size
    }

    fn num_pages(&self) -> u32 {
        self.num_pages
    }

    fn vocab_size(&self) -> u32 {
        self.cfg.vocab_size() as u32
    }

    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn device_name(&self) -> &'static str {
        self.device_name
    }
}

impl Drop for TpRunner {
    fn drop(&mut self) {
        // Closing the command channels ends the rank loops.
        self.cmds.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `world` CPU ranks as threads of this process, meeting in an in-memory
/// all-reduce ([`ThreadGroup`]): the sharded math without GPUs.
pub fn cpu_threads(
    model: &LoadedModel,
    world: usize,
    num_pages: u32,
    page_size: u32,
) -> Result<TpRunner, ModelError> {
    TpShard::check(&model.config, world)?;
    let comms = ThreadGroup::ranks(world)
        .into_iter()
        .map(|c| Arc::new(c) as Arc<dyn Communicator>)
        .collect();
    TpRunner::new(
        model,
        comms,
        num_pages,
        page_size,
        &RunnerOptions {
            cuda_graph_max_bs: 0,
            tp: world,
        },
        |comm| Ok(CpuBackend::new().with_communicator(comm)),
    )
}

/// The devices of `world` GPU ranks, `first..first + world`, where `first`
/// is the device a one-GPU run would use (`MINISGL_CUDA_DEVICE`, default
/// 0); an error naming the count when fewer are visible.
pub fn gpu_ordinals(world: usize) -> Result<Vec<usize>, ModelError> {
    use crate::backend::cuda::{device, CudaOptions};
    let first = CudaOptions::default().ordinal;
    let visible = device::device_count().map_err(|e| ModelError::Backend(e.into()))?;
    if first + world > visible {
        return Err(super::tp::TpError::TooFewGpus {
            world,
            first,
            visible,
        }
        .into());
    }
    Ok((first..first + world).collect())
}

/// `opts.tp` GPUs, one rank thread each, summing through NCCL: devices
/// `first..first + tp`, where `first` is the device a one-GPU run would use
/// (`MINISGL_CUDA_DEVICE`, default 0).
pub fn cuda_ranks(
    model: &LoadedModel,
    num_pages: u32,
    page_size: u32,
    opts: &RunnerOptions,
) -> Result<TpRunner, ModelError> {
    use crate::backend::cuda::{nccl, CudaBackend, CudaOptions};
    let world = opts.tp;
    TpShard::check(&model.config, world)?;
    let dev_err = |e: crate::backend::cuda::CudaError| ModelError::Backend(e.into());
    let base = CudaOptions::default();
    let ordinals = gpu_ordinals(world)?;
    let t0 = std::time::Instant::now();
    let ranks = nccl::init_group(&ordinals).map_err(dev_err)?;
    tracing::info!(
        "NCCL {} group of {world} GPUs (devices {ordinals:?}) in {:.2} s",
        nccl::version().unwrap_or(0),
        t0.elapsed().as_secs_f64()
    );
    TpRunner::new(model, ranks, num_pages, page_size, opts, |rank| {
        CudaBackend::for_rank(&base, rank).map_err(dev_err)
    })
}
