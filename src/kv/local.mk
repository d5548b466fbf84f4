# src/kv: KV block allocation (the paged storage itself lives in the engine).
libsits_a_SOURCES += src/kv/blocks.c src/kv/blocks.h
include src/kv/shard.mk
include src/kv/move.mk
include src/kv/offload.mk
