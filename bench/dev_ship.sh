#!/usr/bin/env bash
# bench/dev_ship.sh stage [REV...] | out | back -- readies this checkout for the lent GPU machine's `run` tool (see
# ../shared/device/README.md); run locally from the checkout root. Not a test.
#   stage  ../shared/device/stage.sh (setup.sh and the debs into .dev/), then the utf8proc debs the GPU machine lacks
#          (configure requires utf8proc; stage.sh's debs do not bring it: `apt-get download` here), then for each REV
#          a `git archive` without the test data in .dev/revs/REV.tgz -- a base to build in the same call
#          (tar xzf .dev/revs/REV.tgz -C DIR; autoreconf -fi; configure; make bench/sits-bench-decode ...)
#   out    moves the largest test data (the real tokenizers, the GGUF fixtures, models/demo-draft) to $SHIP_STASH
#          (default ../ship-stash) so that the tree travels under the tool's 64 MiB; gpu_suite.sh's grammar part,
#          tests1's spec_cuda.sh and the tokenizer / GGUF tests need them back
#   back   restores them (then `git status` is clean again)
set -euo pipefail
[ -f configure.ac ] && [ -d bench ] || { echo "dev_ship.sh: run it from the checkout root" >&2; exit 2; }
stash=${SHIP_STASH:-../ship-stash}
big=(tests/fixtures/tokenizers/real tests/unit/data/gguf models/demo-draft)
case ${1:-} in
  stage)
    shift
    bash ../shared/device/stage.sh > /dev/null
    if ! ls .dev/debs/libutf8proc2_*.deb > /dev/null 2>&1; then
      (cd .dev/debs && apt-get download libutf8proc2 libutf8proc-dev > /dev/null 2>&1) ||
        { echo "dev_ship.sh: apt-get download libutf8proc2 libutf8proc-dev failed" >&2; exit 1; }
    fi
    mkdir -p .dev/revs
    for r in "$@"; do
      git archive "$r" -- . ':!models' ':!tests/fixtures' ':!tests/unit/data' | gzip > ".dev/revs/$r.tgz"
    done
    echo "staged: $(ls .dev/debs/*.deb | wc -l) debs, revs: $(ls .dev/revs 2>/dev/null | tr '\n' ' ')"
    ;;
  out)
    mkdir -p "$stash"
    for p in "${big[@]}"; do
      [ -e "$p" ] || continue
      [ -e "$stash/$p" ] && { echo "dev_ship.sh: $stash/$p exists already: run 'back' first" >&2; exit 1; }
      mkdir -p "$stash/$(dirname "$p")" && mv "$p" "$stash/$p"
    done
    ;;
  back)
    for p in "${big[@]}"; do
      [ -e "$stash/$p" ] || continue
      [ -e "$p" ] && { echo "dev_ship.sh: $p is back already" >&2; exit 1; }
      mkdir -p "$(dirname "$p")" && mv "$stash/$p" "$p"
    done
    ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
# (du fails on the tracked files moved out: its total still counts the rest)
travel=$( { git ls-files -z -co --exclude-standard | du -cshL --files0-from=- 2>/dev/null || true; } | tail -1 | cut -f1)
echo "the tree travels about $travel (+ .dev: $(du -sh .dev 2>/dev/null | cut -f1); limit 64 MiB)"
