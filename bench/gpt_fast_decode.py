#!/usr/bin/env python3
"""gpt_fast_decode.py -- gpt-fast's decode step, the batch-1 latency peer of bench/sits-bench-decode (issue #23):
the same model shape, (batch, context) grid and JSON keys as bench/hf_decode.py. Not a test.

    python3 bench/gpt_fast_decode.py --gpt-fast DIR [--model DIR] [--device cuda] [--batch 1] [--context 128,2048]
        [--iters N] [--warmup N] [--bw-mib N] [--commit SHA] [--json FILE]

DIR is a checkout of gpt-fast (https://github.com/meta-pytorch/gpt-fast, formerly pytorch-labs/gpt-fast): its own
model.py is imported from there (nothing of gpt-fast is in this repository). The model is gpt-fast's Transformer
with the shape of --model's config.json (ModelArgs from hidden_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, intermediate_size, vocab_size, rope_theta, rms_norm_eps, max_position_embeddings), built
in bf16 with PyTorch's default random initialisation (no weights are read), as its generate.py runs it:
  - the step is generate.py's decode_one_token -- model(x, input_pos), then its sampling (temperature 0.8,
    top-k 200: the defaults of its main(); the exponential-race multinomial without a host sync) -- compiled
    with torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs) with the inductor settings it
    sets (coordinate_descent_tuning, triton.unique_kernel_names, fx_graph_cache);
  - the KV cache is gpt-fast's static one, setup_caches(batch, context + warmup + iters + 1): its attention
    reads the whole cache under the causal mask each step, so the KV contents do not change the time and no
    prefill is run (positions start at the context); the decode loop runs under SDPA's math backend as
    generate.py's decode loop does (--sdpa default to leave PyTorch's choice);
  - each step feeds the sampled token of the step before (decode_n_tokens' loop); one CUDA event after
    each step, read once at the end: ms/step = median of the per-step gaps (mean, min kept).
Each (context, batch) compiles afresh (torch._dynamo.reset()) so every shape gets the static graph a single
generate.py run would. --prefill is accepted (run_decode.sh passes it) and gives no row: gpt-fast compiles only
its decode step by default. Floor and copy bandwidth: as bench/hf_decode.py.
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_decode import (copy_bandwidth, device_name, parse_list, pick_device, print_header, print_row, row,  # noqa: E402
                       write_json)


def model_args(ModelArgs, model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    return ModelArgs(block_size=c.get("max_position_embeddings", 2048), vocab_size=c["vocab_size"],
                     n_layer=c["num_hidden_layers"], n_head=c["num_attention_heads"], dim=c["hidden_size"],
                     intermediate_size=c["intermediate_size"],
                     n_local_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
                     rope_base=c.get("rope_theta", 10000.0), norm_eps=c.get("rms_norm_eps", 1e-5))


def sample(logits, temperature=0.8, top_k=200):
    """generate.py's sample() at its defaults: [B, 1, V] logits -> [B, 1] token ids (no host sync)."""
    logits = logits[:, -1] / max(temperature, 1e-5)
    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
    logits = torch.where(logits < v.select(-1, -1).unsqueeze(-1), -float("Inf"), logits)
    probs = torch.nn.functional.softmax(logits, dim=-1)
    q = torch.empty_like(probs).exponential_(1)
    return torch.argmax(probs / q, dim=-1, keepdim=True).to(dtype=torch.int), probs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--gpt-fast", required=True, help="a gpt-fast checkout (holds model.py)")
    ap.add_argument("--model", default=os.path.join(here, "configs", "llama3-8b"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch", type=parse_list, default=[1])
    ap.add_argument("--context", type=parse_list, default=[128, 2048])
    ap.add_argument("--prefill", type=int, default=0, help="accepted, no row (see above)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--bw-mib", type=int, default=1024)
    ap.add_argument("--sdpa", default="math", choices=["math", "default"], help="the decode loop's SDPA backend")
    ap.add_argument("--no-compile", action="store_true", help="eager (a smoke run on a CPU)")
    ap.add_argument("--commit", default=os.environ.get("SITS_COMMIT", "unknown"))
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.iters < 1 or a.warmup < 1:
        ap.error("need --iters >= 1 and --warmup >= 1 (the first steps compile)")
    if not os.path.isfile(os.path.join(a.gpt_fast, "model.py")):
        print("gpt_fast_decode.py: %s/model.py not found (a gpt-fast checkout is needed)" % a.gpt_fast, file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.abspath(a.gpt_fast))
    from model import ModelArgs, Transformer  # gpt-fast's own model file

    dev = pick_device(a, "gpt_fast_decode.py")
    if dev is None:
        return 1
    import torch._inductor.config as inductor_config
    inductor_config.coordinate_descent_tuning = True
    inductor_config.triton.unique_kernel_names = True
    inductor_config.fx_graph_cache = True

    args = model_args(ModelArgs, a.model)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = Transformer(args)
    torch.set_default_dtype(torch.float32)
    model = model.to(device=dev, dtype=torch.bfloat16).eval()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    load_s = time.perf_counter() - t0
    wbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    embed_bytes = model.tok_embeddings.weight.numel() * 2
    kv_tok = 2 * args.n_layer * args.n_local_heads * args.head_dim * 2   # K and V, bf16
    bw = copy_bandwidth(dev, a.bw_mib)
    dname = device_name(dev)

    def decode_one_token(model, x, input_pos):
        logits = model(x, input_pos)
        return sample(logits)

    print("gpt_fast_decode.py: gpt-fast %s/model.py, shape of %s (%d layers, dim %d, inter %d, heads %d/%d, vocab %d), "
          "random init, bf16, torch %s, %s" % (a.gpt_fast, a.model, args.n_layer, args.dim, args.intermediate_size,
                                              args.n_head, args.n_local_heads, args.vocab_size, torch.__version__,
                                              "eager" if a.no_compile else "compiled reduce-overhead"))
    print_header(dname, load_s, wbytes, embed_bytes, kv_tok, bw, a.bw_mib,
                 "static KV of context + warmup + iters + 1 positions, steps from position = context; %d warmup + %d timed "
                 "steps; SDPA %s" % (a.warmup, a.iters, a.sdpa))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    with torch.no_grad():
        for ctx in a.context:
            for b in a.batch:
                torch._dynamo.reset()
                step = decode_one_token if a.no_compile else torch.compile(decode_one_token, mode="reduce-overhead",
                                                                           fullgraph=True)
                model.max_seq_length = -1   # setup_caches allocates afresh for this shape
                with torch.device(dev):
                    model.setup_caches(max_batch_size=b, max_seq_length=ctx + a.warmup + a.iters + 1)
                cur = torch.zeros((b, 1), dtype=torch.int, device=dev)
                pos = torch.tensor([ctx], dtype=torch.int, device=dev)
                timed = a.iters if dev.type == "cuda" else 0
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(timed + 1)] if timed else []
                host = []
                with sdpa_kernel([SDPBackend.MATH]) if a.sdpa == "math" else contextlib.nullcontext():
                    for i in range(a.warmup + a.iters):
                        if i == a.warmup:
                            if dev.type == "cuda":
                                torch.cuda.synchronize(dev)
                                ev[0].record()
                            t_host = time.perf_counter()
                        tok, _ = step(model, cur, pos)
                        pos += 1
                        cur = tok.clone()
                        if i >= a.warmup:
                            if dev.type == "cuda":
                                ev[i - a.warmup + 1].record()
                            else:
                                host.append(time.perf_counter() - t_host)
                                t_host = time.perf_counter()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                    times = [ev[j].elapsed_time(ev[j + 1]) * 1e-3 for j in range(timed)]
                else:
                    times = host
                avg_len = ctx + a.warmup + 0.5 * (a.iters - 1)
                r = row("decode", b, ctx, b, times, (wbytes + b * avg_len * kv_tok) / bw)
                rows.append(r)
                print_row(r)
                for layer in model.layers:
                    layer.attention.kv_cache = None
                if dev.type == "cuda":
                    torch.cuda.empty_cache()

    if a.json:
        write_json(a, "gpt-fast", dname, "torch %s, gpt-fast model.py, %s, SDPA %s" %
                   (torch.__version__, "eager" if a.no_compile else "torch.compile reduce-overhead", a.sdpa),
                   wbytes, embed_bytes, kv_tok, bw, "none (static cache)", load_s, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
