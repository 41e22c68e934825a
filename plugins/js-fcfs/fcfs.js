// First-come-first-served scheduling with chunked prefill, in JavaScript.
//
// A line-by-line port of the default Rust policy (plugins/policies/src/fcfs.rs),
// built into a Wasm component with jco's QuickJS backend by build.sh. The host's
// differential test (tests/plugin_lang_diff.rs) checks that both make the same
// decision on thousands of seeded inputs, so keep the two in step.
//
// jco's QuickJS mapping of the WIT types: record fields are camelCase and every
// integer is a Number, u64 included (ids, times) — exact below 2^53, which the
// host's ids (counters from 1) and microsecond clocks stay under. Ids are
// echoed back untouched.
//
// Each step:
// 1. Prefill first: waiting requests that already hold part of their input
//    (computedLen > 0) continue first, then new ones, each group in arrival
//    order. Every prefilled request takes a running slot. A request gets
//    min(remaining input, tokens left) tokens; one whose pages do not fit stops
//    the scan (strict FCFS).
// 2. Otherwise every running request decodes; if their new pages do not fit,
//    the most recently started ones that need a page are preempted.

function remainingPrefill(r) {
  return Math.max(0, r.promptLen - Math.max(r.computedLen, r.prefixHitLen));
}

// New pages a chunk of `tokens` needs beyond those the request holds. The
// operands stay below 2^33, well inside a double's exact integers.
function pagesForChunk(r, tokens, pageSize) {
  const size = Math.max(pageSize, 1);
  const computed = Math.max(r.computedLen, r.prefixHitLen);
  const total = Math.ceil((computed + tokens) / size);
  return Math.max(0, total - r.pagesHeld);
}

function needsDecodePage(r, pageSize) {
  return r.computedLen % Math.max(pageSize, 1) === 0;
}

function planPrefill(waiting, running, budget) {
  let pagesLeft = budget.freePages + budget.evictablePages;
  let tokensLeft = budget.maxPrefillTokens;
  let slotsLeft = Math.max(0, budget.maxRunning - running);
  const ordered = waiting.filter((r) => r.computedLen > 0).concat(waiting.filter((r) => r.computedLen === 0));
  const prefill = [];
  for (const r of ordered) {
    if (tokensLeft === 0 || slotsLeft === 0) break;
    const remaining = remainingPrefill(r);
    if (remaining === 0) continue;
    const tokens = Math.min(remaining, tokensLeft);
    const pages = pagesForChunk(r, tokens, budget.pageSize);
    if (pages > pagesLeft) break;
    pagesLeft -= pages;
    tokensLeft -= tokens;
    slotsLeft -= 1;
    prefill.push({ id: r.id, tokens });
  }
  return prefill;
}

function planDecode(running, budget) {
  const pagesLeft = budget.freePages + budget.evictablePages;
  const needs = running.map((r) => needsDecodePage(r, budget.pageSize));
  let excess = Math.max(0, needs.filter((n) => n).length - pagesLeft);
  const preempted = running.map(() => false);
  for (let i = running.length - 1; i >= 0 && excess > 0; i--) {
    if (needs[i]) {
      preempted[i] = true;
      excess -= 1;
    }
  }
  const decode = [];
  const preempt = [];
  running.forEach((r, i) => (preempted[i] ? preempt : decode).push(r.id));
  return { prefill: [], decode, preempt };
}

export function name() {
  return "fcfs-js";
}

export function schedule(waiting, running, budget) {
  const prefill = planPrefill(waiting, running.length, budget);
  if (prefill.length > 0) return { prefill, decode: [], preempt: [] };
  return planDecode(running, budget);
}
