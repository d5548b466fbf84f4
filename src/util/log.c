/* log.c -- logger implementation; see log.h. Messages go to stderr or SITS_LOG_FILE (errors to both). */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <time.h>
#include <pthread.h>

sits_log_state_t sits_log_state = { SITS_LOG_WARN, SITS_SUB_ALL };

static struct {
    int rank;
    int inited;
    FILE *out;
    char host[64];
    pthread_mutex_t lock;
} g_log = { -1, 0, NULL, "", PTHREAD_MUTEX_INITIALIZER };

static const char *const sub_names[] = { "init", "topo", "comm", "model", "kv", "sched", "http", "cuda",
                                         "engine", "tok", "backend" };
static const char *const level_names[] = { "NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE" };

static uint32_t parse_mask(const char *s)
{
    int invert = 0;
    uint32_t mask = 0;
    char buf[256];
    if (s[0] == '^') { invert = 1; s++; }
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(tok, "all")) { mask = SITS_SUB_ALL; continue; }
        for (size_t i = 0; i < sizeof sub_names / sizeof sub_names[0]; i++)
            if (!strcasecmp(tok, sub_names[i])) mask |= 1u << i;
    }
    return invert ? ~mask : mask;
}

static FILE *open_log_file(const char *pattern)
{
    char path[1024];
    size_t n = 0;
    for (const char *p = pattern; *p && n + 64 < sizeof path; p++) {
        if (p[0] == '%' && p[1] == 'h') { n += (size_t)snprintf(path + n, sizeof path - n, "%s", g_log.host); p++; }
        else if (p[0] == '%' && p[1] == 'p') { n += (size_t)snprintf(path + n, sizeof path - n, "%d", (int)getpid()); p++; }
        else if (p[0] == '%' && p[1] == 'r') { n += (size_t)snprintf(path + n, sizeof path - n, "%d", g_log.rank); p++; }
        else path[n++] = *p;
    }
    path[n] = '\0';
    return fopen(path, "a");
}

void sits_log_init(int rank)
{
    g_log.rank = rank;
    if (g_log.inited) return;
    g_log.inited = 1;
    gethostname(g_log.host, sizeof g_log.host - 1);
    char *dot = strchr(g_log.host, '.');
    if (dot) *dot = '\0';
    const char *lv = getenv("SITS_LOG_LEVEL");
    if (lv) {
        for (int i = 0; i <= SITS_LOG_TRACE; i++)
            if (!strcasecmp(lv, level_names[i])) sits_log_state.level = (sits_log_level_t)i;
        if (!strcasecmp(lv, "warning")) sits_log_state.level = SITS_LOG_WARN;
        if (lv[0] >= '0' && lv[0] <= '5' && lv[1] == '\0') sits_log_state.level = (sits_log_level_t)(lv[0] - '0');
    }
    const char *sub = getenv("SITS_LOG_SUBSYS");
    if (sub) sits_log_state.mask = parse_mask(sub);
    const char *file = getenv("SITS_LOG_FILE");
    if (file && *file) g_log.out = open_log_file(file);
}

void sits_log_set_rank(int rank) { g_log.rank = rank; }
void sits_log_set_level(sits_log_level_t level) { sits_log_state.level = level; }

void sits_log_printf(sits_log_level_t level, uint32_t sub, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *sname = "?";
    for (size_t i = 0; i < sizeof sub_names / sizeof sub_names[0]; i++)
        if (sub & (1u << i)) { sname = sub_names[i]; break; }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    pthread_mutex_lock(&g_log.lock);
    FILE *out = g_log.out ? g_log.out : stderr;
    fprintf(out, "%s:%d:%d %02d:%02d:%02d.%03ld %s %s ", g_log.host[0] ? g_log.host : "?", (int)getpid(),
            g_log.rank, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], sname);
    if (level <= SITS_LOG_WARN || level >= SITS_LOG_DEBUG) fprintf(out, "[%s:%d] ", base, line);
    fprintf(out, "%s\n", msg);
    fflush(out);
    /* errors also reach stderr when the log goes to a file: a batch job's output (Slurm's --output)
     * then says why the job failed, not only rank-N.log */
    if (out != stderr && level == SITS_LOG_ERROR)
        fprintf(stderr, "%s:%d:%d ERROR %s [%s:%d] %s\n", g_log.host[0] ? g_log.host : "?", (int)getpid(), g_log.rank,
                sname, base, line, msg);
    pthread_mutex_unlock(&g_log.lock);
}
