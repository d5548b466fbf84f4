# tests/recipes.mk -- issue 12: launch recipes (launch/sits-dist.sbatch, launch/mpirun-dgx.sh,
# launch/hosts.example) and the chat page served on GET / (src/server/chat_page.html, embedded as
# the generated src/server/chat_page.c). Included by Makefile.am after the other fragments.
#   tests/integration/launch_recipes.sh  the sbatch recipe under mpirun (srun stand-in, hostfile),
#                                        mpirun-dgx.sh, shellcheck of launch/ (needs shellcheck)
#   tests/integration/chat_page.sh       the page in headless Chromium against the demo model
#                                        (skips without chromium); screenshot in chat_page.png
libsits_a_SOURCES += src/server/chat_page.h src/server/chat_page.c
TESTS += tests/integration/launch_recipes.sh tests/integration/chat_page.sh
EXTRA_DIST += tests/integration/launch_recipes.sh tests/integration/chat_page.sh tests/integration/cdp_chat.py \
	src/server/chat_page.html src/server/gen_chat_page.py
CLEANFILES += chat_page.png
