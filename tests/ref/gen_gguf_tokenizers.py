#!/usr/bin/env python3
"""[gguf] Tokenizer-only GGUFs and what transformers makes of them (tests/integration/gguf_tokenizers.sh).

A GGUF served on its own (src/model/gguf_dir.c) gets its tokenizer rebuilt from tokenizer.ggml.*; the reference is
transformers' own rebuild, AutoTokenizer.from_pretrained(dir, gguf_file=...) (integrations/gguf/
gguf_tokenizer_mapping.py). Three files, metadata only (a llama architecture's shape keys, no tensors), written with
gguf-py's GGUFWriter from committed tokenizer fixtures:
  tok_spm.gguf  tokenizer.ggml.model "llama" (sentencepiece BPE: Llama 2, Mistral 7B): the tokens of
                tests/fixtures/tokenizers/spm/tokenizer.json with scores -id (so the merges transformers derives from
                the vocabulary follow the vocabulary's order), types UNKNOWN / CONTROL / BYTE / NORMAL as llama.cpp's
                converter writes them, no merges (as llama.cpp writes sentencepiece files), add_bos_token true,
                add_space_prefix true, a chat template;
  tok_bpe.gguf  tokenizer.ggml.model "gpt2", pre "llama-bpe": tests/fixtures/tokenizers/bytelevel's vocabulary and merges,
                two of its tokens marked CONTROL (one the BOS, add_bos_token true) and one USER_DEFINED.
  tok_gemma.gguf  a gemma2 file (transformers' gemma_tokenizer: GemmaTokenizer, blank tokens respelled, merges
                from the file order): Gemma's specials, the spm fixture's pieces, tokens of spaces stored as spaces,
                a " \n" token, scores rising with the id (not the merge order), add_bos_token true.
  tok_bert.gguf  tokenizer.ggml.model "bert" (WordPiece): neither rebuilds it; sits-dist refuses it. No reference.
expected.json: for each file, transformers' ids of CASES (add_special_tokens=True, as sits-dist --tokenize encodes)
and its decode of them (skip_special_tokens=False), plus the versions.

Usage: python3 tests/ref/gen_gguf_tokenizers.py [--check]   (writes tests/unit/data/gguf/tokenizers/, or compares)
Needs transformers (>= 5), tokenizers, gguf (gguf-py); --check reproduces the committed files byte for byte.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import gguf
import tokenizers
import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
OUT = os.path.join(ROOT, "unit", "data", "gguf", "tokenizers")
CASES = ["Hello world", " leading space", "two  spaces and\ttab\nnewline", "numbers 12345 and 3.14159",
         "Ünïcödé façade — naïve café", "日本語のテキスト", "emoji 😊 here", "<s>inline special</s> text",
         "can't won't they'll", "  ", "", "a" * 40, "MixedCASE wordsWith camelCase"]
TEMPLATE = "{% for m in messages %}{{ '[' + m['role'] + '] ' + m['content'] + '\n' }}{% endfor %}"


def shape_keys(w, vocab):
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_dimension_count(16)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)


def spm_vocab(extra_control=()):
    """the spm fixture's vocabulary as llama.cpp lists a sentencepiece file: (its vocab dict, the tokens with
    extra_control appended, their types: UNKNOWN, CONTROL for <s> </s> and extra_control, BYTE, NORMAL)"""
    j = json.load(open(os.path.join(ROOT, "fixtures", "tokenizers", "spm", "tokenizer.json")))
    vocab = j["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    tokens += list(extra_control)
    T = gguf.TokenType
    types = [T.UNKNOWN if t == "<unk>" else T.CONTROL if t in ("<s>", "</s>") or t in extra_control else
             T.BYTE if len(t) == 6 and t.startswith("<0x") and t.endswith(">") else T.NORMAL for t in tokens]
    return vocab, tokens, types


def spm_token_keys(w, tokens, types):
    """a sentencepiece file's model, pre, tokens, scores (-id, no merges: transformers derives them) and types"""
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_token_types(types)


