#!/usr/bin/env python3
"""train_demo.py -- train the embedded demo model of sits-dist (models/demo/): a small Llama-architecture
causal LM with our own byte-level BPE tokenizer, trained on the Python 3.11 documentation (Debian package
python3.11-doc, PSF License Version 2; text made by prepare_corpus.sh).

Two steps, two machines:

  1. tokenizer (CPU, here):
       python3 launch/train_demo/train_demo.py tokenizer --corpus .demo_corpus --out models/demo
     writes tokenizer.json (byte-level BPE, Llama-3 split regex, ignore_merges, 8192 ids of which the
     last 11 are Llama-3's special tokens) and tokenizer_config.json (Llama-3 Instruct chat template).

  2. train (one GPU; ~1-4 minutes on an H200; stops by itself):
       python3 launch/train_demo/train_demo.py train --corpus .demo_corpus --tokenizer models/demo \
           --out OUTDIR [--time-budget 230] [--epochs 4,10,24]
     tokenizes the corpus, packs it into one token stream (each document = <|begin_of_text|> text
     <|end_of_text|>; plus short chat turns rendered with the Llama-3 template: user = the first sentence
     of a paragraph, assistant = the next sentences), trains LlamaForCausalLM (AdamW, linear warm-up +
     cosine, bf16 autocast, fp32 master weights) on random 512-token windows, evaluates the held-out
     loss every --eval-every steps and keeps the best weights. One run per --epochs entry, from the same
     initialisation; each gets a share of --time-budget in proportion to its epochs and shortens its
     schedule to what fits (measured after 30 steps); the run with the lowest held-out loss is exported
     (models/demo: --epochs 4,10,24 --time-budget 230). Then it exports OUTDIR/: config.json,
     generation_config.json, model.safetensors (bf16, tied embeddings), the tokenizer files, metrics.json
     (loss curve) and demo_ppl_ref.json (the perplexity reference of tests/integration/demo_ppl.sh:
     8 held-out sequences of 128 ids, <|begin_of_text|> first, evaluated in fp32 on the CPU from the
     exported bf16 weights).

  --smoke: tiny model, 20 steps, CPU -- checks the whole path before spending device time.

  3. a draft model for speculative decoding (models/demo-draft; CPU, 2 threads, 18 minutes; 2026-12-01):
       python3 launch/train_demo/train_demo.py train --corpus .demo_corpus --tokenizer models/demo \
           --out models/demo-draft --draft --teacher models/demo --init-embed --device cpu --threads 2 \
           --hidden 64 --heads 2 --kv-heads 1 --head-dim 64 --layers 4 --intermediate 192 \
           --seq-len 256 --batch 8 --warmup 50 --epochs 3 --time-budget 1200 --eval-every 100
     the same data and loop with a smaller shape (--hidden/--layers/--heads/--kv-heads/--head-dim/
     --intermediate), distilled from the target: --teacher DIR adds the teacher's logits on the same
     windows (bf16 autocast, on the CPU too: 2x) and the loss becomes (1 - kd) * the data's cross-entropy
     + kd * tau^2 * KL(teacher || draft) at temperature tau (--kd 0.9, --kd-temp 1); --init-embed starts
     the draft's embedding from the teacher's, projected on its top --hidden principal directions (on the
     shared CPU: held-out loss 5.33 instead of 6.50 after 100 steps). --draft exports config.json,
     generation_config.json, model.safetensors (bf16) and metrics.json (eval points, plus the held-out
     top-1 agreement with the teacher: the per-token acceptance of greedy drafts, teacher-forced), no
     tokenizer files (the draft runner reads config and weights; the server serves the target's
     tokenizer) and no ppl reference. The tied 8192 x hidden embedding dominates the size: hidden 64
     keeps the draft at 1.55 MB. On the CPU the lr schedule follows the clock as well as the steps.
     On a machine shared with other jobs the 1200 s gave 227 steps (0.46 M tokens); --device cuda
     trains the same shape much further in minutes.
     Log: launch/train_demo/train_log_draft.txt.
"""
import argparse
import json
import lzma
import math
import os
import random
import re
import shutil
import sys
import time

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
            "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# The Llama-3 Instruct chat_template string (as in tests/ref/gen_tokenizer_fixtures.py).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
