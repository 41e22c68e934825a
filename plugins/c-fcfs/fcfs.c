// First-come-first-served scheduling with chunked prefill, in C.
//
// A line-by-line port of the default Rust policy (plugins/policies/src/fcfs.rs)
// against the C bindings wit-bindgen generates for the `scheduler` world
// (build.sh generates them into the build folder as scheduler.h/.c). The
// host's differential test (tests/plugin_lang_diff.rs) checks that both make
// the same decision on thousands of seeded inputs, so keep the two in step.
//
// Ownership, as wit-bindgen's C ABI has it: the argument lists are allocated
// for us and we free them; the returned lists are malloc'd here and freed by
// the generated post-return function after the host has copied them.
//
// Each step:
// 1. Prefill first: waiting requests that already hold part of their input
//    (computed_len > 0) continue first, then new ones, each group in arrival
//    order. Every prefilled request takes a running slot. A request gets
//    min(remaining input, tokens left) tokens; one whose pages do not fit stops
//    the scan (strict FCFS).
// 2. Otherwise every running request decodes; if their new pages do not fit,
//    the most recently started ones that need a page are preempted.

#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

typedef minisgl_plugin_types_request_view_t view_t;
typedef minisgl_plugin_types_prefill_chunk_t chunk_t;

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

// Input tokens that still need a forward pass (cached prefix excluded).
static uint64_t remaining_prefill(const view_t *r) {
    uint64_t done = max_u64(r->computed_len, r->prefix_hit_len);
    return r->prompt_len > done ? r->prompt_len - done : 0;
}

// New pages a chunk of `tokens` needs beyond those the request holds.
static uint64_t pages_for_chunk(const view_t *r, uint64_t tokens, uint32_t page_size) {
    uint64_t size = page_size > 0 ? page_size : 1;
    uint64_t computed = max_u64(r->computed_len, r->prefix_hit_len);
    uint64_t total = (computed + tokens + size - 1) / size;
    return total > r->pages_held ? total - r->pages_held : 0;
}

static int needs_decode_page(const view_t *r, uint32_t page_size) {
    uint32_t size = page_size > 0 ? page_size : 1;
    return r->computed_len % size == 0;
}

// Considers `r` for a chunk; returns 0 when the scan must stop.
static int admit(const view_t *r, uint64_t *pages_left, uint64_t *tokens_left, uint64_t *slots_left,
                 uint32_t page_size, chunk_t *out, size_t *n) {
    if (*tokens_left == 0 || *slots_left == 0) return 0;
    uint64_t remaining = remaining_prefill(r);
    if (remaining == 0) return 1;
    uint64_t tokens = min_u64(remaining, *tokens_left);
    uint64_t pages = pages_for_chunk(r, tokens, page_size);
    if (pages > *pages_left) return 0;
    *pages_left -= pages;
    *tokens_left -= tokens;
    *slots_left -= 1;
    out[*n].id = r->id;
    out[*n].tokens = (uint32_t)tokens;
    *n += 1;
    return 1;
}

static size_t plan_prefill(const scheduler_list_request_view_t *waiting, size_t running,
                           const scheduler_budget_t *b, chunk_t *out) {
    uint64_t pages_left = (uint64_t)b->free_pages + b->evictable_pages;
    uint64_t tokens_left = b->max_prefill_tokens;
    uint64_t slots_left = b->max_running > running ? b->max_running - running : 0;
    size_t n = 0;
    // Two passes keep arrival order within each group without sorting.
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < waiting->len; i++) {
            const view_t *r = &waiting->ptr[i];
            int continuing = r->computed_len > 0;
            if (continuing != (pass == 0)) continue;
            if (!admit(r, &pages_left, &tokens_left, &slots_left, b->page_size, out, &n)) return n;
        }
    }
    return n;
}

static void plan_decode(const scheduler_list_request_view_t *running, const scheduler_budget_t *b,
                        scheduler_schedule_decision_t *ret) {
    uint64_t pages_left = (uint64_t)b->free_pages + b->evictable_pages;
    size_t len = running->len;
    uint64_t needed = 0;
    for (size_t i = 0; i < len; i++) needed += needs_decode_page(&running->ptr[i], b->page_size);
    uint64_t excess = needed > pages_left ? needed - pages_left : 0;
    uint8_t *preempted = calloc(len ? len : 1, 1);
    for (size_t i = len; i > 0 && excess > 0; i--) {
        if (needs_decode_page(&running->ptr[i - 1], b->page_size)) {
            preempted[i - 1] = 1;
            excess -= 1;
        }
    }
    uint64_t *decode = malloc(sizeof(uint64_t) * (len ? len : 1));
    uint64_t *preempt = malloc(sizeof(uint64_t) * (len ? len : 1));
    size_t nd = 0, np = 0;
    for (size_t i = 0; i < len; i++) {
        if (preempted[i]) preempt[np++] = running->ptr[i].id;
        else decode[nd++] = running->ptr[i].id;
    }
    free(preempted);
    ret->decode.ptr = decode;
    ret->decode.len = nd;
    ret->preempt.ptr = preempt;
    ret->preempt.len = np;
}

void exports_scheduler_name(scheduler_string_t *ret) { scheduler_string_dup(ret, "fcfs-c"); }

void exports_scheduler_schedule(scheduler_list_request_view_t *waiting, scheduler_list_request_view_t *running,
                                scheduler_budget_t *budget, scheduler_schedule_decision_t *ret) {
    memset(ret, 0, sizeof(*ret));
    chunk_t *chunks = malloc(sizeof(chunk_t) * (waiting->len ? waiting->len : 1));
    size_t n = plan_prefill(waiting, running->len, budget, chunks);
    ret->prefill.ptr = chunks;
    ret->prefill.len = n;
    if (n == 0) plan_decode(running, budget, ret);
    scheduler_list_request_view_free(waiting);
    scheduler_list_request_view_free(running);
}
