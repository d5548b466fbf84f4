# src/engine: the forward pass of one step, distributed sampling.
libsits_a_SOURCES += src/engine/engine.c src/engine/engine.h src/engine/sample.c src/engine/sample.h
