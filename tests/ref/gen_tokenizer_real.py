#!/usr/bin/env python3
"""gen_tokenizer_real.py -- real tokenizers (llama.cpp's vocab GGUFs converted by transformers) and the ids
HF `tokenizers` gives for them, for tests/unit/test_tokenizer_real.

Source: the llama-cpp-python 0.3.36 sdist on PyPI vendors llama.cpp's `models/ggml-vocab-*.gguf` (the
vocabularies of real models) and, for most, `.inp` (test strings separated by a marker line) and `.out`
(the ids Hugging Face produced for them, one line per string, add_special_tokens=False).

Per GGUF:
  1. transformers' own GGUF tokenizer builder (transformers.integrations.gguf: get_gguf_tokenizer +
     convert_gguf_tokenizer; the `gguf` package reads the file) gives a tokenizers.Tokenizer.
  2. FIXUPS below replace the parts a GGUF does not record with what the model's published
     tokenizer.json has (llama.cpp names the model in `tokenizer.ggml.pre`; e.g. DeepSeek's Split/Digits
     sequence, Llama-3's ignore_merges, Llama-2's legacy normalizer). bert-bge (WordPiece) and
     nomic-bert-moe (Unigram + SentencePiece precompiled_charsmap) have no transformers builder; they are
     assembled from tokenizers' components the way transformers' BertConverter / XLMRobertaConverter do.
  3. The result is saved as tokenizer.json, reloaded with tokenizers.Tokenizer.from_str, and CHECKED
     against `.out`: a conversion that does not give the .out ids for every .inp string is DROPPED and
     listed with the reason. GGUFs without .inp/.out are kept as "unverified" (the C code is still compared
     with HF tokenizers on them, which is what the test checks).
  4. Expected values from HF tokenizers for every .inp string plus HARD strings (mixed scripts, emoji ZWJ
     sequences and skin tones, digit runs, whitespace runs, combining marks, NFKC-sensitive characters, the
     model's own added tokens inside text, leading/trailing spaces, the empty string): ids with and without
     add_special_tokens, decode(ids) and decode(ids_special) with skip_special_tokens False and True.

  5. VARIANTS: the components no converted model uses (NFD/NFKC/NFKD, Lowercase, StripAccents, Strip,
     Replace(Regex), the ByteLevel normalizer, Whitespace/WhitespaceSplit/CharDelimiterSplit/Split(String) and
     every split behavior and invert, Metaspace split, BPE continuing_subword_prefix/end_of_word_suffix/fuse_unk,
     Unigram byte_fallback, BPEDecoder, CTC, Strip(stop), Bert/RobertaProcessing, Sequence post-processor,
     UnicodeScripts,
     single_word/lstrip/rstrip/normalized added tokens) put on the real vocabularies, or a BPE trained here on
     the Debian Reference (Debian package debian-reference-en); HF tokenizers gives the expected values.

Writes tests/fixtures/tokenizers/real/<name>.json.xz (the tokenizer.json, xz) and expected.json.xz.

Usage:
  python3 tests/ref/gen_tokenizer_real.py [--sdist PATH] [--write] [names...]
    PATH: the sdist .tar.gz or its extracted directory; default: `pip download --no-deps --no-binary :all:
          llama-cpp-python==0.3.36` into a temp dir.
    without --write: regenerate into memory and compare with the committed files (exit 1 on a difference).
    --retrain: train the v-bpe-suffix BPE again (BpeTrainer's tie order is random per process, so by default
    the committed one is reused).
Needs: transformers 5.24.0, tokenizers 0.23.3, gguf 0.19.0 (tests/ref/requirements.txt), xz via Python lzma.
"""
import argparse
import glob
import json
import lzma
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings

warnings.filterwarnings("ignore")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "tokenizers", "real")
SDIST = "llama-cpp-python==0.3.36"
MARK = "\n__ggml_vocab_test__\n"

# ---------------------------------------------------------------- the models' own pre-tokenizers

def split(rx):
    return pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False)


