# launch/local.mk -- issue 26: what `make install` puts at an HPC site, and the site tests.
#   PREFIX/bin/sits-dist
#   PREFIX/share/man/man1/sits-dist.1            generated: sits-dist --help-man (the parameter table)
#   PREFIX/share/sits-dist/models/demo/          the embedded demo model
#   PREFIX/share/sits-dist/launch/               sbatch / mpirun recipes, Prometheus scrape config and
#                                                recording rules, the Lmod modulefile template
#   PREFIX/share/modulefiles/sits-dist/VERSION.lua  the template filled in for PREFIX
# DESTDIR is honoured; the modulefile names the final PREFIX, not DESTDIR.
# Tests: tests/integration/install.sh (make install / uninstall, man page, Lmod module load),
#        tests/integration/prometheus.sh (promtool on /metrics, a real Prometheus scraping a server),
#        tests/integration/slurm.sh (a one-node Slurm cluster running launch/sits-dist.sbatch).
nodist_man_MANS = sits-dist.1
sits-dist.1: sits-dist$(EXEEXT)
	$(AM_V_GEN)./sits-dist$(EXEEXT) --help-man > $@.tmp && mv $@.tmp $@
CLEANFILES += sits-dist.1 sits-dist.1.tmp

sitsdemodir = $(pkgdatadir)/models/demo
sitsdemo_DATA = models/demo/README.md models/demo/config.json models/demo/generation_config.json \
	models/demo/metrics.json models/demo/model.safetensors models/demo/tokenizer.json \
	models/demo/tokenizer_config.json
sitslaunchdir = $(pkgdatadir)/launch
sitslaunch_SCRIPTS = launch/sits-dist.sbatch launch/mpirun-dgx.sh
sitslaunch_DATA = launch/hosts.example launch/prometheus.yml launch/sits-dist.rules.yml launch/modulefile.lua

# The modulefile: launch/modulefile.lua with the install directories filled in ([@] keeps configure
# from substituting the placeholders in this rule).
modulefiledir = $(datadir)/modulefiles/sits-dist
install-data-local:
	$(MKDIR_P) '$(DESTDIR)$(modulefiledir)'
	sed -e 's|[@]prefix[@]|$(prefix)|g' -e 's|[@]bindir[@]|$(bindir)|g' -e 's|[@]mandir[@]|$(mandir)|g' \
	    -e 's|[@]pkgdatadir[@]|$(pkgdatadir)|g' -e 's|[@]VERSION[@]|$(VERSION)|g' \
	    $(srcdir)/launch/modulefile.lua > '$(DESTDIR)$(modulefiledir)/$(VERSION).lua'
uninstall-local:
	rm -f '$(DESTDIR)$(modulefiledir)/$(VERSION).lua'

TESTS += tests/integration/install.sh tests/integration/prometheus.sh tests/integration/slurm.sh
EXTRA_DIST += tests/integration/install.sh tests/integration/prometheus.sh tests/integration/slurm.sh \
	tests/integration/prometheus_rules_test.yml
