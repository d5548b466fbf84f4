# tests/serving.mk -- serving that loses nothing (issue 20), included by Makefile.am:
#   tests/integration/lifecycle.sh   Slurm-style SIGTERM with N requests in flight: 503 at once, every
#                                    client gets its whole response, exit 0; --shutdown-timeout expiry
#                                    (finish "abort", never a cut stream); a second signal stops at once
#   tests/integration/conn_flood.sh  5,000 idle + 100 slow-body connections: /health and a completion
#                                    within 1 s, idle connections kept, per-client limit answers 503
# Both use tests/integration/serve_client.py (python3, loopback only, bounded).
TESTS += tests/integration/lifecycle.sh tests/integration/conn_flood.sh
EXTRA_DIST += tests/integration/lifecycle.sh tests/integration/conn_flood.sh tests/integration/serve_client.py
