/* spec.c -- speculative decoding pieces the scheduler uses (spec.h): the --speculative-config
 * parser, the n-gram drafter, the acceptance rule and the adaptation of k. No state of its own. */
#include "spec/spec.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

const char *sits_spec_method_name(sits_spec_method_t m)
{
    return m == SITS_SPEC_NGRAM ? "ngram" : m == SITS_SPEC_DRAFT ? "draft_model" : "";
}

/* An integer member of o in [lo, hi] into *v (absent: *v unchanged). 0 ok, -1 refused (err set). */
static int get_int(json_t *o, const char *key, int lo, int hi, int *v, char *err, size_t err_len)
{
    json_t *x = json_object_get(o, key);
    if (!x) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
        snprintf(err, err_len, "--speculative-config: \"%s\" must be an integer in [%d, %d]", key, lo, hi);
        return -1;
    }
    *v = (int)json_integer_value(x);
    return 0;
}

sits_status_t sits_spec_config_parse(const char *json, sits_spec_config_t *cfg_p, char *err, size_t err_len)
{
    sits_spec_config_t c = { .method = SITS_SPEC_OFF, .num_speculative_tokens = 0, .prompt_lookup_max = 4,
                             .prompt_lookup_min = 1 };
    if (!json || !json[0]) {
        *cfg_p = c;
        return SITS_OK;
    }
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    sits_status_t st = SITS_ERR_INVALID;
    if (!o || !json_is_object(o)) {
        snprintf(err, err_len, "--speculative-config: not a JSON object (%s)", o ? "wrong type" : je.text);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        if (strcmp(key, "method") && strcmp(key, "model") && strcmp(key, "num_speculative_tokens") &&
            strcmp(key, "draft_tensor_parallel_size") &&
            strcmp(key, "prompt_lookup_max") && strcmp(key, "prompt_lookup_min")) {
            snprintf(err, err_len, "--speculative-config: unknown key \"%s\" (known: method, num_speculative_tokens, "
                     "prompt_lookup_max, prompt_lookup_min)", key);
            goto out;
        }
    }
    json_t *m = json_object_get(o, "method"), *mdl = json_object_get(o, "model");
    const char *ms = m && json_is_string(m) ? json_string_value(m) : NULL;
    const char *ds = mdl && json_is_string(mdl) ? json_string_value(mdl) : NULL;
    if (!ms && ds) ms = !strcmp(ds, "[ngram]") ? "ngram" : "draft_model";
    if (ms && (!strcmp(ms, "ngram") || !strcmp(ms, "[ngram]"))) c.method = SITS_SPEC_NGRAM;
    else if (ms && !strcmp(ms, "draft_model")) {
        if (!ds || !ds[0] || strlen(ds) >= sizeof c.model) {
            snprintf(err, err_len, "--speculative-config: \"draft_model\" needs \"model\": the draft model's directory");
            goto out;
        }
        c.method = SITS_SPEC_DRAFT;
        snprintf(c.model, sizeof c.model, "%s", ds);
    } else {
        snprintf(err, err_len, "--speculative-config: \"method\" must be \"ngram\" or \"draft_model\"");
        goto out;
    }
    json_t *dtp = json_object_get(o, "draft_tensor_parallel_size");
    if (dtp && (!json_is_integer(dtp) || json_integer_value(dtp) != 1)) {
        snprintf(err, err_len, "--speculative-config: the draft model runs on the leader only: draft_tensor_parallel_size 1");
        goto out;
    }
    if (!json_object_get(o, "num_speculative_tokens")) {
        snprintf(err, err_len, "--speculative-config: \"num_speculative_tokens\" is required");
        goto out;
    }
    if (get_int(o, "num_speculative_tokens", 1, SITS_SPEC_MAX_K, &c.num_speculative_tokens, err, err_len) ||
        get_int(o, "prompt_lookup_max", 1, 64, &c.prompt_lookup_max, err, err_len) ||
        get_int(o, "prompt_lookup_min", 1, 64, &c.prompt_lookup_min, err, err_len))
        goto out;
    if (c.prompt_lookup_min > c.prompt_lookup_max) {
        snprintf(err, err_len, "--speculative-config: prompt_lookup_min (%d) is above prompt_lookup_max (%d)",
                 c.prompt_lookup_min, c.prompt_lookup_max);
        goto out;
    }
    *cfg_p = c;
    st = SITS_OK;
out:
    json_decref(o);
    return st;
}

int sits_spec_ngram_propose(const int32_t *tokens, int n, int min_n, int max_n, int k, int32_t *draft_p)
{
    if (n < 2 || k < 1 || min_n < 1 || max_n < min_n) return 0;
    int best_len = 0, best_end = -1;
    /* an earlier occurrence ends at e (the drafts start at tokens[e]); e = n - 1 overlaps the suffix */
    for (int e = 1; e < n; e++) {
        int lim = max_n < e ? max_n : e, l = 0;
        while (l < lim && tokens[e - 1 - l] == tokens[n - 1 - l]) l++;
        if (l > best_len) {   /* strictly longer: the earliest occurrence of the longest match wins */
            best_len = l;
            best_end = e;
            if (l == max_n) break;
        }
    }
    if (best_len < min_n) return 0;
    int m = n - best_end < k ? n - best_end : k;
    memcpy(draft_p, tokens + best_end, sizeof(int32_t) * (size_t)m);
    return m;
}

int sits_spec_accept(const int32_t *draft, const int32_t *sampled, int k)
{
    int m = 0;
    while (m < k && draft[m] == sampled[m]) m++;
    return m;
}

int sits_spec_kv_rollback(sits_kv_blocks_t *kb, int block_size, int n_valid, const int32_t *bt, int n_blocks)
{
    int keep = (n_valid + block_size - 1) / block_size;
    if (keep >= n_blocks) return n_blocks;
    sits_kv_blocks_release(kb, n_blocks - keep, bt + keep);
    return keep;
}

int sits_spec_k_next(int k, int k_max, int accepted, int drafted, int free_drafts)
{
    int next = accepted == 0 ? k / 2 : free_drafts ? k_max : accepted >= drafted ? k + 1 : accepted + 1;
    if (next > k_max) next = k_max;
    return next < 1 ? 1 : next;
}
