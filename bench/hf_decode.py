#!/usr/bin/env python3
"""hf_decode.py -- the HF transformers peer of bench/sits-bench-decode: the same model shape, the same
(batch, context) grid and prefill, on the same device, with the same JSON keys. Not a test.

    python3 bench/hf_decode.py [--model DIR] [--device cuda|cpu] [--batch 1,8,32,64] [--context 128,2048]
        [--prefill 2048] [--iters N] [--warmup N] [--chunk N] [--bw-mib N] [--commit SHA] [--json FILE]

Model: LlamaForCausalLM built from DIR/config.json with random initialisation (no weights are read),
bf16, attn_implementation "sdpa", eval mode, under torch.inference_mode.

Decode row (batch B, context C): B random prompts of C tokens are prefilled into a fresh DynamicCache
(in chunks of --chunk tokens per sequence, only the last position's logits kept), then warmup + iters
single-token steps with the cache: each step feeds the greedy token of the previous step and returns
logits for all B rows; the step is timed on the host between torch.cuda.synchronize() calls.
ms/step = median (mean, min kept), tok/s = B / median. The cache grows by one position a step, as in
the sits-dist bench (step j at position C + j).
Prefill row: one forward of 1 x N random tokens into a fresh cache (logits of the last one), median
of iters. Generate row (sanity): model.generate greedy, batch 1, prompt of the first context:
(time of max_new_tokens = iters + 1 minus time of max_new_tokens = 1) / iters per token.

Floor: (parameter bytes + KV bytes read per step) / copy bandwidth, the bandwidth measured here with
a device-to-device copy of --bw-mib MiB (2 * bytes / time) -- the same definition as the C bench.

Written against torch 2.11 / transformers 5.17 (GPU machine) and checked with 5.24; handles the
forward's cache keyword under either name (past_key_values, cache).
"""
import argparse
import datetime
import inspect
import json
import os
import socket
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoConfig, DynamicCache, LlamaForCausalLM


def parse_list(s):
    v = [int(x) for x in s.split(",") if x]
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError("expected a comma list of positive integers")
    return sorted(v)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def copy_bandwidth(dev, mib):
    """2 * bytes / median time of a copy of `mib` MiB on dev (bytes/s)."""
    n = mib << 20
    a = torch.ones(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    b.copy_(a)
    sync(dev)
    t = []
    for _ in range(10):
        t0 = time.perf_counter()
        b.copy_(a)
        sync(dev)
        t.append(time.perf_counter() - t0)
    del a, b
    return 2.0 * n / statistics.median(t)


def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def build_model(model_dir, dev):
    cfg = AutoConfig.from_pretrained(model_dir)
    torch.manual_seed(0)
    with torch.device(dev):
        try:
            model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:  # transformers 4.x spelling
            model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    model = model.to(device=dev, dtype=torch.bfloat16).eval()
    return cfg, model


class Runner:
    def __init__(self, model, dev, chunk):
        self.model, self.dev, self.chunk = model, dev, chunk
        params = inspect.signature(model.forward).parameters
        # transformers >= 5.2x renames past_key_values to cache (the old name is deprecated)
        self.cache_kw = "past_key_values" if "past_key_values" in params else "cache"
        self.has_keep = "logits_to_keep" in params
        self.vocab = model.config.vocab_size

    def new_cache(self):
        try:
            return DynamicCache(config=self.model.config)
        except TypeError:
            return DynamicCache()

    def forward(self, ids, cache, keep_last):
        kw = {self.cache_kw: cache, "use_cache": True}
        if keep_last and self.has_keep:
            kw["logits_to_keep"] = 1
        return self.model(input_ids=ids, **kw).logits

    def fill(self, batch, ctx):
        """A fresh cache holding `batch` random prompts of `ctx` tokens; returns (cache, next tokens [batch, 1])."""
        cache = self.new_cache()
        ids = torch.randint(0, self.vocab, (batch, ctx), device=self.dev)
        logits = None
        for s in range(0, ctx, self.chunk):
            logits = self.forward(ids[:, s:s + self.chunk], cache, keep_last=True)
        # the cache must have been filled in place (a wrong cache keyword would leave it empty)
        assert cache.get_seq_length() == ctx, (cache.get_seq_length(), ctx)
        return cache, logits[:, -1].argmax(-1, keepdim=True)

    def decode(self, batch, ctx, warmup, iters):
        cache, tok = self.fill(batch, ctx)
        times = []
        for j in range(warmup + iters):
            sync(self.dev)
            t0 = time.perf_counter()
            logits = self.forward(tok, cache, keep_last=False)   # [batch, 1, V]
            tok = logits[:, -1].argmax(-1, keepdim=True)
            sync(self.dev)
            if j >= warmup:
                times.append(time.perf_counter() - t0)
        assert cache.get_seq_length() == ctx + warmup + iters, (cache.get_seq_length(), ctx + warmup + iters)
        del cache
        return times

    def prefill(self, n, warmup, iters):
        times = []
        for j in range(warmup + iters):
            ids = torch.randint(0, self.vocab, (1, n), device=self.dev)
            cache = self.new_cache()
            sync(self.dev)
            t0 = time.perf_counter()
            self.forward(ids, cache, keep_last=True)
            sync(self.dev)
            if j >= warmup:
                times.append(time.perf_counter() - t0)
            del cache
        return times

    def generate_per_token(self, ctx, iters):
        ids = torch.randint(0, self.vocab, (1, ctx), device=self.dev)

        def run(n_new):
            sync(self.dev)
            t0 = time.perf_counter()
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n_new,
                                      min_new_tokens=n_new, pad_token_id=0)
            sync(self.dev)
            assert out.shape[1] == ctx + n_new, out.shape
            return time.perf_counter() - t0

        run(2)  # warm-up
        t1 = statistics.median(run(1) for _ in range(3))
        tn = run(iters + 1)
        return (tn - t1) / iters


