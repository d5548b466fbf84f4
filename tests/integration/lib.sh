# lib.sh -- helpers for the shell tests: results, reference lookups, rank pids.
. "$top_srcdir/tests/integration/mpi_env.sh"
SITS="$top_builddir/sits-dist"
FIX="$top_srcdir/tests/fixtures/models"
n_fail=0
ok()   { echo "ok   $*"; }
bad()  { echo "FAIL $*"; n_fail=$((n_fail + 1)); }
finish() { [ "$n_fail" -eq 0 ] && { echo "PASS"; exit 0; }; echo "$n_fail check(s) failed"; exit 1; }
# ref_row FILE KEY I: row I of a list-of-lists KEY in a reference.json written by gen_fixtures.py
# (one row per line), as comma-separated ids without spaces.
ref_row() { awk -v key="\"$2\": [" -v i="$3" 'index($0, key) { on = 1; n = -1; next } on { n++; if (n == i) { gsub(/[][ ]/, ""); sub(/,$/, ""); print; exit } }' "$1"; }
# pid of world rank R among the running processes of command line pattern P
rank_pid() {
  for p in $(pgrep -f "$2"); do
    if { tr '\0' '\n' < /proc/$p/environ; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return 0; fi
  done
  return 1
}

# a TCP port free right now, below the kernel's ephemeral range (32768-60999): an ephemeral pick can be
# taken a moment later as the source port of a neighbouring test's connection (make -j check), and
# slurmd then failed to bind it ("Address already in use") in all three tries of a CI run; a server on a port
# picked from the PID (20000 + pid % 20000, up to 39999) hit the same in launch_recipes.sh. Without python3:
# that PID pick.
free_port() {
  command -v python3 >/dev/null || { echo $((20000 + $$ % 12000)); return; }
  python3 -c '
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(20000, max(20001, min(lo, 32768)))
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
'
}
# serve_setup DIR: a model directory with the byte-level fixture tokenizer and a config for random weights
serve_setup() {
  local T="$top_srcdir/tests/fixtures/tokenizers/bytelevel"
  mkdir -p "$1" && cp "$T"/tokenizer.json "$T"/tokenizer_config.json "$1/"
  cat > "$1/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 3013, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
 "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001}
JSON
  port=$(free_port)
  url=http://127.0.0.1:$port
}
# serve_setup_slow DIR: serve_setup with a model big enough (8 layers, hidden 256) that a request of a
# few hundred tokens streams for seconds on the 2-core CI machine
serve_setup_slow() {
  serve_setup "$1"
  cat > "$1/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 3013, "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 8,
 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
 "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001}
JSON
}
# rename_special DIR ID=NAME...: the fixture tokenizer's added (special) tokens ID renamed NAME in DIR's tokenizer.json
# and tokenizer_config.json -- a model's control tokens (Mistral's [TOOL_CALLS], [THINK]) on the byte-level fixture
rename_special() {
  local d=$1; shift
  "${PYTHON:-python3}" - "$d" "$@" <<'PYEOF'
import json, sys
d, names = sys.argv[1], {int(a.split("=", 1)[0]): a.split("=", 1)[1] for a in sys.argv[2:]}
t = json.load(open(d + "/tokenizer.json"))
for a in t["added_tokens"]:
    a["content"] = names.get(a["id"], a["content"])
json.dump(t, open(d + "/tokenizer.json", "w"))
c = json.load(open(d + "/tokenizer_config.json"))
for k, v in c.get("added_tokens_decoder", {}).items():
    v["content"] = names.get(int(k), v["content"])
json.dump(c, open(d + "/tokenizer_config.json", "w"))
PYEOF
}
# serve_tmp: a temporary directory $tmp, removed (and any rank still running from it killed) on exit
serve_tmp() {
  tmp=$(mktemp -d)
  srv=
  trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
}
# need_py_curl: skip (77) without curl or python3; sets PY
need_py_curl() {
  command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
  PY=${PYTHON:-python3}
  command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
}
# serve_np NP DIR [flags...]: mpirun -np NP sits-dist serving DIR on a free port (--port 0); sets
# $srv, $port and $url from the server's ready line; waits for /health
serve_np() {
  local np=$1 dir=$2; shift 2
  $SITS_MPIRUN -np "$np" "$SITS" --model "$dir" --port 0 "$@" > "$tmp/out" 2> "$tmp/err" &
  srv=$!
  for _ in $(seq 900); do   # up to 90 s: three or four ranks starting on a loaded 2-core CI machine
    port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
    if [ -n "$port" ]; then
      url=http://127.0.0.1:$port
      curl -sf "$url/health" >/dev/null && return 0
    fi
    kill -0 $srv 2>/dev/null || break
    sleep 0.1
  done
  bad "server did not start"; cat "$tmp/err"; return 1
}
# serve_start DIR [flags...]: serve_np 2 with random weights (--load-format dummy)
serve_start() {
  local dir=$1; shift
  serve_np 2 "$dir" --load-format dummy "$@"
}
# stop_np PATTERN: SIGTERM to world rank 0 of the job whose command lines match PATTERN (the front-end
# stops every rank), then wait for $srv; 0 when the job ended cleanly within 30 s, else it is killed: 1
stop_np() {
  local p; p=$(rank_pid 0 "$1") && kill -TERM "$p"
  for _ in $(seq 300); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  if kill -0 $srv 2>/dev/null; then pkill -9 -f "$1"; wait $srv; srv=; return 1; fi
  wait $srv; local rc=$?; srv=; return $rc
}
