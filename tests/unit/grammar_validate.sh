#!/bin/sh
# Structured output, the independent check: tests/unit/test_grammar's random walks (uniform draws among
# the tokens each mask allows) must produce documents that python jsonschema validates against their
# schema, that re.fullmatch accepts for their regex, that are one of their choices.
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
python3 -c 'import jsonschema' 2>/dev/null || { echo "SKIP: python jsonschema is not installed"; exit 77; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
./tests/unit/test_grammar "$top_srcdir/tests/unit/data/grammar_cases.json" "$top_srcdir/tests/unit/data/grammar_refused.json" \
    "$top_srcdir/tests/fixtures/tokenizers/bytelevel" "$out" || exit 1
python3 - "$out" <<'PY'
import json, re, sys, collections
import jsonschema
bad, n, per = 0, 0, collections.Counter()
for line in open(sys.argv[1]):
    o = json.loads(line)
    n += 1
    per[o["name"]] += 1
    t = o["text"]
    try:
        if "schema" in o:
            jsonschema.validate(json.loads(t), o["schema"], cls=jsonschema.Draft202012Validator)
        elif "regex" in o:
            assert re.fullmatch(o["regex"], t), "no match"
        else:
            assert t in o["choice"], "not a choice"
    except Exception as e:
        bad += 1
        if bad <= 10:
            print("MISMATCH %s (%s): %r: %s" % (o["name"], o["vocab"], t[:200], str(e).splitlines()[0]))
print("validated %d documents of %d cases, %d invalid" % (n, len(per), bad))
sys.exit(1 if bad or n == 0 else 0)
PY
