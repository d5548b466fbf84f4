# src/engine: the forward pass of one step, distributed sampling, the offline generation loop.
libsits_a_SOURCES += src/engine/engine.c src/engine/engine.h src/engine/sample.c src/engine/sample.h \
	src/engine/generate.c src/engine/generate.h
