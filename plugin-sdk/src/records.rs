//! The WIT records of `wit/types.wit`, field by field, written once.
//!
//! The guest's wit-bindgen types and the host's wasmtime `bindgen!` types are
//! different Rust types with the same fields as the plain types in
//! [`crate::types`]. [`wit_conversions!`](crate::wit_conversions) expands the
//! `From` impls both ways for a module of either kind, so a field added to
//! the WIT is listed here once (the compiler names every side that misses it).

/// Implements `From` between every plain record of this crate and the record
/// of the same name in module `$w` (a `use … as w;` alias in scope), in both
/// directions. Fields are `copy` (same type both sides), `into` (a nested
/// record) or `list` (a list of records). Used by this crate's guest side
/// and by the host's bindings; not a stable interface.
#[doc(hidden)]
#[macro_export]
macro_rules! wit_conversions {
    ($w:ident) => {
        $crate::wit_conversions!(@record $w RequestView {
            copy: id, arrival_us, prompt_len, prefix_hit_len, computed_len, generated_len,
                max_new_tokens, priority, client_id, deadline_us, pages_held, last_scheduled_us;
            into: ; list: ;
        });
        $crate::wit_conversions!(@record $w Budget {
            copy: max_prefill_tokens, max_running, free_pages, evictable_pages, page_size, now_us,
                step;
            into: ; list: ;
        });
        $crate::wit_conversions!(@record $w PrefillChunk { copy: id, tokens; into: ; list: ; });
        $crate::wit_conversions!(@record $w ScheduleDecision {
            copy: decode, preempt; into: ; list: prefill;
        });
        $crate::wit_conversions!(@record $w CacheLeaf {
            copy: node, depth, tokens, pages, last_access_us, hit_count, created_us, priority;
            into: ; list: ;
        });
        $crate::wit_conversions!(@record $w SamplingParams {
            copy: temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty,
                repetition_penalty, seed;
            into: ; list: ;
        });
        $crate::wit_conversions!(@record $w TokenBias { copy: token, bias; into: ; list: ; });
        $crate::wit_conversions!(@record $w SampleRequest {
            copy: id, generated_len, prompt_len, entropy; into: params; list: logit_bias;
        });
        $crate::wit_conversions!(@record $w SamplePlan {
            copy: id, seed, allowed_tokens, pick_from_top; into: params; list: logit_bias;
        });
        $crate::wit_conversions!(@record $w Candidate { copy: token, logprob; into: ; list: ; });
        $crate::wit_conversions!(@record $w CandidateList {
            copy: id, seed; into: ; list: candidates;
        });
    };
    (@record $w:ident $name:ident {
        copy: $($c:ident),* ; into: $($i:ident),* ; list: $($l:ident),* ;
    }) => {
        impl ::core::convert::From<$w::$name> for $crate::types::$name {
            fn from(x: $w::$name) -> Self {
                $crate::types::$name {
                    $($c: x.$c,)*
                    $($i: x.$i.into(),)*
                    $($l: x.$l.into_iter().map(::core::convert::Into::into).collect(),)*
                }
            }
        }
        impl ::core::convert::From<$crate::types::$name> for $w::$name {
            fn from(x: $crate::types::$name) -> Self {
                $w::$name {
                    $($c: x.$c,)*
                    $($i: x.$i.into(),)*
                    $($l: x.$l.into_iter().map(::core::convert::Into::into).collect(),)*
                }
            }
        }
    };
}
