# src/model: config.json, safetensors, tensor layout, sharded loading.
libsits_a_SOURCES += src/model/config.c src/model/config.h src/model/safetensors.c src/model/safetensors.h \
	src/model/layout.c src/model/layout.h
