# src/util: status codes, logging, the parameter table, dtypes, small helpers.
libsits_a_SOURCES += src/util/status.c src/util/status.h src/util/log.c src/util/log.h \
	src/util/params.c src/util/params.h src/util/http_client.c src/util/http_client.h src/util/otlp.c src/util/otlp.h src/util/dtype.c src/util/dtype.h src/util/check.h src/util/le.h src/util/dummy.h