def row(kind, batch, ctx, tokens, times, floor_s):
    med = statistics.median(times)
    return {"kind": kind, "batch": batch, "context": ctx, "tokens": tokens, "ms_median": 1e3 * med,
            "ms_mean": 1e3 * statistics.fmean(times), "ms_min": 1e3 * min(times), "tok_s": tokens / med,
            "floor_ms": 1e3 * floor_s, "pct_floor": 100.0 * floor_s / med}


def print_row(r):
    extra = "  %.2f TFLOP/s" % r["tflops"] if "tflops" in r else ""
    print("%-8s %6d %8d %10.3f %10.3f %10.1f %9.3f %7.1f%%%s" % (r["kind"], r["batch"], r["context"], r["ms_median"],
          r["ms_mean"], r["tok_s"], r["floor_ms"], r["pct_floor"], extra), flush=True)


def pick_device(a, prog):
    """--device / --gpu / --threads as both peers take them: the torch device, or None (said why) without CUDA."""
    if a.device == "cuda":
        if not torch.cuda.is_available():
            print("%s: no CUDA device" % prog, file=sys.stderr)
            return None
        dev = torch.device("cuda", a.gpu)
        torch.cuda.set_device(dev)
        return dev
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    return torch.device("cpu")


def print_header(dname, load_s, wbytes, embed_bytes, kv_tok, bw, bw_mib, how):
    """What a peer prints before its rows (shared with bench/gpt_fast_decode.py): the device and sizes, the copy
    bandwidth, `how` (what a step is), then the table header."""
    print("device %s (bf16), built in %.1f s; weights %.3f GB (incl. embedding %.3f GB), KV %d B/token" %
          (dname, load_s, wbytes * 1e-9, embed_bytes * 1e-9, kv_tok))
    print("copy bandwidth %.1f GB/s (tensor copy of %d MiB, 2*bytes/time)" % (bw * 1e-9, bw_mib))
    print(how + "\n")
    print("%-8s %6s %8s %10s %10s %10s %9s %8s" % ("kind", "batch", "context", "ms_median", "ms_mean", "tok/s",
                                                 "floor_ms", "floor%"), flush=True)


