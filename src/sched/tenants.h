/* tenants.h -- the tenants file (--tenants FILE): who may call the server and how the scheduler
 * shares the GPUs between them.
 *
 *   {"tenants": [
 *     {"name": "gold", "api_keys": ["k1", "k2"], "weight": 4, "priority": 0,
 *      "slo": {"ttft_ms": 500, "tpot_ms": 50}, "max_concurrent": 16},
 *     {"name": "batch", "api_keys": ["k3"], "weight": 1, "priority": 1}
 *   ]}
 *
 * weight (> 0, default 1): share of the step tokens among tenants of the same priority (weighted
 * fair queueing). priority (default 0): lower runs first; a waiting request may preempt running
 * requests of a strictly lower priority (higher number). slo: targets for the attainment metrics
 * (0 = none). max_concurrent (0 = unlimited): in-flight requests before 429. Names and keys are
 * unique. Index 0 is the implicit tenant "default" used when no tenants file is given. */
#ifndef SITS_SCHED_TENANTS_H
#define SITS_SCHED_TENANTS_H

#include <stddef.h>
#include "util/status.h"

#define SITS_MAX_TENANTS 64

typedef struct {
    char name[64];
    double weight;
    int priority;
    double slo_ttft_ms, slo_tpot_ms;
    int max_concurrent;
    char **api_keys;
    int n_keys;
} sits_tenant_t;

typedef struct {
    sits_tenant_t t[SITS_MAX_TENANTS];
    int n;
} sits_tenants_t;

/* One implicit tenant "default" (weight 1, priority 0, no keys). */
void sits_tenants_default(sits_tenants_t *ts);
/* Parse a tenants file; refuses (naming the file, the tenant and the field) unknown fields, bad
 * types, duplicate names or keys, weight <= 0, more than SITS_MAX_TENANTS. */
sits_status_t sits_tenants_load(const char *path, sits_tenants_t *ts);
sits_status_t sits_tenants_parse(const char *json, size_t len, const char *what, sits_tenants_t *ts);
void sits_tenants_free(sits_tenants_t *ts);
/* Tenant index of an API key, -1 when unknown. */
int sits_tenants_find_key(const sits_tenants_t *ts, const char *key);

#endif
