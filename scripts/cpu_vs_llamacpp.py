"""The measuring half of scripts/cpu-vs-llamacpp.sh: minisgl's CPU backend and
llama.cpp on one GGUF, one machine, one minute.

1 stream:   llama-bench -p P -n N -t T (its own random tokens) and
            minisgl-host generate --json (P prompt ids, N new tokens, EOS ignored),
            each RUNS times; the median of prefill and decode tok/s.
S streams:  llama-server -np S and minisgl-host serve, each sent the same S
            distinct prompts at once (N tokens each, EOS ignored, greedy);
            aggregate = all generated tokens / wall time from the first send to
            the last answer, and the median per-request decode rate.

PAIRS=N (default 0) instead alternates the engines, which is the fair way on
a shared machine whose load drifts: N times llama-bench -r 1 then one minisgl
generate (1 stream), then SERVER_PAIRS (default 1) times llama-server then
minisgl serve (S streams); it reports min / median / max of each and the
minisgl/llama.cpp ratio pair by pair, with the load average before each pair.

Writes a Markdown table to stdout and JSON to target/llamacpp/results.json.
"""

import concurrent.futures as cf
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA = Path(os.environ.get("LLAMA_BIN", ROOT / "target" / "llamacpp" / "build" / "bin"))
MODEL = Path(os.environ.get("MODEL", ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
MINISGL = Path(os.environ.get("MINISGL", ROOT / "target" / "release" / "minisgl-host"))
THREADS = int(os.environ.get("THREADS", "2"))
STREAMS = int(os.environ.get("STREAMS", "16"))
PROMPT = int(os.environ.get("PROMPT_TOKENS", "128"))
NEW = int(os.environ.get("NEW_TOKENS", "128"))
RUNS = int(os.environ.get("RUNS", "3"))
PAIRS = int(os.environ.get("PAIRS", "0"))
SERVER_PAIRS = int(os.environ.get("SERVER_PAIRS", "1"))
# CPUSET=0,1 pins both engines to those cores (taskset), e.g. on a bigger machine.
PIN = ["taskset", "-c", os.environ["CPUSET"]] if os.environ.get("CPUSET") else []


def run(cmd, **kw):
    print("$ " + " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, capture_output=True, text=True, **kw)


def llama_bench(runs=RUNS):
    out = run(PIN + [LLAMA / "llama-bench", "-m", MODEL, "-p", PROMPT, "-n", NEW, "-t", THREADS,
               "-r", runs, "-o", "json"]).stdout
    rows = json.loads(out)
    pp = next(r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return {"prefill_tok_s": pp["avg_ts"], "decode_tok_s": tg["avg_ts"],
            "build": rows[0].get("build_commit", "?"), "cpu": rows[0].get("cpu_info", "?")}


def minisgl_generate(runs=RUNS):
    ids = ",".join(str(1000 + (i * 37) % 20000) for i in range(PROMPT))
    env = dict(os.environ, RAYON_NUM_THREADS=str(THREADS))
    pre, dec = [], []
    for _ in range(runs):
        out = run(PIN + [MINISGL, "generate", "--model", MODEL, "--device", "cpu", "--prompt-ids", ids,
                   "--max-new-tokens", NEW, "--ignore-eos", "--json"], env=env).stdout
        j = json.loads(out)
        pre.append(PROMPT / j["prefill_s"])
        dec.append(j["decode_tokens_per_s"])
    return {"prefill_tok_s": statistics.median(pre), "decode_tok_s": statistics.median(dec)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(base, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become healthy")


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def prompts():
    # Distinct openings (no shared prefix beyond a few tokens), ~PROMPT tokens each.
    words = ("river stone lantern orchard violet copper meadow harbor signal "
             "thunder velvet compass glacier ember willow falcon").split()
    out = []
    for i in range(STREAMS):
        body = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(PROMPT - 12))
        out.append(f"Story {i + 1}. Once upon a time {body}")
    return out


def concurrent(send):
    ps = prompts()
    t0 = time.time()
    with cf.ThreadPoolExecutor(len(ps)) as ex:
        results = list(ex.map(send, ps))
    wall = time.time() - t0
    toks = sum(r[0] for r in results)
    return {"streams": len(ps), "generated": toks, "wall_s": wall, "aggregate_tok_s": toks / wall,
            "median_stream_decode_tok_s": statistics.median(r[1] for r in results)}


def serve(cmd, base):
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_health(base, proc)
    except Exception:
        proc.kill()
        raise RuntimeError(proc.stderr.read().decode()[-3000:])
    return proc


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def llama_server():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    ctx = STREAMS * (PROMPT + NEW + 64)
    proc = serve(PIN + [LLAMA / "llama-server", "-m", MODEL, "-np", STREAMS, "-c", ctx, "-t", THREADS,
                  "-tb", THREADS, "--port", port, "--host", "127.0.0.1", "--no-webui"], base)
    try:
        def send(p):
            r = post(base + "/completion", {"prompt": p, "n_predict": NEW, "ignore_eos": True,
                                            "temperature": 0, "cache_prompt": False})
            return r["tokens_predicted"], r["timings"]["predicted_per_second"]
        return concurrent(send)
    finally:
        stop(proc)


def minisgl_server():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, RAYON_NUM_THREADS=str(THREADS), RUST_LOG="warn")
    proc = subprocess.Popen(PIN + [str(MINISGL), "--model", str(MODEL), "--device", "cpu", "--port", str(port),
                             "--served-model-name", "m"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        wait_health(base, proc)
    except Exception:
        proc.kill()
        raise RuntimeError(proc.stderr.read().decode()[-3000:])
    try:
        def send(p):
            t0 = time.time()
            r = post(base + "/v1/completions", {"model": "m", "prompt": p, "max_tokens": NEW,
                                               "ignore_eos": True, "temperature": 0})
            n = r["usage"]["completion_tokens"]
            return n, n / (time.time() - t0)
        return concurrent(send)
    finally:
        stop(proc)


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def spread(xs):
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "all": xs}


def alternate():
    """PAIRS alternating 1-stream pairs, SERVER_PAIRS alternating S-stream pairs."""
    one = []
    for _ in range(PAIRS):
        load = os.getloadavg()[0]
        lb, mg = llama_bench(1), minisgl_generate(1)
        one.append({"load": load, "llama": lb, "minisgl": mg})
    many = []
    for _ in range(SERVER_PAIRS):
        load = os.getloadavg()[0]
        ls, ms = llama_server(), minisgl_server()
        many.append({"load": load, "llama": ls, "minisgl": ms})
    out = {"pairs": one, "server_pairs": many}
    rows = []
    for key, label in [("prefill_tok_s", f"1 stream prefill ({PROMPT} tokens), tok/s"),
                       ("decode_tok_s", f"1 stream decode ({NEW} tokens), tok/s")]:
        l, m = [p["llama"][key] for p in one], [p["minisgl"][key] for p in one]
        r = [b / a for a, b in zip(l, m)]
        out[key] = {"llama": spread(l), "minisgl": spread(m), "ratio": spread(r)}
        rows.append((label, out[key]))
    for key, label in [("aggregate_tok_s", f"{STREAMS} streams, aggregate generated tok/s"),
                       ("wall_s", f"{STREAMS} streams, wall time for all, s")]:
        if not many:
            break
        l, m = [p["llama"][key] for p in many], [p["minisgl"][key] for p in many]
        r = [b / a for a, b in zip(l, m)]
        out[key] = {"llama": spread(l), "minisgl": spread(m), "ratio": spread(r)}
        rows.append((label, out[key]))
    print("| | llama.cpp min / median / max | minisgl min / median / max | minisgl/llama.cpp per pair, min / median / max |")
    print("|---|---:|---:|---:|")
    f = lambda d: f"{d['min']:.1f} / {d['median']:.1f} / {d['max']:.1f}"
    g = lambda d: f"{d['min']:.2f} / {d['median']:.2f} / {d['max']:.2f}"
    for label, d in rows:
        print(f"| {label} | {f(d['llama'])} | {f(d['minisgl'])} | {g(d['ratio'])} |")
    print("\nPairs (load average before; llama.cpp / minisgl decode tok/s): " + "; ".join(
        f"{p['load']:.1f}: {p['llama']['decode_tok_s']:.1f} / {p['minisgl']['decode_tok_s']:.1f}" for p in one))
    print("Server pairs (load; llama.cpp / minisgl aggregate tok/s): " + "; ".join(
        f"{p['load']:.1f}: {p['llama']['aggregate_tok_s']:.1f} / {p['minisgl']['aggregate_tok_s']:.1f}"
        for p in many))
    return out


def main():
    res = {"model": str(MODEL.relative_to(ROOT) if MODEL.is_relative_to(ROOT) else MODEL),
           "threads": THREADS, "prompt_tokens": PROMPT, "new_tokens": NEW, "runs": RUNS,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "cpuset": os.environ.get("CPUSET"), "cpu": cpu_name(), "llama_bin": str(LLAMA),
           "minisgl_kernels": os.environ.get("MINISGL_CPU_KERNELS", "detected"),
           "load_avg_before": os.getloadavg()}
    if PAIRS > 0:
        res["alternating"] = alternate()
        res["load_avg_after"] = os.getloadavg()
        (ROOT / "target" / "llamacpp").mkdir(parents=True, exist_ok=True)
        (ROOT / "target" / "llamacpp" / "results.json").write_text(json.dumps(res, indent=2))
        print(f"\nCPU: {res['cpu']}; cores: {res['cpuset'] or 'all'}; threads {THREADS}; "
              f"load average before/after: {res['load_avg_before']} / {res['load_avg_after']}; "
              f"llama.cpp from {LLAMA}")
        return
    res["llama_bench"] = llama_bench()
    res["minisgl_generate"] = minisgl_generate()
    res["llama_server"] = llama_server()
    res["minisgl_server"] = minisgl_server()
    res["load_avg_after"] = os.getloadavg()
    (ROOT / "target" / "llamacpp").mkdir(parents=True, exist_ok=True)
    (ROOT / "target" / "llamacpp" / "results.json").write_text(json.dumps(res, indent=2))
    lb, mg, ls, ms = res["llama_bench"], res["minisgl_generate"], res["llama_server"], res["minisgl_server"]
    print(f"| | llama.cpp | minisgl |\n|---|---:|---:|")
    print(f"| 1 stream prefill ({PROMPT} tokens), tok/s | {lb['prefill_tok_s']:.0f} | {mg['prefill_tok_s']:.0f} |")
    print(f"| 1 stream decode ({NEW} tokens), tok/s | {lb['decode_tok_s']:.1f} | {mg['decode_tok_s']:.1f} |")
    print(f"| {STREAMS} streams, aggregate generated tok/s (wall) | {ls['aggregate_tok_s']:.1f} | {ms['aggregate_tok_s']:.1f} |")
    print(f"| {STREAMS} streams, median per-stream tok/s | {ls['median_stream_decode_tok_s']:.1f} | {ms['median_stream_decode_tok_s']:.1f} |")
    print(f"| {STREAMS} streams, wall time for all, s | {ls['wall_s']:.1f} | {ms['wall_s']:.1f} |")
    print(f"\nCPU: {res['cpu']}; cores: {res['cpuset'] or 'all'}; threads {THREADS}; "
          f"load average before/after: {res['load_avg_before']} / {res['load_avg_after']}; "
          f"llama.cpp from {LLAMA}")


if __name__ == "__main__":
    main()
