/* log.h -- the logger (NCCL style): levels, subsystem mask, host:pid:rank prefix.
 *
 * Environment: SITS_LOG_LEVEL=error|warn|info|debug|trace (default warn),
 * SITS_LOG_SUBSYS=all or a comma list (init,topo,comm,model,kv,sched,http,cuda,engine,tok,backend;
 * a leading ^ excludes), SITS_LOG_FILE=path (%h host, %p pid, %r rank expanded);
 * ERROR lines then go to stderr as well (a batch job's output shows why it failed).
 * The macros test level and mask before formatting anything. The logger is the one piece of
 * global mutable state in sits-dist. */
#ifndef SITS_UTIL_LOG_H
#define SITS_UTIL_LOG_H

#include <stdint.h>

typedef enum {
    SITS_LOG_NONE = 0, SITS_LOG_ERROR = 1, SITS_LOG_WARN = 2, SITS_LOG_INFO = 3,
    SITS_LOG_DEBUG = 4, SITS_LOG_TRACE = 5
} sits_log_level_t;

typedef enum {
    SITS_SUB_INIT = 1u << 0, SITS_SUB_TOPO = 1u << 1, SITS_SUB_COMM = 1u << 2, SITS_SUB_MODEL = 1u << 3,
    SITS_SUB_KV = 1u << 4, SITS_SUB_SCHED = 1u << 5, SITS_SUB_HTTP = 1u << 6, SITS_SUB_CUDA = 1u << 7,
    SITS_SUB_ENGINE = 1u << 8, SITS_SUB_TOK = 1u << 9, SITS_SUB_BACKEND = 1u << 10,
    SITS_SUB_ALL = 0xffffffffu
} sits_log_subsys_t;

typedef struct {
    sits_log_level_t level;
    uint32_t mask;
} sits_log_state_t;

extern sits_log_state_t sits_log_state;

/* Reads SITS_LOG_* (once) and sets the rank shown in the prefix (-1 before MPI is up). */
void sits_log_init(int rank);
void sits_log_set_rank(int rank);
void sits_log_set_level(sits_log_level_t level);
void sits_log_printf(sits_log_level_t level, uint32_t sub, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define SITS_LOG_ON(level_, sub_) ((level_) <= sits_log_state.level && ((sub_) & sits_log_state.mask))
#define SITS_LOG_(level_, sub_, ...) do { if (SITS_LOG_ON(level_, sub_)) \
    sits_log_printf(level_, sub_, __FILE__, __LINE__, __VA_ARGS__); } while (0)
#define SITS_ERROR(sub_, ...) SITS_LOG_(SITS_LOG_ERROR, sub_, __VA_ARGS__)
#define SITS_WARN(sub_, ...)  SITS_LOG_(SITS_LOG_WARN, sub_, __VA_ARGS__)
#define SITS_INFO(sub_, ...)  SITS_LOG_(SITS_LOG_INFO, sub_, __VA_ARGS__)
#define SITS_DEBUG(sub_, ...) SITS_LOG_(SITS_LOG_DEBUG, sub_, __VA_ARGS__)
#define SITS_TRACE(sub_, ...) SITS_LOG_(SITS_LOG_TRACE, sub_, __VA_ARGS__)

/* malloc-family result check. */
#define SITS_ALLOC_CHECK_GOTO(ptr_, st_, label_) do { if (!(ptr_)) { \
    SITS_ERROR(SITS_SUB_INIT, "out of memory allocating %s", #ptr_); (st_) = SITS_ERR_NOMEM; goto label_; } } while (0)

#endif
