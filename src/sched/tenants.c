/* tenants.c -- the tenants file; see tenants.h. */
#include "sched/tenants.h"
#include "util/log.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void sits_tenants_default(sits_tenants_t *ts)
{
    memset(ts, 0, sizeof *ts);
    snprintf(ts->t[0].name, sizeof ts->t[0].name, "default");
    ts->t[0].weight = 1.0;
    ts->n = 1;
}

void sits_tenants_free(sits_tenants_t *ts)
{
    for (int i = 0; i < ts->n; i++) {
        for (int k = 0; k < ts->t[i].n_keys; k++) free(ts->t[i].api_keys[k]);
        free(ts->t[i].api_keys);
        ts->t[i].api_keys = NULL;
        ts->t[i].n_keys = 0;
    }
    ts->n = 0;
}

int sits_tenants_find_key(const sits_tenants_t *ts, const char *key)
{
    if (!key) return -1;
    for (int i = 0; i < ts->n; i++)
        for (int k = 0; k < ts->t[i].n_keys; k++)
            if (!strcmp(ts->t[i].api_keys[k], key)) return i;
    return -1;
}

#define BAD(...) do { SITS_ERROR(SITS_SUB_SCHED, __VA_ARGS__); st = SITS_ERR_FORMAT; goto fail; } while (0)

static int number(json_t *v, double *out)
{
    if (!json_is_number(v)) return 0;
    *out = json_number_value(v);
    return 1;
}

sits_status_t sits_tenants_parse(const char *text, size_t len, const char *what, sits_tenants_t *ts)
{
    sits_status_t st = SITS_OK;
    json_error_t jerr;
    memset(ts, 0, sizeof *ts);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        SITS_ERROR(SITS_SUB_SCHED, "%s: line %d: %s", what, jerr.line, jerr.text);
        return SITS_ERR_FORMAT;
    }
    json_t *arr = json_object_get(root, "tenants");
    if (!json_is_object(root) || !json_is_array(arr) || json_array_size(arr) == 0) BAD("%s: expected {\"tenants\": [ ... ]} with at least one tenant", what);
    if (json_array_size(arr) > SITS_MAX_TENANTS) BAD("%s: more than %d tenants", what, SITS_MAX_TENANTS);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        sits_tenant_t *t = &ts->t[ts->n++];
        t->weight = 1.0;
        if (!json_is_object(e)) BAD("%s: tenant %zu is not an object", what, i);
        const char *key;
        json_t *v;
        json_object_foreach(e, key, v) {
            if (!strcmp(key, "name")) {
                if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) >= sizeof t->name)
                    BAD("%s: tenant %zu: name must be a string of 1-63 bytes", what, i);
                snprintf(t->name, sizeof t->name, "%s", json_string_value(v));
            } else if (!strcmp(key, "weight")) {
                if (!number(v, &t->weight) || !(t->weight > 0)) BAD("%s: tenant %zu: weight must be a number > 0", what, i);
            } else if (!strcmp(key, "priority")) {
                if (!json_is_integer(v)) BAD("%s: tenant %zu: priority must be an integer", what, i);
                t->priority = (int)json_integer_value(v);
            } else if (!strcmp(key, "max_concurrent")) {
                if (!json_is_integer(v) || json_integer_value(v) < 0) BAD("%s: tenant %zu: max_concurrent must be an integer >= 0", what, i);
                t->max_concurrent = (int)json_integer_value(v);
            } else if (!strcmp(key, "slo")) {
                const char *sk;
                json_t *sv;
                if (!json_is_object(v)) BAD("%s: tenant %zu: slo must be an object", what, i);
                json_object_foreach(v, sk, sv) {
                    double *dst = !strcmp(sk, "ttft_ms") ? &t->slo_ttft_ms : !strcmp(sk, "tpot_ms") ? &t->slo_tpot_ms : NULL;
                    if (!dst) BAD("%s: tenant %zu: unknown slo field '%s' (ttft_ms, tpot_ms)", what, i, sk);
                    if (!number(sv, dst) || *dst < 0) BAD("%s: tenant %zu: slo.%s must be a number >= 0", what, i, sk);
                }
            } else if (!strcmp(key, "api_keys")) {
                if (!json_is_array(v) || json_array_size(v) == 0) BAD("%s: tenant %zu: api_keys must be a non-empty array", what, i);
                t->api_keys = calloc(json_array_size(v), sizeof(char *));
                if (!t->api_keys) { st = SITS_ERR_NOMEM; goto fail; }
                size_t k;
                json_t *kv;
                json_array_foreach(v, k, kv) {
                    if (!json_is_string(kv) || !json_string_length(kv)) BAD("%s: tenant %zu: api_keys[%zu] must be a non-empty string", what, i, k);
                    t->api_keys[t->n_keys] = strdup(json_string_value(kv));
                    if (!t->api_keys[t->n_keys]) { st = SITS_ERR_NOMEM; goto fail; }
                    t->n_keys++;
                }
            } else {
                BAD("%s: tenant %zu: unknown field '%s'", what, i, key);
            }
        }
        if (!t->name[0]) BAD("%s: tenant %zu has no name", what, i);
        if (!t->n_keys) BAD("%s: tenant '%s' has no api_keys", what, t->name);
    }
    for (int a = 0; a < ts->n; a++)
        for (int b = a + 1; b < ts->n; b++) {
            if (!strcmp(ts->t[a].name, ts->t[b].name)) BAD("%s: tenant name '%s' appears twice", what, ts->t[a].name);
            for (int k = 0; k < ts->t[b].n_keys; k++)
                if (sits_tenants_find_key(ts, ts->t[b].api_keys[k]) != b)
                    BAD("%s: an api key of tenant '%s' also belongs to '%s'", what, ts->t[b].name,
                        ts->t[sits_tenants_find_key(ts, ts->t[b].api_keys[k])].name);
        }
    json_decref(root);
    return SITS_OK;
fail:
    json_decref(root);
    sits_tenants_free(ts);
    return st;
}

sits_status_t sits_tenants_load(const char *path, sits_tenants_t *ts)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        SITS_ERROR(SITS_SUB_SCHED, "%s: cannot open the tenants file", path);
        return SITS_ERR_IO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 8192);
            if (!nb) { free(buf); fclose(f); return SITS_ERR_NOMEM; }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
        if (len > (1u << 24)) { free(buf); fclose(f); SITS_ERROR(SITS_SUB_SCHED, "%s: larger than 16 MiB", path); return SITS_ERR_FORMAT; }
    }
    fclose(f);
    sits_status_t st = sits_tenants_parse(buf ? buf : "", len, path, ts);
    free(buf);
    return st;
}
