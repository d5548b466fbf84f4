#!/bin/bash
# Speculative decoding with the draft-model drafter: tests/integration/spec_decode.sh with
# SPEC_DRAFTER=draft_model (the demo model drafting for itself, on the leader; TP 1 and 2).
SPEC_DRAFTER=draft_model exec bash "$top_srcdir/tests/integration/spec_decode.sh"
