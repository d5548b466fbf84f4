#!/bin/bash
# make_seeds.sh [BUILDDIR] -- (re)writes the committed seed corpora tests/fuzz/corpus/<target>/ from the
# fixtures and, for the binary formats, with gen_seeds (built by build.sh into BUILDDIR).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
b=${1:-/tmp/sits-fuzz-build}
c="$here/corpus"
for t in safetensors gguf st_index config tokenizer request plan kv_shard kv_move template; do rm -rf "${c:?}/$t"; mkdir -p "$c/$t"; done

# safetensors: headers of the fixture checkpoints (header + a little data, truncated to 4 KiB max)
# and hand-made small files
python3 - "$c/safetensors" "$top/tests/fixtures/models" <<'PY'
import json, os, struct, sys
out, fix = sys.argv[1], sys.argv[2]
def st(name, hdr, data=b""):
    h = json.dumps(hdr, separators=(",", ":")).encode()
    open(os.path.join(out, name), "wb").write(struct.pack("<Q", len(h)) + h + data)
st("one_f32", {"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(range(16)))
st("mixed", {"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
             "b": {"dtype": "F16", "shape": [1, 1], "data_offsets": [6, 8]},
             "c": {"dtype": "I32", "shape": [], "data_offsets": [8, 12]},
             "d": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [12, 16]}}, bytes(16))
st("empty_tensor", {"e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [0, 0]}})
st("empty_header", {})
# a real fixture's header with a shortened data area (tensors past the end are refused)
for d in sorted(os.listdir(fix)):
    for f in sorted(os.listdir(os.path.join(fix, d))):
        if f.endswith(".safetensors"):
            b = open(os.path.join(fix, d, f), "rb").read()
            n = struct.unpack("<Q", b[:8])[0]
            hdr = json.loads(b[8:8 + n])
            # keep 3 tensors, rebase into a small data area
            keep = {k: v for k, v in hdr.items() if k == "__metadata__"}
            off = 0
            for k in sorted(x for x in hdr if x != "__metadata__")[:3]:
                v = dict(hdr[k]); sz = v["data_offsets"][1] - v["data_offsets"][0]
                if sz > 2048: continue
                v["data_offsets"] = [off, off + sz]; off += sz; keep[k] = v
            st("fixture_%s_%s" % (d, f.split(".")[0]), keep, bytes(off))
            break
PY
# index: the fixture's (names rewritten to the harness's shards a/b, tensors x, y, z) and variants
cat > "$c/st_index/ok" <<'J'
{"metadata": {"total_size": 30}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}
J
printf '%s' '{"weight_map": {"x": "a.safetensors"}}' > "$c/st_index/subset"
printf '%s' '{"weight_map": {"z": "a.safetensors"}}' > "$c/st_index/wrong_file"
printf '%s' '{"weight_map": {"x": "../a.safetensors"}}' > "$c/st_index/escape"
printf '%s' '{"weight_map": {"x": "missing.safetensors"}}' > "$c/st_index/missing"
printf '%s' '{"weight_map": []}' > "$c/st_index/not_object"
head -c 400 "$top/tests/fixtures/models/mistral_sharded/model.safetensors.index.json" > "$c/st_index/fixture_head"
# config.json: every fixture config + variants
for f in "$top"/tests/fixtures/models/*/config.json "$top"/tests/fixtures/tokenizers/*/config.json; do
  cp "$f" "$c/config/$(basename "$(dirname "$f")")_$(basename "$(dirname "$(dirname "$f")")")"
done
cat > "$c/config/llama3_rope" <<'J'
{"model_type":"llama","vocab_size":128,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192},"eos_token_id":[1,2,3],"rms_norm_eps":1e-5,"max_position_embeddings":131072}
J
cat > "$c/config/linear_rope" <<'J'
{"architectures":["MistralForCausalLM"],"vocab_size":32,"hidden_size":16,"intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":null,"head_dim":null,"rope_scaling":{"type":"linear","factor":2.0},"sliding_window":null,"torch_dtype":"bfloat16"}
J
# [fp8] a block-wise "fp8" quantization_config (refused by the loader) beside the fixture's compressed-tensors one
python3 - "$top/tests/fixtures/models/llama3_fp8/config.json" "$c/config/fp8_block_variant" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
# tokenizer: the fixture cases (mode 0: text) and some id lists (mode 1, 3: ids, u16 LE)
python3 - "$c/tokenizer" "$top/tests/fixtures/tokenizers/bytelevel/cases.json" <<'PY'
import json, struct, sys
out, cases = sys.argv[1], json.load(open(sys.argv[2]))
for i, cs in enumerate(cases[:40]):
    open("%s/text_%02d" % (out, i), "wb").write(b"\x00" + cs["text"].encode())
    ids = cs.get("ids_bos") or cs["ids"]
    open("%s/ids_%02d" % (out, i), "wb").write(bytes([1 + 2 * (i % 2)]) + b"".join(struct.pack("<H", x) for x in ids))
open(out + "/bad_utf8", "wb").write(b"\x00ab\xc3(\xed\xa0\x80z")
open(out + "/ids_oov", "wb").write(b"\x01" + struct.pack("<HHH", 5, 60000, 7))
PY
# request bodies: mode byte (bit 0 chat, bits 1-3 template), then the body
w() { printf '%b' "$2" > "$c/request/$1"; }
w c_basic '\x00{"model":"m","prompt":"Hello","max_tokens":8,"temperature":0}'
w c_ids '\x00{"prompt":[1,2,3],"max_tokens":4,"top_k":5,"top_p":0.9,"seed":7,"stream":true,"stream_options":{"include_usage":true}}'
w c_stop '\x00{"prompt":"a b c","stop":["\\n","ab"],"ignore_eos":true,"max_tokens":3}'
w c_stop1 '\x00{"prompt":"x","stop":"END"}'
w c_bad '\x00{"model":"m","prompt":"x","max_tokens":100000}'
w c_list '\x00{"prompt":["only one"],"n":1,"echo":false,"logprobs":null}'
w chat_l3 '\x03{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Hi"}],"max_completion_tokens":5}'
w chat_parts '\x09{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"c"},{"role":"user","content":"d"}],"stream":true}'
w chat_dev '\x05{"messages":[{"role":"developer","content":"s"},{"role":"user","content":"u"}],"temperature":1.5}'
w chat_none '\x01{"messages":[{"role":"user","content":"x"}]}'
w chat_bad '\x07{"messages":[{"role":"tool","content":"x"}]}'
# gguf: the unit-test fixture (written by gguf-py: every supported type, metadata of every value type) and
# its K-quant variant
cp "$top/tests/unit/data/gguf/tiny.gguf" "$top/tests/unit/data/gguf/kquant.gguf" "$c/gguf/"
# plan, kv_shard, kv_move: written by the library
"$b/gen_seeds" "$c"
for t in safetensors gguf st_index config tokenizer request plan kv_shard kv_move; do echo "$t: $(ls "$c/$t" | wc -l) seeds"; done

# template: a dozen real chat templates of different families (tests/fixtures/templates), as they are
for f in meta-llama-Llama-3.1-8B-Instruct Qwen-Qwen2.5-7B-Instruct Qwen-Qwen3-0.6B mistralai-Mistral-Nemo-Instruct-2407 \
         google-gemma-2-2b-it openai-gpt-oss-120b microsoft-Phi-3.5-mini-instruct deepseek-ai-DeepSeek-V3.1 \
         NousResearch-Hermes-3-Llama-3.1-8B-tool_use CohereForAI-c4ai-command-r7b-12-2024-tool_use \
         meetkai-functionary-medium-v3.1 HuggingFaceTB-SmolLM3-3B; do
  cp "$top/tests/fixtures/templates/$f.jinja" "$c/template/$f"
done