BYTELEVEL_NOREGEX = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# deepseek-ai/deepseek-llm-7b-base tokenizer.json (llama.cpp llama-vocab.cpp DEEPSEEK_LLM has the same regexes)
DEEPSEEK_LLM = pre_tokenizers.Sequence([
    split("[\r\n]"),
    split("\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"),
    split("\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"),
    split("\\s+$"),
    split(CJK),
    pre_tokenizers.Digits(individual_digits=True),
    BYTELEVEL_NOREGEX,
])
# deepseek-ai/deepseek-coder-6.7b-base tokenizer.json
DEEPSEEK_CODER = pre_tokenizers.Sequence([
    split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"), split(CJK),
    pre_tokenizers.Digits(individual_digits=True), BYTELEVEL_NOREGEX,
])
# tiiuae/falcon-7b tokenizer.json: ByteLevel in the middle of the sequence
FALCON = pre_tokenizers.Sequence([
    pre_tokenizers.Punctuation(behavior="contiguous"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    pre_tokenizers.Digits(individual_digits=False),
    split("[0-9][0-9][0-9]"),
])
# bigcode/starcoder, smallcloudai/Refact-1_6B-fim, CohereForAI/c4ai-command-r-v01
DIGITS_BYTELEVEL = pre_tokenizers.Sequence([
    pre_tokenizers.Digits(individual_digits=True),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
])
LEGACY_SPM_NORMALIZER = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])


def fix_pre(pre, norm=None):
    def f(tok):
        tok.pre_tokenizer = pre
        if norm is not None:
            tok.normalizer = norm
        return tok
    return f


def fix_ignore_merges(tok):
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True  # meta-llama/Meta-Llama-3-8B tokenizer.json
    return Tokenizer.from_str(json.dumps(j))


def fix_legacy_spm(tok):
    tok.normalizer = LEGACY_SPM_NORMALIZER  # meta-llama/Llama-2-7b-hf tokenizer.json (legacy)
    tok.pre_tokenizer = None
    return tok


def fix_neox(tok):
    """EleutherAI/gpt-neox-20b (also MPT's tokenizer): NFC, ByteLevel, and the whitespace runs of 2..24
    spaces (ids 50254..50276) as added tokens with normalized=true, which the GGUF does not mark as such."""
    from tokenizers import AddedToken
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    runs = [(i, len(t)) for t, i in tok.get_vocab().items() if 50254 <= i <= 50276 and set(t) == {"\u0120"}]
    j = json.loads(tok.to_str())
    # the GGUF also lists space runs as user-defined tokens at other ids (added by the builder): drop those
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"].strip(" ")]
    j["added_tokens"] += [{"id": i, "content": " " * n, "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": True, "special": False} for i, n in sorted(runs)]
    tok = Tokenizer.from_str(json.dumps(j))
    return tok


FIXUPS = {
    "deepseek-llm": fix_pre(DEEPSEEK_LLM),
    "deepseek-coder": fix_pre(DEEPSEEK_CODER),
    "falcon": fix_pre(FALCON),
    "starcoder": fix_pre(DIGITS_BYTELEVEL),
    "refact": fix_pre(DIGITS_BYTELEVEL),
    "command-r": fix_pre(DIGITS_BYTELEVEL, normalizers.NFC()),
    "gpt-neox": fix_neox,
    "mpt": fix_neox,
    "llama-bpe": fix_ignore_merges,
    "llama-spm": fix_legacy_spm,
}

# ---------------------------------------------------------------- builders without a transformers builder

def gguf_arrays(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields
    get = lambda k: f[k].contents() if k in f else None
    return get


def build_bert(path):
    """BAAI/bge-small-en-v1.5 as transformers' BertConverter builds it. llama.cpp's converter wrote
    continuation pieces without "##" and word starts with a leading "▁"; undo that."""
    get = gguf_arrays(path)
    toks, types = get("tokenizer.ggml.tokens"), get("tokenizer.ggml.token_type")
    vocab = {}
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty == 3 or (t.startswith("[") and t.endswith("]")):
            s = t
        elif t.startswith("\u2581"):
            s = t[1:]
        else:
            s = "##" + t
        vocab.setdefault(s, i)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##")
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in
                            ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")])
    return tok


def build_xlmr_unigram(path):
    """nomic-ai/nomic-embed-text-v2-moe: XLM-RoBERTa's SentencePiece unigram, as transformers'
    XLMRobertaConverter (SpmConverter normalizer with the precompiled_charsmap, Metaspace, <s> $A </s>)."""
    get = gguf_arrays(path)
    toks, scores = get("tokenizer.ggml.tokens"), get("tokenizer.ggml.scores")
    charsmap = bytes(get("tokenizer.ggml.precompiled_charsmap"))
    vocab = [(t, float(s)) for t, s in zip(toks, scores)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap), normalizers.Strip(left=False, right=True),
                                           normalizers.Replace(Regex(" {2,}"), "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<s>", "<pad>", "</s>", "<unk>")])
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=True, lstrip=True)])
    return tok


