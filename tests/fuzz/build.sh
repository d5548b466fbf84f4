#!/bin/bash
# build.sh [OUTDIR] -- builds the libFuzzer targets of tests/fuzz with clang (Debian: apt-get install
# clang; libFuzzer ships in libclang-rt-NN-dev / the llvm package), linking the project sources
# directly with -fsanitize=fuzzer,address,undefined. Not part of make check.
# Output: OUTDIR (default /tmp/sits-fuzz-build)/fuzz_<name> for each target, and gen_seeds (a
# plain program that regenerates the binary seed corpora with the library's own writers).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${1:-/tmp/sits-fuzz-build}
CC=${CC:-clang}
command -v "$CC" >/dev/null || { echo "build.sh: $CC not found (apt-get install clang)"; exit 77; }
mkdir -p "$out/obj"

# a minimal config.h (what configure would define for these sources)
cat > "$out/config.h" <<CFG
#define _GNU_SOURCE 1
#define PCRE2_CODE_UNIT_WIDTH 8
#define HAVE_JANSSON 1
#define HAVE_PCRE2 1
#define HAVE_LZ4 1
CFG
libs="jansson libpcre2-8 liblz4 libutf8proc"
echo "#define HAVE_UTF8PROC 1" >> "$out/config.h"

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="-std=c11 -O1 -g -fopenmp -include $out/config.h -I$top/src -I$top $(pkg-config --cflags $libs)"
CFLAGS="$CFLAGS -DSITS_FUZZ_TOKENIZER_DEFAULT=\"$top/tests/fixtures/tokenizers/bytelevel/tokenizer.json\""
# headers only (sched.h -> sample.h -> comm.h include mpi.h); no MPI code is linked
MPI_INC=$(mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null || true)
CFLAGS="$CFLAGS $MPI_INC"
LIBS="$(pkg-config --libs $libs) -lm -lpthread"
OMP="-fopenmp"
# clang's OpenMP runtime: libomp (Debian libomp-NN-dev); fall back to gcc's libgomp
if ! echo 'int main(void){return 0;}' | $CC -x c -fopenmp - -o "$out/omp_probe" 2>/dev/null; then
  OMP="-fopenmp=libgomp"
fi
CFLAGS="${CFLAGS/-fopenmp/$OMP}"

srcs="src/util/status.c src/util/log.c src/util/params.c src/util/dtype.c
      src/model/safetensors.c src/model/gguf.c src/model/config.c
      src/tokenizer/tokenizer.c src/tokenizer/tok_util.c src/tokenizer/normalizers.c src/tokenizer/pretok.c
      src/tokenizer/models.c src/tokenizer/decoders.c src/tokenizer/postproc.c src/tokenizer/chat.c
      src/template/lexer.c src/template/parser.c src/template/value.c src/template/eval.c src/template/builtins.c
      src/server/api.c src/server/textout.c
      src/sched/plan.c src/kv/shard.c src/kv/quant.c src/kv/move.c src/backend/kv_dtype.c"
objs=()
for s in $srcs; do
  o="$out/obj/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$top/$s" -nt "$o" ]; then
    echo "  CC $s"
    $CC $CFLAGS $SAN -fsanitize=fuzzer-no-link -c "$top/$s" -o "$o"
  fi
  objs+=("$o")
done
rm -f "$out/libsits_fuzz.a"
ar cr "$out/libsits_fuzz.a" "${objs[@]}"

for t in safetensors gguf st_index config tokenizer request plan kv_shard kv_move template; do
  echo "  LD fuzz_$t"
  $CC $CFLAGS $SAN -fsanitize=fuzzer "$here/fuzz_$t.c" "$out/libsits_fuzz.a" $LIBS $OMP -o "$out/fuzz_$t"
done
# seed generator: same sources, no fuzzer runtime
# (the objects carry fuzzer-no-link coverage hooks: link the fuzzer runtime's no-main variant)
$CC $CFLAGS $SAN -fsanitize=fuzzer-no-link "$here/gen_seeds.c" "$out/libsits_fuzz.a" $LIBS $OMP -o "$out/gen_seeds"
echo "fuzz targets in $out"