def write_json(a, engine, dname, backend, wbytes, embed_bytes, kv_tok, bw, fill, load_s, rows):
    """The peer's JSON (run_decode.sh merges it with sits-bench-decode's): the same keys for every peer."""
    out = {"bench": "decode", "engine": engine, "machine": socket.gethostname(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": a.commit,
           "device": dname, "backend": backend, "model": a.model, "tp": 1, "weight_dtype": "BF16", "kv_dtype": "BF16",
           "weight_bytes": float(wbytes), "embed_bytes": float(embed_bytes), "kv_bytes_per_token": float(kv_tok),
           "copy_bw_gbs": bw * 1e-9, "fill": fill, "iters": a.iters, "warmup": a.warmup, "load_s": load_s, "rows": rows}
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("wrote %s" % a.json)


def prefill_flops(cfg, n):
    H, I, hd = cfg.hidden_size, cfg.intermediate_size, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    per_tok = 2.0 * (H * (q + 2 * kv) + q * H + H * 2 * I + I * H)
    attn = 4.0 * q * n * (n + 1) / 2.0
    return cfg.num_hidden_layers * (per_tok * n + attn) + 2.0 * H * cfg.vocab_size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--model", default=os.path.join(here, "configs", "llama3-8b"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="cpu: torch threads (0 = torch default)")
    ap.add_argument("--batch", type=parse_list, default=[1, 8, 32, 64])
    ap.add_argument("--context", type=parse_list, default=[128, 2048])
    ap.add_argument("--prefill", type=int, default=2048, help="0: no prefill row")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=512, help="prefill chunk (tokens per sequence) when filling the cache")
    ap.add_argument("--no-generate", action="store_true", help="skip the generate() sanity row")
    ap.add_argument("--bw-mib", type=int, default=1024)
    ap.add_argument("--commit", default=os.environ.get("SITS_COMMIT", "unknown"))
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.iters < 1 or a.warmup < 0 or a.prefill < 0 or a.chunk < 1:
        ap.error("need --iters >= 1, --warmup >= 0, --prefill >= 0, --chunk >= 1")
    dev = pick_device(a, "hf_decode.py")
    if dev is None:
        return 1

    t0 = time.perf_counter()
    cfg, model = build_model(a.model, dev)
    sync(dev)
    load_s = time.perf_counter() - t0
    run = Runner(model, dev, a.chunk)
    wbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    embed_bytes = model.get_input_embeddings().weight.numel() * 2
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_tok = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * hd * 2   # K and V, bf16
    bw = copy_bandwidth(dev, a.bw_mib)
    dname = device_name(dev)

    print("hf_decode.py: %s (%d layers, hidden %d, inter %d, heads %d/%d, vocab %d), random init, transformers %s, "
          "torch %s, sdpa" % (a.model, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size,
                              cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size, transformers.__version__,
                              torch.__version__))
    print_header(dname, load_s, wbytes, embed_bytes, kv_tok, bw, a.bw_mib,
                 "KV fill: real prefill (DynamicCache, chunks of %d); step j at position context + j; %d warmup + %d timed "
                 "steps; one step = model(...) with logits for all rows + argmax" % (a.chunk, a.warmup, a.iters))
    rows = []
    with torch.inference_mode():
        for ctx in a.context:
            for b in a.batch:
                times = run.decode(b, ctx, a.warmup, a.iters)
                avg_len = ctx + a.warmup + 1 + 0.5 * (a.iters - 1)
                r = row("decode", b, ctx, b, times, (wbytes + b * avg_len * kv_tok) / bw)
                rows.append(r)
                print_row(r)
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
        if a.prefill > 0:
            times = run.prefill(a.prefill, a.warmup, a.iters)
            r = row("prefill", 1, a.prefill, a.prefill, times, (wbytes + a.prefill * kv_tok) / bw)
            r["tflops"] = prefill_flops(cfg, a.prefill) / statistics.median(times) * 1e-12
            rows.append(r)
            print_row(r)
        if not a.no_generate:
            ctx = a.context[0]
            per_tok = run.generate_per_token(ctx, a.iters)
            floor_s = (wbytes + (ctx + a.iters / 2.0) * kv_tok) / bw
            r = {"kind": "generate", "batch": 1, "context": ctx, "tokens": 1, "ms_median": 1e3 * per_tok,
                 "ms_mean": 1e3 * per_tok, "ms_min": 1e3 * per_tok, "tok_s": 1.0 / per_tok, "floor_ms": 1e3 * floor_s,
                 "pct_floor": 100.0 * floor_s / per_tok}
            rows.append(r)
            print_row(r)

    if a.json:
        write_json(a, "hf-transformers", dname, "torch %s / transformers %s sdpa" % (torch.__version__, transformers.__version__),
                   wbytes, embed_bytes, kv_tok, bw, "prefill", load_s, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