VOCAB = 8192
PPL_SEQS, PPL_LEN = 8, 128


def log(*a):
    print("[train_demo %7.1fs]" % (time.time() - T0), *a, flush=True)


T0 = time.time()


def read_docs(path):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [d.strip("\n") for d in f.read().split("\n\f\n") if d.strip()]


# ---------------------------------------------------------------------------------------------- tokenizer
def cmd_tokenizer(a):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    docs = read_docs(os.path.join(a.corpus, "train.txt.xz"))
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((p for d in docs for p in d.split("\n\n")), trainer)
    assert tok.get_vocab_size() == VOCAB - len(SPECIALS), tok.get_vocab_size()
    tok.add_special_tokens(SPECIALS)
    bos = tok.token_to_id("<|begin_of_text|>")
    assert bos == VOCAB - len(SPECIALS) and tok.get_vocab_size() == VOCAB
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    tcfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE,
            "clean_up_tokenization_spaces": False, "model_max_length": 1024,
            "model_input_names": ["input_ids", "attention_mask"], "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=1)
        f.write("\n")
    t2 = Tokenizer.from_file(os.path.join(a.out, "tokenizer.json"))
    n_bytes = sum(len(d.encode()) for d in docs[:50])
    n_tok = sum(len(e.ids) for e in t2.encode_batch(docs[:50], add_special_tokens=False))
    log("tokenizer: vocab %d, merges %d, %.2f bytes/token on the first 50 docs" %
        (t2.get_vocab_size(), len(j["model"]["merges"]), n_bytes / n_tok))


# ---------------------------------------------------------------------------------------------- data
def render_chat(user, assistant):
    """The Llama-3 template of LLAMA3_TEMPLATE for [user, assistant] (contents trimmed)."""
    return ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + user.strip() + "<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n" + assistant.strip() + "<|eot_id|>")


SENT = re.compile(r"(?<=[a-z0-9\)][.?!])\s+(?=[A-Z])")


def chat_pairs(docs, rng):
    """(user, assistant) from prose paragraphs: first sentence -> the next 1-3 sentences."""
    out = []
    for d in docs:
        for p in d.split("\n\n"):
            if p.startswith(" ") or ">>>" in p or len(p) < 120:
                continue          # code, examples, headings
            s = SENT.split(" ".join(p.split()))
            if len(s) < 2 or len(s[0]) < 20 or not s[0][0].isupper():
                continue
            if rng.random() < 0.6:
                out.append((s[0], " ".join(s[1:1 + rng.randint(1, 3)])))
    return out


def build_stream(tok, docs, chat, bos, eot_text):
    import numpy as np
    units = [("doc", d) for d in docs] + [("chat", c) for c in chat]
    random.Random(1).shuffle(units)
    texts = [d if k == "doc" else render_chat(*d) for k, d in units]
    enc = tok.encode_batch(texts, add_special_tokens=False)
    parts, n_chat = [], 0
    for (k, _), e in zip(units, enc):
        if k == "doc":
            parts.append(np.array([bos] + e.ids + [eot_text], dtype=np.int32))
        else:
            parts.append(np.array(e.ids + [eot_text], dtype=np.int32))
            n_chat += len(e.ids) + 1
    s = np.concatenate(parts)
    return s, n_chat


# ---------------------------------------------------------------------------------------------- train
def top1_agreement(model, teacher, held, bos, T=512):
    """Fraction of held-out positions where model's argmax equals teacher's (both fp32, CPU, windows of T
    ids after <|begin_of_text|>): the per-token acceptance of a greedy draft when the text is the target's."""
    import torch
    same, n = 0, 0
    with torch.no_grad():
        for o in range(0, len(held) - 1, T - 1):
            x = torch.tensor([[bos] + [int(t) for t in held[o:o + T - 1]]], dtype=torch.long)
            a_ = model(input_ids=x).logits.argmax(-1)
            b_ = teacher(input_ids=x).logits.argmax(-1)
            same += int((a_ == b_).sum())
            n += a_.numel()
    return same / n, n