BUILDERS = {"bert-bge": build_bert, "nomic-bert-moe": build_xlmr_unigram}

# ---------------------------------------------------------------- variants: real vocabularies, other components
# Components no converted model uses, put on real vocabularies (HF tokenizers computes the expected ids; these
# are not checked against llama.cpp). Each maps a base tokenizer to a new one.
CORPUS = "/usr/share/debian-reference/debian-reference.en.txt.gz"  # Debian package debian-reference-en (GPL-2+)
RETRAIN = False  # --retrain: train v-bpe-suffix again instead of reading the committed one
# Converted and checked like the others, but not committed: the repository must stay under the 64 MiB
# working-tree limit of the GPU machine's tool, and these repeat components the committed set covers
# (gemma-4 / command-r / qwen35 / aquila / deepseek-llm / gpt-neox / baichuan: byte-level or SentencePiece
# BPE like llama-bpe, qwen2, deepseek-coder, llama-spm). `--all` writes and checks them too (all passed).
SIZE_SKIP = {"aquila", "baichuan", "command-r", "deepseek-llm", "gemma-4", "gpt-neox", "qwen35"}
SIZE_MSG = "not committed (repository size budget); regenerate with --all to check it"


def with_json(tok, edit):
    j = json.loads(tok.to_str())
    edit(j)
    return Tokenizer.from_str(json.dumps(j))


def var_bert(tok):
    """NFKD + StripAccents + Lowercase + Replace(Regex) + Strip; WhitespaceSplit, Punctuation(merged_with_previous),
    Digits(contiguous); BertProcessing; WordPiece decoder without cleanup; normalized / single_word tokens."""
    from tokenizers import AddedToken
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.Replace(Regex("[0-9]{4,}"), "#"), normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Punctuation(behavior="merged_with_previous"),
                                                 pre_tokenizers.Digits(individual_digits=False)])
    tok.post_processor = processors.BertProcessing(("[SEP]", 102), ("[CLS]", 101))
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_tokens([AddedToken("Hello", single_word=True, normalized=True),
                    AddedToken("ZIP", single_word=False, normalized=False, lstrip=True, rstrip=True)])
    return tok


def var_bert_ctc(tok):
    """Whitespace pre-tokenizer, Lowercase + NFKC, CTC decoder."""
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.CTC(pad_token="[PAD]", word_delimiter_token="##s", cleanup=True)
    return tok


def var_gpt2(tok):
    """NFKC; Split(String, merged_with_next), Split(Regex, contiguous, invert), ByteLevel(add_prefix_space) at
    the end; RobertaProcessing; decoder Sequence[ByteLevel, Replace(Regex)]; lstrip/rstrip/single_word tokens."""
    from tokenizers import AddedToken
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex("[0-9]+|[.,!?]"), behavior="contiguous", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.post_processor = processors.RobertaProcessing(("<|endoftext|>", 50256), ("<|endoftext|>", 50256))
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace(Regex(" +"), " ")])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("world", single_word=True, normalized=True)])
    return tok


def var_gpt2_bytenorm(tok):
    """ByteLevel normalizer, Split(String "Ġ", merged_with_next) and Split(Regex, removed); no ByteLevel
    pre-tokenizer; post_processor Sequence[ByteLevel, TemplateProcessing]."""
    tok.normalizer = normalizers.ByteLevel()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\u0120", behavior="merged_with_next"),
                                                 pre_tokenizers.Split(Regex("\u010a+"), behavior="removed")])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|endoftext|> $A <|endoftext|>", pair="$A $B",
                                      special_tokens=[("<|endoftext|>", 50256)])])
    return tok


