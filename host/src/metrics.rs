//! What a running engine counts: the metrics snapshot and the host's
//! corrections of policy decisions by cause. The scheduler fills it, the
//! engine hands it out, the server renders it.

/// Counters and gauges of a running engine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineMetrics {
    pub requests_done: u64,
    pub requests_aborted: u64,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the prefix cache (at first admission).
    pub cache_hit_tokens: u64,
    /// Prompt tokens of requests at first admission (hit-rate denominator).
    pub cache_prompt_tokens: u64,
    pub queue_len: u64,
    pub running: u64,
    pub kv_pages_total: u64,
    /// Pages owned by requests and not shared through the cache.
    pub kv_pages_used: u64,
    /// Pages held by the radix cache.
    pub kv_pages_cached: u64,
    /// Cached pages no request holds (what eviction or a flush can free).
    pub kv_pages_evictable: u64,
    /// Pages on the free list.
    pub kv_pages_free: u64,
    pub steps: u64,
    pub preemptions: u64,
    pub evicted_pages: u64,
    /// Policy decisions the host had to correct or replace (the sum of
    /// `fixups`; zero for a policy that follows the guide's rules).
    pub decision_fixups: u64,
    /// The same, by cause.
    pub fixups: DecisionFixups,
    /// Tokens computed by steps whose results were discarded (requests that
    /// stopped while already scheduled again under overlap).
    pub wasted_tokens: u64,
}

/// Why the host changed a policy's decision. Only `idle` and `stall` can
/// happen to a decision that passed validation; the others mean a policy
/// bypassed the plugin runtime's validation (or a host bug) and are kept as
/// a safety net.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixupCause {
    /// The decision did nothing while no step was in flight: the built-in
    /// FCFS answered that step instead, so an idle engine always moves.
    Idle,
    /// Nothing could run and nothing was in flight: the host preempted a
    /// request holding pages, or failed a request too large for the pool.
    Stall,
    /// Pages ran short for a validated decision (a decode preempted, a chunk
    /// shrunk).
    Pages,
    /// The loop's own check rejected a scheduling decision; the built-in
    /// answered.
    Invalid,
    /// Evictor victims the radix tree refused, or that freed nothing.
    Evictor,
    /// A sampler plan or pick the host replaced.
    Sampler,
}

impl FixupCause {
    pub const ALL: [FixupCause; 6] = [
        FixupCause::Idle,
        FixupCause::Stall,
        FixupCause::Pages,
        FixupCause::Invalid,
        FixupCause::Evictor,
        FixupCause::Sampler,
    ];

    /// The `cause` label on `minisgl_engine_decision_fixups_total`.
    pub fn label(self) -> &'static str {
        match self {
            FixupCause::Idle => "idle",
            FixupCause::Stall => "stall",
            FixupCause::Pages => "pages",
            FixupCause::Invalid => "invalid",
            FixupCause::Evictor => "evictor",
            FixupCause::Sampler => "sampler",
        }
    }
}

/// Fixup counts, one per [`FixupCause`] (indexed in `ALL` order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionFixups(pub [u64; 6]);

impl DecisionFixups {
    pub fn get(&self, cause: FixupCause) -> u64 {
        self.0[cause as usize]
    }

    pub fn bump(&mut self, cause: FixupCause) {
        self.0[cause as usize] += 1;
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl EngineMetrics {
    /// Cache hit tokens / prompt tokens at first admission.
    pub fn cache_hit_rate(&self) -> f64 {
        if self.cache_prompt_tokens == 0 {
            0.0
        } else {
            self.cache_hit_tokens as f64 / self.cache_prompt_tokens as f64
        }
    }
}
