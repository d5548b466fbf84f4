#!/bin/bash
# install.sh -- issue 26: `make install` as a site runs it, from this build tree.
#   - DESTDIR staging with prefix /opt/sits-dist/VERSION: the binary, the man page, the demo model
#     (byte-identical to models/demo), the launch recipes (executable), the Prometheus files, the
#     modulefile naming /opt/... (not the staging folder, no @placeholder@ left); `make uninstall`
#     removes every file again.
#   - the man page: groff -man -ww finds nothing to warn about, it is exactly `sits-dist --help-man`,
#     and every flag and environment variable of `sits-dist --print-config` has its entry.
#   - a real prefix and Lmod (Debian's lmod): `module use PREFIX/share/modulefiles; module load
#     sits-dist` puts the installed binary first on PATH and its man page on MANPATH; the installed
#     binary on $SITS_DIST_DEMO_MODEL prints what the build tree's binary prints on models/demo
#     (greedy); `module unload` takes them away. (Skipped part, and 77 if the rest passed, without
#     Lmod: apt-get install lmod.)
. "$top_srcdir/tests/integration/lib.sh"
command -v groff >/dev/null 2>&1 || { echo "SKIP: no groff (apt-get install groff-base)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
version=$("$SITS" --version | sed -n 's/^sits-dist //p')
MK="${MAKE:-make}"
files_under() { (cd "$1" 2>/dev/null && find . -type f | sort); }

# --- DESTDIR staging -------------------------------------------------------------------------------
P=/opt/sits-dist/$version D=$tmp/dest
if ! $MK -s -C "$top_builddir" install DESTDIR="$D" prefix="$P" > "$tmp/install.log" 2>&1; then
  bad "make install DESTDIR prefix=$P"; tail -20 "$tmp/install.log"; finish
fi
R=$D$P
miss=
for f in bin/sits-dist share/man/man1/sits-dist.1 share/sits-dist/launch/sits-dist.sbatch share/sits-dist/launch/mpirun-dgx.sh \
         share/sits-dist/launch/hosts.example share/sits-dist/launch/prometheus.yml share/sits-dist/launch/sits-dist.rules.yml \
         share/sits-dist/launch/modulefile.lua "share/modulefiles/sits-dist/$version.lua"; do
  [ -f "$R/$f" ] || miss="$miss $f"
done
for f in bin/sits-dist share/sits-dist/launch/sits-dist.sbatch share/sits-dist/launch/mpirun-dgx.sh; do
  [ -x "$R/$f" ] || miss="$miss $f(not executable)"
done
demo_diff=
for f in $(files_under "$top_srcdir/models/demo"); do
  cmp -s "$top_srcdir/models/demo/$f" "$R/share/sits-dist/models/demo/$f" || demo_diff="$demo_diff $f"
done
if [ -z "$miss" ] && [ -z "$demo_diff" ]; then
  ok "make install DESTDIR=… prefix=$P: $(files_under "$D" | wc -l) files, demo model identical ($(files_under "$top_srcdir/models/demo" | wc -l) files)"
else
  bad "installed tree: missing$miss; demo model differs:$demo_diff"; files_under "$D"
fi
mf=$R/share/modulefiles/sits-dist/$version.lua
if grep -q "prepend_path(\"PATH\", \"$P/bin\")" "$mf" && grep -q "\"$P/share/sits-dist/models/demo\"" "$mf" \
   && ! grep -q "$D" "$mf" && ! grep -q '@[a-zA-Z]*@' "$mf"; then
  ok "modulefile $version.lua names $P (not the DESTDIR), no placeholder left"
else
  bad "modulefile:"; cat "$mf"
fi
$MK -s -C "$top_builddir" uninstall DESTDIR="$D" prefix="$P" > "$tmp/uninstall.log" 2>&1
left=$(files_under "$D")
if [ -z "$left" ]; then ok "make uninstall removes every installed file"
else bad "make uninstall left:"; echo "$left"; fi

# --- the man page ---------------------------------------------------------------------------------
"$SITS" --help-man > "$tmp/gen.1"
if cmp -s "$tmp/gen.1" "$top_builddir/sits-dist.1"; then ok "sits-dist.1 is sits-dist --help-man's output"
else bad "sits-dist.1 differs from sits-dist --help-man"; fi
warn=$(groff -man -ww -z "$tmp/gen.1" 2>&1)
[ -z "$warn" ] && ok "groff -man -ww: no warning" || { bad "groff warnings:"; echo "$warn" | head; }
text=$(groff -man -Tascii -P-cbou -rLL=250n "$tmp/gen.1" 2>/dev/null)   # plain text: no overstrike
flat=$(printf '%s' "$text" | tr '\n' ' ' | tr -s ' ')   # paragraphs wrap: one line
missing=
while read -r flag _ env _; do
  case $flag in --*) ;; *) continue ;; esac
  printf '%s\n' "$text" | grep -qE "^ +$flag( |\[|$)" || missing="$missing $flag"
  [ "$env" = - ] || printf '%s\n' "$flat" | grep -qF "Environment: $env." || missing="$missing $env"