def write_spm(path):
    vocab, tokens, types = spm_vocab()
    w = gguf.GGUFWriter(path, "llama")
    shape_keys(w, len(tokens))
    spm_token_keys(w, tokens, types)
    w.add_bos_token_id(vocab["<s>"])
    w.add_eos_token_id(vocab["</s>"])
    w.add_unk_token_id(vocab["<unk>"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(TEMPLATE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def bpe_vocab():
    """the bytelevel fixture's vocabulary as a GGUF lists it: (tokens, types, merges, bos id); two of its tokens
    CONTROL (the specials, the first of them the BOS) and one USER_DEFINED"""
    j = json.load(open(os.path.join(ROOT, "fixtures", "tokenizers", "bytelevel", "tokenizer.json")))
    vocab = dict(j["model"]["vocab"])
    for a in j.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    n = max(vocab.values()) + 1
    tokens = ["[UNUSED%d]" % i for i in range(n)]
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    T = gguf.TokenType
    specials = [a["content"] for a in j.get("added_tokens", []) if a.get("special")]
    types = [T.CONTROL if t in specials else T.NORMAL for t in tokens]
    user = tokens.index("Ġthe") if "Ġthe" in tokens else 300
    types[user] = T.USER_DEFINED
    bos = vocab[specials[0]] if specials else 0
    return tokens, types, merges, bos


def bpe_tokenizer_keys(w, pre, vocab):
    """tok_bpe.gguf's tokenizer keys (pre: tokenizer.ggml.pre) for bpe_vocab()'s vocabulary"""
    tokens, types, merges, bos = vocab
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(bos)
    w.add_add_bos_token(True)
    w.add_chat_template(TEMPLATE)


def write_bpe(path):
    vocab = bpe_vocab()
    w = gguf.GGUFWriter(path, "llama")
    shape_keys(w, len(vocab[0]))
    bpe_tokenizer_keys(w, "llama-bpe", vocab)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gemma(path):
    """A gemma2 file as llama.cpp writes Gemma's sentencepiece vocabulary: Gemma's five specials first, then the spm
    fixture's pieces (its own specials left out), tokens of two or more spaces stored as real spaces; scores that rise
    with the id (transformers derives Gemma's merges from the file order, not the scores: a rebuild that sorts by
    score gets other merges); add_bos_token true, add_space_prefix false."""
    w = gguf.GGUFWriter(path, "gemma2")
    tokens = gemma_tokens()
    shape_keys(w, len(tokens))
    gemma_tokenizer_keys(w, tokens)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gemma_tokens():
    """tok_gemma.gguf's vocabulary (also tests/ref/gen_gguf_gemma.py's model file)"""
    j = json.load(open(os.path.join(ROOT, "fixtures", "tokenizers", "spm", "tokenizer.json")))
    vocab = j["model"]["vocab"]
    spm = [None] * len(vocab)
    for t, i in vocab.items():
        spm[i] = t
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    tokens += [" " * len(t) if len(t) >= 2 and set(t) == {"\u2581"} else t for t in spm if t not in ("<unk>", "<s>", "</s>")]
    # a blank token with a newline, as llama.cpp writes "\u2581\n": transformers respells it "\u2581\u2581" too (a space in
    # it, nothing but whitespace), which adds the merge of two U+2581s
    return tokens + [" \n"]


def gemma_tokenizer_keys(w, tokens):
    """tok_gemma.gguf's tokenizer keys for the vocabulary of gemma_tokens()"""
    T = gguf.TokenType
    types = [T.UNKNOWN if t == "<unk>" else T.CONTROL if t in ("<pad>", "<eos>", "<bos>", "<mask>") else
             T.BYTE if len(t) == 6 and t.startswith("<0x") and t.endswith(">") else T.NORMAL for t in tokens]
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([float(i) for i in range(len(tokens))])
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(TEMPLATE)


def write_bert(path):
    """A tokenizer.ggml.model neither transformers nor sits-dist rebuilds (BERT's WordPiece): refused."""
    w = gguf.GGUFWriter(path, "llama")
    shape_keys(w, 3)
    w.add_tokenizer_model("bert")
    w.add_token_list(["[UNK]", "[CLS]", "[SEP]"])
    w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference(path):
    d = os.path.dirname(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=os.path.basename(path))
    out = []
    for text in CASES:
        ids = tok(text, add_special_tokens=True).input_ids
        out.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    tmp = tempfile.mkdtemp(prefix="sits-gguf-tok-")
    try:
        doc = {"generator": {"script": "tests/ref/gen_gguf_tokenizers.py", "transformers": transformers.__version__,
                             "tokenizers": tokenizers.__version__, "gguf": getattr(gguf, "__version__", "?")}, "files": {}}
        for name, fn in (("tok_spm.gguf", write_spm), ("tok_bpe.gguf", write_bpe), ("tok_gemma.gguf", write_gemma)):
            sub = os.path.join(tmp, name[:-5])
            os.makedirs(sub)
            fn(os.path.join(sub, name))
            doc["files"][name] = reference(os.path.join(sub, name))
        write_bert(os.path.join(tmp, "tok_bert.gguf"))
        text = json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
        if args.check:
            old = open(os.path.join(OUT, "expected.json"), encoding="utf-8").read()
            same = old == text and all(open(os.path.join(tmp, n[:-5], n), "rb").read() == open(os.path.join(OUT, n), "rb").read()
                                       for n in doc["files"])
            same = same and open(os.path.join(tmp, "tok_bert.gguf"), "rb").read() == \
                open(os.path.join(OUT, "tok_bert.gguf"), "rb").read()
            print("matches" if same else "DIFFERS")
            return 0 if same else 1
        os.makedirs(OUT, exist_ok=True)
        for n in doc["files"]:
            shutil.copy(os.path.join(tmp, n[:-5], n), os.path.join(OUT, n))
        shutil.copy(os.path.join(tmp, "tok_bert.gguf"), os.path.join(OUT, "tok_bert.gguf"))
        open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8").write(text)
        for n, cases in doc["files"].items():
            print(n, [len(c["ids"]) for c in cases])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
