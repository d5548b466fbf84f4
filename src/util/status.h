/* status.h -- status codes of every sits-dist function that can fail.
 * 0 is success; errors are negative. sits_status_str() names them for messages. */
#ifndef SITS_UTIL_STATUS_H
#define SITS_UTIL_STATUS_H

typedef enum {
    SITS_OK = 0,
    SITS_ERR_INVALID = -1,      /* bad argument or bad input (user's fault) */
    SITS_ERR_NOMEM = -2,        /* allocation failed */
    SITS_ERR_IO = -3,           /* open/read/mmap/write failed */
    SITS_ERR_FORMAT = -4,       /* file contents malformed (config, safetensors, tokenizer) */
    SITS_ERR_UNSUPPORTED = -5,  /* valid, but not something we implement */
    SITS_ERR_NOT_FOUND = -6,    /* a named thing is absent (tensor, file, key) */
    SITS_ERR_MPI = -7,
    SITS_ERR_CUDA = -8,
    SITS_ERR_NCCL = -9,
    SITS_ERR_CUBLAS = -10,
    SITS_ERR_TIMEOUT = -11,     /* a deadline passed (collective, step, shutdown) */
    SITS_ERR_INTERNAL = -12,    /* a bug: an invariant failed */
    SITS_ERR_BUSY = -13,        /* try again later (queue full) */
    SITS_ERR_CANCELLED = -14,
    SITS_ERR_PEER = -15         /* another rank failed */
} sits_status_t;

const char *sits_status_str(sits_status_t st);

/* Propagate a failing status. */
#define SITS_CHECK(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) return s_; } while (0)
/* Store a failing status in st_ and jump to the cleanup label. */
#define SITS_CHECK_GOTO(call_, st_, label_) do { (st_) = (call_); if ((st_) != SITS_OK) goto label_; } while (0)

#endif