done < <("$SITS" --print-config 2>/dev/null)
n_flags=$("$SITS" --print-config 2>/dev/null | grep -c '^--')
if [ -z "$missing" ] && [ "$n_flags" -gt 10 ]; then ok "man page: an entry for each of the $n_flags flags of --print-config, with its variable"
else bad "man page lacks:$missing (flags: $n_flags)"; fi

# --- a real prefix, loaded with Lmod ---------------------------------------------------------------
lmod_init=/usr/share/lmod/lmod/init/bash
if [ ! -f "$lmod_init" ]; then
  echo "skip Lmod: no $lmod_init (apt-get install lmod)"
  [ "$n_fail" -eq 0 ] && { echo "SKIP: everything but the Lmod part passed"; exit 77; }
  finish
fi
I=$tmp/prefix
if ! $MK -s -C "$top_builddir" install prefix="$I" > "$tmp/install2.log" 2>&1; then
  bad "make install prefix=$I"; tail -20 "$tmp/install2.log"; finish
fi
args=(--prompt "What is a list?" --max-tokens 10 --temperature 0)
"$SITS" --model "$top_srcdir/models/demo" "${args[@]}" > "$tmp/build.txt" 2>/dev/null
# a clean login-like shell: the module command, then what a user types
out=$(env -i HOME="$tmp" PATH=/usr/bin:/bin bash --norc --noprofile -c '
  . '"$lmod_init"' || exit 3
  module use '"$I"'/share/modulefiles && module load sits-dist || exit 4
  echo "bin=$(command -v sits-dist)"
  echo "man=$(MANPATH=$MANPATH man -w sits-dist 2>&1)"
  echo "demo=$SITS_DIST_DEMO_MODEL"
  echo "list=$(module -t list 2>&1 | tr "\n" " ")"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sits-dist --model "$SITS_DIST_DEMO_MODEL" '"$(printf '%q ' "${args[@]}")"' > '"$tmp"'/installed.txt 2>/dev/null
  module unload sits-dist
  echo "after=$(command -v sits-dist || echo none)"
' 2>&1); st=$?
field() { printf '%s\n' "$out" | sed -n "s/^$1=//p"; }
if [ $st -eq 0 ] && [ "$(field bin)" = "$I/bin/sits-dist" ] && [ "$(field man)" = "$I/share/man/man1/sits-dist.1" ] \
   && [ "$(field demo)" = "$I/share/sits-dist/models/demo" ] && printf '%s' "$(field list)" | grep -q "sits-dist/$version"; then
  ok "module load sits-dist ($(field list | tr -s ' ')): PATH -> $(field bin), man -> $(field man)"
else
  bad "module load (exit $st):"; echo "$out"
fi
if [ -s "$tmp/build.txt" ] && cmp -s "$tmp/build.txt" "$tmp/installed.txt"; then
  ok "installed sits-dist on \$SITS_DIST_DEMO_MODEL prints what the build tree's does: \"$(tr '\n' ' ' < "$tmp/installed.txt")\""
else
  bad "installed binary's text '$(cat "$tmp/installed.txt" 2>&1)' vs the build tree's '$(cat "$tmp/build.txt")'"
fi
[ "$(field after)" = none ] && ok "module unload sits-dist: off PATH" || bad "after unload: $(field after)"
$MK -s -C "$top_builddir" uninstall prefix="$I" > /dev/null 2>&1
finish