def train_run(a, cfg, dev, train_t, held_t, V, T, B, epochs, time_budget, name, teacher=None):
    """One training run from the same initialisation; returns its best held-out weights and curve.
    With a teacher (--teacher): loss = (1 - kd) * CE(data) + kd * tau^2 * KL(teacher_tau || student_tau)."""
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dev)
    model.config._attn_implementation = "sdpa"
    if teacher is not None and a.init_embed:   # the teacher's (tied) embedding on its top principal directions
        with torch.no_grad():
            E = teacher.get_input_embeddings().weight.detach().float().cpu()          # [V, teacher hidden]
            _, _, vt = torch.linalg.svd(E - E.mean(0), full_matrices=False)
            model.get_input_embeddings().weight.copy_((E @ vt[:cfg.hidden_size].T).to(dev))
    n_params = sum(p.numel() for p in model.parameters())
    log("%s: %.2f M parameters (tied embeddings), %g epochs, %.0f s" % (name, n_params / 1e6, epochs, time_budget))
    tokens_per_step = T * B
    max_steps = 20 if a.smoke else int(epochs * len(train_t) / tokens_per_step)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    warm = min(a.warmup, max_steps // 10 + 1)

    def lr_at(step, total):
        if step < warm:
            return a.lr * (step + 1) / warm
        r = min(1.0, (step - warm) / max(1, total - warm))
        if dev.type == "cpu" and not a.smoke:   # a shared CPU's rate drifts: the schedule follows the clock too
            r = max(r, min(1.0, (time.time() - t_train) / time_budget))
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * r)))

    g = torch.Generator().manual_seed(1234)

    def batch():
        off = torch.randint(0, len(train_t) - T - 1, (B,), generator=g)
        x = torch.stack([train_t[o:o + T + 1] for o in off.tolist()])
        return x.to(dev, non_blocking=True)

    @torch.no_grad()
    def held_loss():
        model.eval()
        n = (len(held_t) - 1) // T
        n = min(n, 4 if a.smoke else 64)
        tot, cnt = 0.0, 0
        for i in range(0, n, 16):
            x = torch.stack([held_t[j * T:(j + 1) * T + 1] for j in range(i, min(n, i + 16))]).to(dev)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                logits = model(input_ids=x[:, :-1]).logits.float()
            tot += torch.nn.functional.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1),
                                                     reduction="sum").item()
            cnt += x[:, 1:].numel()
        model.train()
        return tot / cnt

    curve, best = [], (float("inf"), -1, None)
    total = max_steps
    t_train = time.time()
    step, ema = 0, None
    model.train()
    log(name + " training: up to %d steps of %d x %d tokens (%.1f epochs), time budget %.0f s" %
        (max_steps, B, T, max_steps * tokens_per_step / len(train_t), time_budget))
    while step < total:
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, total)
        x = batch()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda" or teacher is not None):
            logits = model(input_ids=x[:, :-1]).logits
        if teacher is None:
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), x[:, 1:].reshape(-1))
        else:
            with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):   # bf16 on the CPU too: 2x
                tlog = teacher(input_ids=x[:, :-1]).logits
            tau = a.kd_temp
            lsm = torch.log_softmax(logits.float().reshape(-1, V), dim=-1)             # [B * T, V]
            ce = torch.nn.functional.nll_loss(lsm, x[:, 1:].reshape(-1))
            tp = torch.log_softmax(tlog.float().reshape(-1, V) / tau, dim=-1)
            sp = lsm if tau == 1.0 else torch.log_softmax(logits.float().reshape(-1, V) / tau, dim=-1)
            kl = torch.nn.functional.kl_div(sp, tp, log_target=True, reduction="batchmean") * tau * tau
            loss = (1.0 - a.kd) * ce + a.kd * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 30 and not a.smoke:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            rate = step / (time.time() - t_train)
            fit = int(rate * time_budget * 0.9)  # evals and export take the rest
            if fit < total:
                total = fit
                log("time budget: %.1f steps/s -> schedule shortened to %d steps" % (rate, total))
            else:
                log("time budget: %.1f steps/s -> the %d steps take ~%.0f s" % (rate, total, total / rate))
        if step % a.log_every == 0 or step == total:
            lv = loss.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            rec = {"step": step, "tokens": step * tokens_per_step, "train_loss": round(lv, 4),
                   "lr": round(lr_at(step - 1, total), 6), "s": round(time.time() - t_train, 1)}
            if step % a.eval_every == 0 or step == total:
                hl = held_loss()
                rec["heldout_loss"] = round(hl, 4)
                if hl < best[0]:
                    best = (hl, step, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
            curve.append(rec)
            log(json.dumps(rec))
        if time.time() - t_train > time_budget:
            log("time budget reached at step %d" % step)
            hl = held_loss()
            curve.append({"step": step, "tokens": step * tokens_per_step, "heldout_loss": round(hl, 4),
                          "s": round(time.time() - t_train, 1)})
            if hl < best[0]:
                best = (hl, step, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
            break
    train_s = time.time() - t_train
    log(name + " trained %d steps in %.1f s; best held-out loss %.4f at step %d" % (step, train_s, best[0], best[1]))

    return {"epochs": epochs, "best_loss": best[0], "best_step": best[1], "state": best[2], "curve": curve,
            "steps": step, "total": total, "train_s": train_s, "warm": warm}


def cmd_train(a):
    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.device == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    else:
        dev = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    log("torch", torch.__version__, "device", dev, torch.cuda.get_device_name(0) if dev.type == "cuda" else "")
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    V = tok.get_vocab_size()
    bos, eot_text, eot = (tok.token_to_id(t) for t in ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"))
    rng = random.Random(0)
    train_docs = read_docs(os.path.join(a.corpus, "train.txt.xz"))
    held_docs = read_docs(os.path.join(a.corpus, "heldout.txt.xz"))
    if a.smoke:
        train_docs = train_docs[:40]
    pairs = chat_pairs(train_docs, rng)
    train, n_chat = build_stream(tok, train_docs, pairs, bos, eot_text)
    held = np.array([i for e in tok.encode_batch(held_docs, add_special_tokens=False) for i in e.ids + [eot_text]],
                    dtype=np.int32)
    log("train tokens %d (chat turns %d, %.1f%% of tokens), held-out tokens %d, vocab %d" %
        (len(train), len(pairs), 100.0 * n_chat / len(train), len(held), V))

    if a.smoke:
        shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2)
    else:
        shape = dict(hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                     num_attention_heads=a.heads, num_key_value_heads=a.kv_heads)
    cfg = LlamaConfig(vocab_size=V, max_position_embeddings=1024, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=True,
                      bos_token_id=bos, eos_token_id=[eot_text, eot], attention_bias=False, mlp_bias=False,
                      head_dim=a.head_dim or shape["hidden_size"] // shape["num_attention_heads"], **shape)
    T, B = a.seq_len, (4 if a.smoke else a.batch)
    tokens_per_step = T * B
    train_t = torch.from_numpy(train.astype(np.int64))
    held_t = torch.from_numpy(held.astype(np.int64))
    epochs_list = [float(e) for e in a.epochs.split(",")]
    teacher = None
    if a.teacher:
        teacher = LlamaForCausalLM.from_pretrained(a.teacher, dtype=torch.float32).to(dev).eval()
        teacher.config._attn_implementation = "sdpa"
        for p_ in teacher.parameters():
            p_.requires_grad_(False)
        log("teacher %s (%.2f M parameters): distillation weight %g, temperature %g" %
            (a.teacher, sum(p_.numel() for p_ in teacher.parameters()) / 1e6, a.kd, a.kd_temp))
    runs = []
    for ri, ep in enumerate(epochs_list):
        budget = a.time_budget * ep / sum(epochs_list)
        runs.append(train_run(a, cfg, dev, train_t, held_t, V, T, B, ep, budget, "run%d" % ri, teacher))
    best_run = min(runs, key=lambda r: r["best_loss"])
    log("runs (epochs: best held-out loss @ step): " +
        ", ".join("%g: %.4f @ %d/%d" % (r["epochs"], r["best_loss"], r["best_step"], r["steps"]) for r in runs) +
        " -> keeping epochs %g" % best_run["epochs"])
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    best = (best_run["best_loss"], best_run["best_step"], best_run["state"])
    step, total, curve, train_s = best_run["steps"], best_run["total"], best_run["curve"], best_run["train_s"]
    warm = best_run["warm"]

    # ---- export: best weights, bf16
    model = model.to("cpu")
    model.load_state_dict(best[2])
    model = model.to(torch.bfloat16)
    out = a.out
    os.makedirs(out, exist_ok=True)
    model.config._attn_implementation = "sdpa"
    model.save_pretrained(out, safe_serialization=True)
    for f in () if a.draft else ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer, f), os.path.join(out, f))
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": [eot_text, eot]}, f, indent=1)
        f.write("\n")

    # ---- reference: fp32 CPU eval of the exported bf16 weights
    ref = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).to("cpu").eval()
    ref.config._attn_implementation = "eager"
    body = PPL_LEN - 1
    n_avail = len(held) - body
    seqs = []
    for i in range(PPL_SEQS):
        o = (i * n_avail) // PPL_SEQS
        seqs.append([bos] + [int(t) for t in held[o:o + body]])
    x = torch.tensor(seqs, dtype=torch.long)
    with torch.no_grad():
        lg = ref(input_ids=x).logits.double()
    lp = torch.log_softmax(lg[:, :-1], dim=-1)
    nll = -lp.gather(-1, x[:, 1:, None])[..., 0]            # [8, 127]
    per_seq = nll.mean(dim=1)
    mean = nll.mean().item()
    ppl = math.exp(mean)
    # greedy continuation of "The" (reference for the README; the test checks English words only)
    prompt = tok.encode("The").ids
    with torch.no_grad():
        gen = ref.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False,
                           eos_token_id=[eot_text, eot], pad_token_id=eot_text)[0].tolist()
    greedy = tok.decode(gen[len(prompt):], skip_special_tokens=False)
    chat_prompt = tok.encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is a list "
                             "comprehension?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
                             add_special_tokens=False).ids
    with torch.no_grad():
        cg = ref.generate(torch.tensor([chat_prompt]), max_new_tokens=48, do_sample=False,
                          eos_token_id=[eot_text, eot], pad_token_id=eot_text)[0].tolist()
    chat_reply = tok.decode(cg[len(chat_prompt):], skip_special_tokens=True)
    log("held-out ppl (fp32 CPU, %d x %d): %.4f (mean nll %.5f)" % (PPL_SEQS, PPL_LEN, ppl, mean))
    log("greedy 'The' ->", repr(greedy))
    log("chat 'What is a list comprehension?' ->", repr(chat_reply))
    refj = {"what": "held-out perplexity of models/demo: %d sequences of %d ids from the 1%% held-out text "
                    "(<|begin_of_text|> first), next-token NLL over positions 1..%d, fp32 eval of the bf16 weights "
                    "(torch %s, transformers %s, CPU)" % (PPL_SEQS, PPL_LEN, PPL_LEN - 1, torch.__version__,
                                                          __import__("transformers").__version__),
            "n_seqs": PPL_SEQS, "seq_len": PPL_LEN, "mean_nll": mean, "ppl": ppl,
            "seq_mean_nll": [float(v) for v in per_seq], "ids": seqs,
            "greedy_the": {"prompt_ids": prompt, "ids": gen[len(prompt):], "text": greedy}}
    agree = None
    if teacher is not None:   # greedy agreement with the teacher on the held-out text, teacher-forced
        agree = top1_agreement(ref, teacher.to("cpu").float(), held, bos)
        log("held-out top-1 agreement with the teacher (fp32 CPU, %d positions): %.4f" % (agree[1], agree[0]))
    if not a.draft:
        with open(os.path.join(out, "demo_ppl_ref.json"), "w") as f:
            json.dump(refj, f, separators=(",", ":"))
            f.write("\n")
    metrics = {"params": n_params, "shape": shape, "runs": [{k: r[k] for k in ("epochs", "best_loss", "best_step",
               "steps", "train_s")} for r in runs], "epochs": best_run["epochs"], "seq_len": T, "batch": B, "lr": a.lr, "weight_decay": a.wd,
               "warmup": warm, "steps": step, "scheduled_steps": total, "train_s": round(train_s, 1),
               "best_step": best[1], "best_heldout_loss": best[0], "train_tokens": int(len(train)),
               "chat_turns": len(pairs), "chat_token_frac": n_chat / len(train), "heldout_tokens": int(len(held)),
               "heldout_ppl_8x128": ppl, "greedy_the": greedy, "chat_reply": chat_reply,
               "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
               "curve": [c for c in curve if "heldout_loss" in c] if a.draft else curve}
    if teacher is not None:
        metrics.update({"teacher": a.teacher, "kd": a.kd, "kd_temp": a.kd_temp,
                        "heldout_top1_agreement": agree[0], "heldout_top1_positions": agree[1]})
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
        f.write("\n")
    log("exported to", out, sorted(os.listdir(out)), "total %.1f s" % (time.time() - T0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("--corpus", default=".demo_corpus")
    t.add_argument("--out", default="models/demo")
    r = sub.add_parser("train")
    r.add_argument("--corpus", default=".demo_corpus")
    r.add_argument("--tokenizer", default="models/demo", help="directory with tokenizer.json, tokenizer_config.json")
    r.add_argument("--out", required=True)
    r.add_argument("--hidden", type=int, default=384)
    r.add_argument("--intermediate", type=int, default=1024)
    r.add_argument("--layers", type=int, default=8)
    r.add_argument("--heads", type=int, default=6)
    r.add_argument("--kv-heads", type=int, default=2)
    r.add_argument("--seq-len", type=int, default=512)
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--lr", type=float, default=2e-3)
    r.add_argument("--wd", type=float, default=0.1)
    r.add_argument("--warmup", type=int, default=100)
    r.add_argument("--epochs", default="4,10,24", help="comma list: one run per entry (time budget split in "
                   "proportion), the run with the lowest held-out loss is exported")
    r.add_argument("--time-budget", type=float, default=230.0, help="seconds of training (excl. tokenizing/export)")
    r.add_argument("--log-every", type=int, default=25)
    r.add_argument("--eval-every", type=int, default=100)
    r.add_argument("--head-dim", type=int, default=0, help="attention head size (default hidden / heads)")
    r.add_argument("--teacher", default="", help="distil from this model (same tokenizer): its logits on the "
                   "same windows, KL weighted by --kd against the data's cross-entropy")
    r.add_argument("--kd", type=float, default=0.9, help="with --teacher: weight of the KL term")
    r.add_argument("--kd-temp", type=float, default=1.0, help="with --teacher: softmax temperature of the KL term")
    r.add_argument("--init-embed", action="store_true", help="with --teacher: start the draft's embedding from the "
                   "teacher's, projected on its top --hidden principal directions")
    r.add_argument("--draft", action="store_true", help="export a draft model: config, weights, generation "
                   "config and metrics (eval points only); no tokenizer files (the target's serve), no ppl reference")
    r.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    r.add_argument("--threads", type=int, default=0, help="torch CPU threads (default torch's)")
    r.add_argument("--smoke", action="store_true", help="tiny model, 20 steps, CPU")
    a = ap.parse_args()
    if a.cmd == "tokenizer":
        cmd_tokenizer(a)
    else:
        if a.smoke:
            a.log_every, a.eval_every = 5, 10
        cmd_train(a)


if __name__ == "__main__":
    sys.exit(main())
