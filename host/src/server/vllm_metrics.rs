//! vLLM-named metrics beside the `minisgl_*` ones, so the Kubernetes
//! Gateway API Inference Extension's endpoint picker (and dashboards built
//! for vLLM) read minisgl without remapping. Names, types and label sets
//! follow vLLM v1's `/metrics` (prometheus_client text format: counters are
//! exposed with their `_total` suffix):
//!
//! - `vllm:num_requests_running`, `vllm:num_requests_waiting` (gauges);
//! - `vllm:kv_cache_usage_perc` (gauge in [0, 1]: pages held by requests,
//!   i.e. not free and not evictable cache, over all pages — as vLLM counts
//!   a cached block nobody references as free), and its pre-v1 name
//!   `vllm:gpu_cache_usage_perc` that older pickers read;
//! - `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`
//!   (counters, in prompt tokens, at first admission);
//! - `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
//!   `vllm:num_preemptions_total` (counters);
//! - `vllm:lora_requests_info` (no adapters: `max_lora="0"`, empty lists;
//!   value the time of the scrape, as vLLM's is the last update time);
//! - `vllm:cache_config_info` (value 1; `block_size` and `num_gpu_blocks`
//!   are what the picker's prefix scorer reads).

use std::fmt::Write;

use super::metrics::label;
use super::state::{unix_now, AppState};
use crate::engine::EngineMetrics;

/// Fraction of KV pages held by requests (0 when the pool is empty).
pub fn kv_usage(m: &EngineMetrics) -> f64 {
    if m.kv_pages_total == 0 {
        return 0.0;
    }
    let held = m
        .kv_pages_total
        .saturating_sub(m.kv_pages_free + m.kv_pages_evictable);
    held as f64 / m.kv_pages_total as f64
}

/// Appends the vLLM-named families for `m` to `out`.
pub fn render(state: &AppState, m: &EngineMetrics, out: &mut String) {
    let base = format!(
        "model_name=\"{}\",engine=\"0\"",
        label(&state.limits.model_name)
    );
    let mut one = |name: &str, kind: &str, help: &str, labels: &str, v: f64| {
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{labels} {v}"
        );
    };
    one(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        &base,
        m.running as f64,
    );
    one(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        &base,
        m.queue_len as f64,
    );
    let usage = kv_usage(m);
    one(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        &base,
        usage,
    );
    one(
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "KV-cache usage (pre-v1 name). 1 means 100 percent usage.",
        &base,
        usage,
    );
    one(
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        &base,
        m.cache_prompt_tokens as f64,
    );
    one(
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        &base,
        m.cache_hit_tokens as f64,
    );
    one(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        &base,
        m.prompt_tokens as f64,
    );
    one(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        &base,
        m.output_tokens as f64,
    );
    one(
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemption from the engine.",
        &base,
        m.preemptions as f64,
    );
    one(
        "vllm:lora_requests_info",
        "gauge",
        "Running stats on lora requests.",
        "max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"",
        unix_now() as f64,
    );
    let cache = format!(
        "block_size=\"{}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"True\",cache_dtype=\"auto\"",
        state.config.page_size, m.kv_pages_total
    );
    one(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
        &cache,
        1.0,
    );
    one(
        "minisgl_kv_cache_usage",
        "gauge",
        "KV pages held by requests / all KV pages (0..1).",
        "",
        usage,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_usage_counts_only_pages_requests_hold() {
        let m = EngineMetrics {
            kv_pages_total: 100,
            kv_pages_free: 50,
            kv_pages_cached: 30,
            kv_pages_evictable: 20,
            ..EngineMetrics::default()
        };
        // 100 - 50 free - 20 evictable = 30 held (10 of them locked cache).
        assert_eq!(kv_usage(&m), 0.3);
        assert_eq!(kv_usage(&EngineMetrics::default()), 0.0);
    }
}
