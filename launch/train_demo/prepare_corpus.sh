#!/usr/bin/env bash
# prepare_corpus.sh -- build the plain-text training corpus of the embedded demo model (models/demo/).
#
# Source: the Debian package `python3.11-doc` (the Python 3.11 documentation, Python Software
# Foundation; licence: PSF License Version 2, see /usr/share/doc/python3.11-doc/copyright). We read its
# reStructuredText sources (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt, ~12 MB, 497 files),
# strip the markup (directives, roles, heading rules, link targets) and keep prose and code examples.
#
# Output (default OUTDIR .demo_corpus/, ignored by git, carried to the GPU machine):
#   train.txt.xz    99 % of the paragraph blocks
#   heldout.txt.xz  1 % (every 100th block of ~2 KB, chosen by position, so it is never trained on)
#   Documents are separated by a line holding one form feed (\f); the trainer puts <|end_of_text|> there.
#
# Usage: bash launch/train_demo/prepare_corpus.sh [OUTDIR]
#        (installs python3.11-doc with apt-get when missing; needs python3 and xz)
set -euo pipefail
src=/usr/share/doc/python3.11/html/_sources
out=${1:-.demo_corpus}
if [ ! -d "$src" ]; then
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q python3.11-doc
fi
mkdir -p "$out"
python3 - "$src" "$out" <<'PY'
import os, re, sys
src, out = sys.argv[1], sys.argv[2]
ROLE = re.compile(r":[a-zA-Z:+-]+:`([^`]*)`")
LIT = re.compile(r"``([^`]+)``")
REF = re.compile(r"`([^`<]*?)\s*<[^>]*>`_{1,2}")
RULE = re.compile(r"^([=\-~^*#+\"'`.:_])\1{2,}\s*$")
SKIP_BODY = ("index", "toctree", "highlight", "sectionauthor", "moduleauthor", "testsetup", "testcleanup",
             "only", "raw", "image", "figure", "include", "literalinclude", "tabularcolumns", "csv-table",
             "audit-event", "impl-detail", "productionlist", "seealso")

def role(m):
    t = m.group(1).lstrip("!~")
    m2 = re.match(r"^(.*?)\s*<[^>]*>$", t)
    return m2.group(1) if m2 else t

def clean(text):
    out, skip_indent = [], None
    for ln in text.split("\n"):
        s = ln.strip()
        ind = len(ln) - len(ln.lstrip())
        if skip_indent is not None:
            if s == "" or ind > skip_indent:
                continue
            skip_indent = None
        if s.startswith(".. "):
            m = re.match(r"\.\.\s+([\w:-]+)::\s*(.*)$", s)
            if m is None or m.group(1) in SKIP_BODY:   # comment, link target or skipped directive
                skip_indent = ind
                continue
            if m.group(2):                             # e.g. ".. function:: open(file)" -> "open(file)"
                out.append(" " * ind + m.group(2))
            continue
        if s.startswith(":") and re.match(r"^:[\w -]+:( |$)", s) and not ROLE.match(s):
            continue                                   # directive option / field list marker
        if RULE.match(s) or s == "::":
            continue
        ln = REF.sub(lambda m: m.group(1), ln)
        ln = ROLE.sub(role, ln)
        ln = LIT.sub(lambda m: m.group(1), ln)
        if ln.endswith("::"):
            ln = ln[:-1]
        out.append(ln.rstrip())
    t = "\n".join(out)
    t = re.sub(r"\n{3,}", "\n\n", t)
    return t.strip("\n") + "\n"

files = []
for root, _, names in os.walk(src):
    files += [os.path.join(root, n) for n in names if n.endswith(".txt")]
files.sort()
train, held, nblk = [], [], 0
for f in files:
    with open(f, encoding="utf-8", errors="replace") as fh:
        doc = clean(fh.read())
    # blocks of whole paragraphs, ~2 KB each
    paras, blocks, cur = doc.split("\n\n"), [], ""
    for p in paras:
        cur = cur + "\n\n" + p if cur else p
        if len(cur) >= 2000:
            blocks.append(cur); cur = ""
    if cur:
        blocks.append(cur)
    tr = []
    for b in blocks:
        (held if nblk % 100 == 50 else tr).append(b)
        nblk += 1
    if tr:
        train.append("\n\n".join(tr))
for name, docs in (("train.txt", train), ("heldout.txt", held)):
    with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
        fh.write("\n\f\n".join(docs) + "\n")
print("files %d blocks %d held-out blocks %d" % (len(files), nblk, len(held)))
PY
xz -T2 -6 -f "$out/train.txt" "$out/heldout.txt"
ls -l "$out"
