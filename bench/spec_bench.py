#!/usr/bin/env python3
"""spec_bench.py -- speculative decoding (n-gram drafter) end to end: tokens/s per user at batch 1 with
and without --speculative-config on the same server build and model, and the acceptance rate. Not a test.

  (. tests/integration/mpi_env.sh; bench/spec_bench.py ...)   # as root / on the CI box: mpirun settings
  bench/spec_bench.py [--sits build/sits-dist] [--model models/demo] [--mpirun "mpirun -np 1"]
                      [--configs off,4,8,d4] [--draft DIR] [--sets copy,loop,code,free,chat]
                      [--max-tokens 128] [--repeat 1] [--json FILE]

Configs: off (no speculation), K (n-gram, num_speculative_tokens K), dK (the draft-model drafter with
the model in --draft, default the target itself: an upper bound on acceptance, not a speed-up).

Each config starts the server (CPU unless the build and machine say otherwise), then sends the prompt
sets one request at a time (batch 1), streaming, greedy, ignore_eos, max_tokens tokens:
  copy   the 8 held-out Python-docs sequences of tests/integration/demo_ppl_ref.json (128 ids each),
         then a blank line and their first 16 ids again: the continuation copies the text (input-grounded)
  loop   a repeated release-note line the demo model keeps repeating
  code   code to edit: a function given twice, the third copy started
  free   the first 32 ids of each held-out sequence, continued freely (few drafts accepted: the overhead)
  chat   8 Python questions (CHAT below, written for this bench, not in the corpus) rendered with the model's
         chat template (/tokenize with messages); the reply ends at <|eot_id|> (no ignore_eos) or max_tokens
Per request: e2e tok/s = completion tokens / (last token - request sent), the per-user rate a client
sees (prefill included). Per set: the mean of that, and tok/cpu-s = the set's tokens / the CPU seconds
the serving rank used meanwhile (utime + stime of its process: on a machine shared with other work this
is the steadier measure of the cost; at batch 1 with one thread the two agree on an idle machine), and
the acceptance rate from the /metrics counters (accepted / drafted). The table and the JSON (--json)
give every config and set, and the speed-ups of each config over "off" per set (wall and CPU). Greedy
outputs are compared with "off" (must be equal)."""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def post_stream(url, body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    r = urllib.request.urlopen(req, timeout=600)
    times, text, usage = [], "", None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            if ch.get("text"):
                text += ch["text"]
                times.append(time.perf_counter())
    n = usage["completion_tokens"] if usage else 0
    return text, n, n / (times[-1] - t0) if times else 0.0


def cpu_seconds(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def metric(url, name):
    for line in urllib.request.urlopen(url + "/metrics", timeout=60).read().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


def tokenize(url, text):
    req = urllib.request.Request(url + "/tokenize", json.dumps({"prompt": text}).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["tokens"]


CHAT = ["What is a list comprehension?", "How do I read a file line by line?",
        "What does the with statement do?", "How can I sort a dictionary by its values?",
        "What is the difference between a tuple and a list?", "How do I raise an exception?",
        "What is a generator?", "How do I format a string with variables?"]


def chat_ids(url, question):
    req = urllib.request.Request(url + "/tokenize", json.dumps({"messages": [{"role": "user", "content": question}],
                                                                "add_generation_prompt": True}).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["tokens"]


def prompt_sets(url):
    ref = json.load(open(os.path.join(TOP, "tests/integration/demo_ppl_ref.json")))
    nl2 = tokenize(url, "\n\n")[-1:]   # the blank-line id (after the bos the tokenizer adds)
    loop = tokenize(url, "    3.11\n\n       Added support for the *bases* parameter.\n\n" * 3)
    code = tokenize(url, "def area(width, height):\n    \"\"\"Return the area of the rectangle.\"\"\"\n    return width * height\n\n"
                         "def area(width, height):\n    \"\"\"Return the area of the rectangle.\"\"\"\n    return width * height\n\n"
                         "def area(width, height):\n")
    return {"copy": [ids + nl2 + ids[1:17] for ids in ref["ids"]], "loop": [loop], "code": [code],
            "free": [ids[:32] for ids in ref["ids"]], "chat": [chat_ids(url, q) for q in CHAT]}


def start(args, extra):
    err = tempfile.NamedTemporaryFile("w+", delete=False, suffix=".err")
    cmd = shlex.split(args.mpirun) + [args.sits, "--model", args.model, "--port", "0"] + extra
    env = dict(os.environ, SITS_LOG_LEVEL="info")   # info lines carry host:pid:rank
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, env=env)
    for _ in range(600):
        log = open(err.name).read()
        m = re.search(r"serving .* on (http://127\.0\.0\.1:\d+) ", log)
        pid = re.search(r"^[^:\s]+:(\d+):0 ", log, re.M)
        if m and pid:
            try:
                urllib.request.urlopen(m.group(1) + "/health", timeout=5)
                return p, m.group(1), err.name, int(pid.group(1))
            except Exception:
                pass
        if p.poll() is not None:
            break
        time.sleep(0.2)
    sys.exit("server did not start: " + open(err.name).read()[-2000:])


def stop(p):
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sits", default=os.path.join(TOP, "build/sits-dist"))
    ap.add_argument("--model", default=os.path.join(TOP, "models/demo"))
    ap.add_argument("--mpirun", default="mpirun --oversubscribe --bind-to none -np 1")
    ap.add_argument("--configs", default="off,4,8", help="off, K (n-gram) and/or dK (draft model) values")
    ap.add_argument("--draft", help="the draft model of the dK configs (default: --model)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--sets", default="copy,loop,code,free,chat", help="the prompt sets to send, in this order")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    results, outputs = [], {}
    for cfg in args.configs.split(","):
        if cfg == "off":
            extra = []
        elif cfg.startswith("d"):
            extra = ["--speculative-config", json.dumps({"method": "draft_model", "model": os.path.abspath(args.draft or args.model),
                                                         "num_speculative_tokens": int(cfg[1:])})]
        else:
            extra = ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": int(cfg),
                                                         "prompt_lookup_max": 4, "prompt_lookup_min": 1})]
        p, url, errf, pid = start(args, extra)
        try:
            sets = prompt_sets(url)
            for name in args.sets.split(","):
                prompts = sets[name]
                d0, a0 = metric(url, "sits_spec_draft_tokens_total"), metric(url, "sits_spec_accepted_tokens_total")
                v0 = metric(url, "sits_spec_verifications_total")
                e2e, toks, texts = [], 0, []
                c0 = cpu_seconds(pid)
                for _ in range(args.repeat):
                    for ids in prompts:
                        text, n, r_e2e = post_stream(url, {"prompt": ids, "max_tokens": args.max_tokens, "temperature": 0,
                                                           "ignore_eos": name != "chat", "stream": True,
                                                           "stream_options": {"include_usage": True}})
                        e2e.append(r_e2e)
                        toks += n
                        texts.append(text)
                cpu = cpu_seconds(pid) - c0
                d1, a1 = metric(url, "sits_spec_draft_tokens_total"), metric(url, "sits_spec_accepted_tokens_total")
                v1 = metric(url, "sits_spec_verifications_total")
                row = {"config": cfg, "set": name, "requests": len(e2e), "tokens": toks,
                       "e2e_tok_s": sum(e2e) / len(e2e), "cpu_s": cpu, "tok_per_cpu_s": toks / cpu if cpu > 0 else 0.0,
                       "drafted": int(d1 - d0), "accepted": int(a1 - a0), "verifications": int(v1 - v0),
                       "acceptance": (a1 - a0) / (d1 - d0) if d1 > d0 else 0.0,
                       "accepted_per_token": (a1 - a0) / toks if toks else 0.0}
                if cfg == "off":
                    outputs[name] = texts
                row["same_output_as_off"] = outputs.get(name) == texts if cfg != "off" else True
                results.append(row)
                print("%-5s %-5s %3d req %5d tok  e2e %7.1f tok/s  %7.1f tok/cpu-s  accepted %5d of %5d (%.2f)  same %s" % (
                    cfg, name, row["requests"], toks, row["e2e_tok_s"], row["tok_per_cpu_s"], row["accepted"], row["drafted"],
                    row["acceptance"], row["same_output_as_off"]), file=sys.stderr, flush=True)
        finally:
            stop(p)
            os.unlink(errf)
    base = {r["set"]: r for r in results if r["config"] == "off"}
    print("\n%-6s %-5s %7s %10s %10s %9s %9s %7s %6s" % ("config", "set", "tokens", "e2e tok/s", "tok/cpu-s", "x wall",
                                                         "x cpu", "accept", "same"))
    for r in results:
        b = base.get(r["set"])
        r["speedup_wall"] = r["e2e_tok_s"] / b["e2e_tok_s"] if b and b["e2e_tok_s"] else None
        r["speedup_cpu"] = r["tok_per_cpu_s"] / b["tok_per_cpu_s"] if b and b["tok_per_cpu_s"] else None
        print("%-6s %-5s %7d %10.1f %10.1f %9s %9s %7.2f %6s" % (r["config"], r["set"], r["tokens"], r["e2e_tok_s"],
              r["tok_per_cpu_s"], "%.2fx" % r["speedup_wall"] if r["speedup_wall"] else "-",
              "%.2fx" % r["speedup_cpu"] if r["speedup_cpu"] else "-", r["acceptance"], r["same_output_as_off"]))
    if args.json:
        meta = {"bench": "spec", "model": args.model, "max_tokens": args.max_tokens, "mpirun": args.mpirun,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": results}
        json.dump(meta, open(args.json, "w"), indent=1)
        print("wrote " + args.json)


if __name__ == "__main__":
    main()