def var_spm(tok):
    """NFD + Replace; CharDelimiterSplit, Split(merged_with_previous), Metaspace(always, split); decoder
    Sequence[Metaspace, ByteFallback, Fuse, Strip(both)]; post_processor <s> $A </s>."""
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Replace("  ", " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.CharDelimiterSplit("."),
        pre_tokenizers.Split(Regex("[,;:]"), behavior="merged_with_previous"),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)])
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="always"),
                                     decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 1)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    return tok


def var_unigram_bytes(tok):
    """Unigram with byte_fallback (256 <0xXX> pieces appended at score -100) and Metaspace(first, no split)."""
    def edit(j):
        j["model"]["byte_fallback"] = True
        j["model"]["vocab"] += [[f"<0x{b:02X}>", -100.0] for b in range(256)]
    tok = with_json(tok, edit)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                     decoders.ByteFallback(), decoders.Fuse()])
    return tok


def trained_bpe_suffix(_tok):
    """BPE trained here with continuing_subword_prefix "##", end_of_word_suffix "</w>", unk + fuse_unk, on the
    Debian Reference text; Lowercase, WhitespaceSplit + Punctuation; BPEDecoder."""
    import gzip
    from tokenizers import trainers
    committed = os.path.join(OUT, "v-bpe-suffix.json.xz")
    if os.path.exists(committed) and not RETRAIN:
        # BpeTrainer breaks ties in Rust HashMap order (random per process): reuse the committed model
        return Tokenizer.from_str(lzma.decompress(open(committed, "rb").read()).decode("utf-8"))
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line.strip()][:20000]
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True, continuing_subword_prefix="##",
                               end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False, special_tokens=["[UNK]"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>", limit_alphabet=60)
    tok.train_from_iterator(lines, trainer)
    return tok


def var_scripts(tok):
    """UnicodeScripts then ByteLevel(use_regex) on Qwen2's byte-level BPE."""
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.UnicodeScripts(),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return tok


VARIANTS = {
    "v-scripts": ("qwen2", var_scripts),
    "v-bert-norms": ("bert-bge", var_bert),
    "v-bert-ctc": ("bert-bge", var_bert_ctc),
    "v-gpt2-splits": ("gpt-2", var_gpt2),
    "v-gpt2-bytenorm": ("gpt-2", var_gpt2_bytenorm),
    "v-spm-metaspace": ("llama-spm", var_spm),
    "v-unigram-bytes": ("nomic-bert-moe", var_unigram_bytes),
    "v-bpe-suffix": ("gpt-2", trained_bpe_suffix),
}

# ---------------------------------------------------------------- hard strings

HARD = [
    "",
    " ",
    "  leading and trailing  ",
    "\t\ttabs\tand\nnew\nlines\r\nCRLF\r\r\n\n\n",
    "    four spaces then \u3000 ideographic space and \u00a0 nbsp",
    "12345678901234567890 3.14159 1,000,000 ٠١٢٣ ١٢٣٤٥ 123abc456",
    "日本語のテキストと中文混合，还有한국어 텍스트。",
    "العربية مع English و ١٢٣ أرقام",
    "हिन्दी देवनागरी लिपि में पाठ",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "emoji 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇩🇪 😀😃",
    "combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 Z\u0351\u0352\u0353 café naïve",
    "NFKC: ﬁ ﬂ ﬃ ＦＵＬＬ ｗｉｄｔｈ ① ² ㎏ Å Ω ℌ ﹏",
    "MiXeD CaSe ÀÉÎÕÜ ß ẞ İstanbul ǅ",
    "code:\n    def f(x):\n        return x**2  # square\n\tif (a&&b) { c->d[0] = \"s\"; }",
    "punct!!! ??? ... --- ___ ((( ))) <<< >>> @#$%^&*",
    "url https://example.com/a?b=c&d=e#f and email a.b@c.de",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve",
    "\u200b zero\u200dwidth\u200c joiners \ufeff bom",
    "mixed 中English混合text并且123数字",
    "a" * 300,
    "Привет, мир! Ελληνικά κείμενο. עברית",
    "trailing newline\n",
    "\n",
    "   ",
]


POOL = list("abcXYZ019 _-.,!?'\"()<>#") + [" ", "  ", "\t", "\n", "\r\n", "\u3000", "\u00a0", "日", "本", "語", "한",
    "ア", "ー", "ع", "ر", "ب", "ि", "क", "्", "ไ", "ท", "👍", "🏽", "\u200d", "👨", "\u0301", "\u0308", "ﬁ", "Ｆ",
    "①", "²", "İ", "ß", "ǅ", "\u00ad", "\ufeff", "\u200b", "½", "٣", "🦙", "\u2581", "Ġ", "##", "</w>", "<0x41>"]


def random_strings(tok, name, n=40):
    """Seeded random mixes of POOL and the model's added tokens (differential fuzzing against HF)."""
    import random
    rnd = random.Random("sits-" + name)
    added = [a.content for a in tok.get_added_tokens_decoder().values()][:8]
    pool = POOL + added
    return ["".join(rnd.choice(pool) for _ in range(rnd.randint(1, 24))) for _ in range(n)]


def special_strings(tok):
    """Strings with the model's own added tokens (up to four) inside text."""
    added = [t for t in tok.get_added_tokens_decoder().values()]
    picks = [a.content for a in added if a.special][:3] + [a.content for a in added if not a.special][:1]
    out = []
    for s in picks:
        out += [f"Hello{s}world", f" {s} spaced {s}", f"{s}", f"a {s}\n{s}b"]
    return out


# ---------------------------------------------------------------- driver

def read_inp_out(gguf_path):
    if not os.path.exists(gguf_path + ".inp"):
        return None, None
    raw = open(gguf_path + ".inp", encoding="utf-8").read()
    if raw.endswith(MARK):
        raw = raw[: -len(MARK)]
    inp = raw.split(MARK)
    out = open(gguf_path + ".out", encoding="utf-8").read().split("\n")
    out = out[: len(inp)]
    return inp, [[int(x) for x in line.split()] for line in out]


def convert(name, path):
    if name in BUILDERS:
        return BUILDERS[name](path)
    arch, td, _ = get_gguf_tokenizer(path)
    tok, _ = convert_gguf_tokenizer(arch, td)
    if name in FIXUPS:
        tok = FIXUPS[name](tok)
    return tok


def hf_decode(tok, ids, skip):
    """None where HF tokenizers itself fails (BPEDecoder panics on an empty list); the test skips those."""
    try:
        return tok.decode(ids, skip_special_tokens=skip)
    except BaseException:  # noqa: BLE001 -- pyo3 PanicException derives from BaseException
        return None


def case(tok, text):
    e0 = tok.encode(text, add_special_tokens=False).ids
    e1 = tok.encode(text, add_special_tokens=True).ids
    return {"text": text, "ids": e0, "ids_special": e1,
            "decode": hf_decode(tok, e0, False),
            "decode_special": hf_decode(tok, e1, False),
            "decode_special_skip": hf_decode(tok, e1, True)}


def sdist_models(arg):
    tmp = tempfile.mkdtemp(prefix="sits_llamacpp_")
    if arg is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", tmp, SDIST],
                       check=True)
        arg = glob.glob(os.path.join(tmp, "llama_cpp_python-*.tar.gz"))[0]
    if os.path.isdir(arg):
        hits = glob.glob(os.path.join(arg, "**", "ggml-vocab-*.gguf"), recursive=True)
        return os.path.dirname(hits[0])
    with tarfile.open(arg) as tf:
        members = [m for m in tf.getmembers() if "/vendor/llama.cpp/models/ggml-vocab-" in m.name]
        tf.extractall(tmp, members=members, filter="data")
    return os.path.dirname(glob.glob(os.path.join(tmp, "**", "ggml-vocab-*.gguf"), recursive=True)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sdist")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--retrain", action="store_true", help="train v-bpe-suffix again (not reproducible bit for bit)")
    ap.add_argument("--all", action="store_true", help="also the tokenizers left out for size (SIZE_SKIP)")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    global RETRAIN
    RETRAIN = a.retrain
    mdir = sdist_models(a.sdist)
    expected = {"generator": {"script": "tests/ref/gen_tokenizer_real.py", "source": SDIST,
                              "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
                "tokenizers": {}, "dropped": {}}
    files = {}
    for path in sorted(glob.glob(os.path.join(mdir, "ggml-vocab-*.gguf"))):
        name = os.path.basename(path)[len("ggml-vocab-"):-len(".gguf")]
        if a.names and name not in a.names:
            continue
        if name in SIZE_SKIP and not a.all and name not in a.names:
            expected["dropped"][name] = SIZE_MSG
            continue
        try:
            tok = convert(name, path)
        except Exception as e:  # noqa: BLE001 -- reported, not hidden
            expected["dropped"][name] = f"conversion failed: {type(e).__name__}: {e}"[:300]
            print(f"{name}: DROPPED ({expected['dropped'][name]})")
            continue
        js = tok.to_str()
        tok = Tokenizer.from_str(js)  # what the C code reads
        inp, out = read_inp_out(path)
        verified = False
        if inp is not None:
            bad = [(t, tok.encode(t, add_special_tokens=False).ids, o) for t, o in zip(inp, out)
                   if tok.encode(t, add_special_tokens=False).ids != o]
            if bad:
                t, got, want = bad[0]
                expected["dropped"][name] = (f"{len(bad)}/{len(inp)} .inp strings differ from .out, first {t!r}: "
                                             f"{got[:12]} != {want[:12]}")[:400]
                print(f"{name}: DROPPED ({expected['dropped'][name]})")
                continue
            verified = True
        texts = list(inp or []) + HARD + special_strings(tok) + random_strings(tok, name)
        expected["tokenizers"][name] = {
            "file": f"{name}.json.xz", "verified_against_llama_cpp_out": verified,
            "n_inp": len(inp or []), "cases": [case(tok, t) for t in texts]}
        files[f"{name}.json.xz"] = js.encode("utf-8")
        print(f"{name}: {'verified' if verified else 'unverified'} ({len(inp or [])} .inp strings), {len(texts)} cases")
    for name, (base, make) in VARIANTS.items():
        if a.names and name not in a.names:
            continue
        bpath = os.path.join(mdir, f"ggml-vocab-{base}.gguf")
        tok = Tokenizer.from_str(make(convert(base, bpath)).to_str())
        js = tok.to_str()
        inp, _ = read_inp_out(bpath)
        texts = list(inp or []) + HARD + special_strings(tok) + random_strings(tok, name)
        expected["tokenizers"][name] = {
            "file": f"{name}.json.xz", "verified_against_llama_cpp_out": False, "variant_of": base,
            "what": make.__doc__.strip().replace("\n", " "), "n_inp": len(inp or []),
            "cases": [case(tok, t) for t in texts]}
        files[f"{name}.json.xz"] = js.encode("utf-8")
        print(f"{name}: variant of {base}, {len(texts)} cases")
    if a.names and os.path.exists(os.path.join(OUT, "expected.json.xz")):  # a partial run updates the others
        old = json.loads(lzma.decompress(open(os.path.join(OUT, "expected.json.xz"), "rb").read()))
        for k, v in old["tokenizers"].items():
            if k not in a.names:
                expected["tokenizers"].setdefault(k, v)
        for k, v in old["dropped"].items():
            if k not in a.names and k not in expected["tokenizers"]:
                expected["dropped"].setdefault(k, v)
        expected["tokenizers"] = dict(sorted(expected["tokenizers"].items()))
    files["expected.json.xz"] = json.dumps(expected, ensure_ascii=False, indent=0).encode("utf-8")
    if a.write:
        os.makedirs(OUT, exist_ok=True)
        for fn, data in files.items():
            with open(os.path.join(OUT, fn), "wb") as f:
                f.write(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        print(f"wrote {len(files)} files to {OUT}")
        return 0
    diff = 0
    for fn, data in files.items():
        p = os.path.join(OUT, fn)
        if not os.path.exists(p) or lzma.decompress(open(p, "rb").read()) != data:
            print(f"differs: {fn}")
            diff = 1
    print("check:", "differences" if diff else "identical to the committed fixtures")
    return diff


if __name__ == "__main__":
    sys.exit(main())
