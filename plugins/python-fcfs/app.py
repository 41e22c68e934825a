"""First-come-first-served scheduling with chunked prefill, in Python.

A line-by-line port of the default Rust policy (plugins/policies/src/fcfs.rs),
built into a Wasm component with componentize-py by build.sh. The host's
differential test (tests/plugin_lang_diff.rs) checks that both make the same
decision on thousands of seeded inputs, so keep the two in step.

Each step:
1. Prefill first: waiting requests that already hold part of their input
   (computed_len > 0) continue first, then new ones, each group in arrival
   order. Every prefilled request takes a running slot. A request gets
   min(remaining input, tokens left) tokens; one whose pages do not fit stops
   the scan (strict FCFS).
2. Otherwise every running request decodes; if their new pages do not fit,
   the most recently started ones that need a page are preempted.
"""

from typing import List

import wit_world
from wit_world.imports.types import Budget, PrefillChunk, RequestView, ScheduleDecision


def remaining_prefill(r: RequestView) -> int:
    """Input tokens that still need a forward pass (cached prefix excluded)."""
    return max(0, r.prompt_len - max(r.computed_len, r.prefix_hit_len))


def pages_for_chunk(r: RequestView, tokens: int, page_size: int) -> int:
    """New pages a chunk of `tokens` needs beyond those the request holds."""
    page_size = max(page_size, 1)
    computed = max(r.computed_len, r.prefix_hit_len)
    total = -(-(computed + tokens) // page_size)
    return max(0, total - r.pages_held)


def pages_for_decode(r: RequestView, page_size: int) -> int:
    """One new page when the request's last page is full."""
    return 1 if r.computed_len % max(page_size, 1) == 0 else 0


def plan_prefill(waiting: List[RequestView], running: int, budget: Budget) -> List[PrefillChunk]:
    pages_left = budget.free_pages + budget.evictable_pages
    tokens_left = budget.max_prefill_tokens
    slots_left = max(0, budget.max_running - running)
    ordered = [r for r in waiting if r.computed_len > 0] + [r for r in waiting if r.computed_len == 0]
    prefill = []
    for r in ordered:
        if tokens_left == 0 or slots_left == 0:
            break
        remaining = remaining_prefill(r)
        if remaining == 0:
            continue
        tokens = min(remaining, tokens_left)
        pages = pages_for_chunk(r, tokens, budget.page_size)
        if pages > pages_left:
            break
        pages_left -= pages
        tokens_left -= tokens
        slots_left -= 1
        prefill.append(PrefillChunk(id=r.id, tokens=tokens))
    return prefill


def plan_decode(running: List[RequestView], budget: Budget) -> ScheduleDecision:
    pages_left = budget.free_pages + budget.evictable_pages
    needs = [pages_for_decode(r, budget.page_size) > 0 for r in running]
    excess = max(0, sum(needs) - pages_left)
    preempted = [False] * len(running)
    for i in range(len(running) - 1, -1, -1):
        if excess == 0:
            break
        if needs[i]:
            preempted[i] = True
            excess -= 1
    decode = [r.id for r, out in zip(running, preempted) if not out]
    preempt = [r.id for r, out in zip(running, preempted) if out]
    return ScheduleDecision(prefill=[], decode=decode, preempt=preempt)


class WitWorld(wit_world.WitWorld):
    def name(self) -> str:
        return "fcfs-python"

    def schedule(self, waiting: List[RequestView], running: List[RequestView], budget: Budget) -> ScheduleDecision:
        prefill = plan_prefill(waiting, len(running), budget)
        if prefill:
            return ScheduleDecision(prefill=prefill, decode=[], preempt=[])
        return plan_decode(running, budget)
