/* fuzz_template.c -- libFuzzer target: the chat-template interpreter (src/template) on hostile templates.
 * Input: template source up to the first NUL byte; after it, optional JSON for the variables (an object;
 * otherwise a fixed two-message conversation with tools and special tokens is used).
 * Invariants: compile either succeeds or fails with SITS_ERR_FORMAT / SITS_ERR_UNSUPPORTED and a message;
 * a render either succeeds (output NUL-terminated at *len, within the 64 MiB sandbox limit) or fails with
 * SITS_ERR_INVALID / SITS_ERR_NOMEM and a message; nothing leaks, nothing hangs past libFuzzer's -timeout
 * (the sandbox bounds loops, recursion and memory). Seeds: the corpus templates (make_seeds.sh). */
#include "fuzz_common.h"
#include <jansson.h>
#include "template/template.h"

static json_t *g_vars;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    json_error_t e;
    g_vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                        "\"content\": \"Hi \\u00e9 {{ x }}\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
                        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, true]}}}]}], "
                        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
                        "\"documents\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\", "
                        "\"eos_token\": \"</s>\"}", 0, &e);
    if (!g_vars) { fprintf(stderr, "fuzz: vars: %s\n", e.text); exit(2); }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    json_t *vars = NULL;
    if (nul && size - tlen > 1) {
        json_t *v = json_loadb((const char *)nul + 1, size - tlen - 1, 0, NULL);
        if (json_is_object(v)) vars = v;
        else json_decref(v);
    }
    sits_tmpl_t *t = NULL;
    sits_tmpl_error_t err;
    memset(&err, 0, sizeof err);
    sits_status_t st = sits_tmpl_compile((const char *)data, tlen, &t, &err);
    if (st != SITS_OK) {
        FUZZ_ASSERT(st == SITS_ERR_FORMAT || st == SITS_ERR_UNSUPPORTED || st == SITS_ERR_NOMEM);
        FUZZ_ASSERT(t == NULL && (st == SITS_ERR_NOMEM || err.msg[0]));
        json_decref(vars);
        return 0;
    }
    sits_tmpl_render_opts_t opts = { .now = 1721995200 };
    char *out = NULL;
    size_t len = 0;
    memset(&err, 0, sizeof err);
    st = sits_tmpl_render(t, vars ? vars : g_vars, &opts, &out, &len, &err);
    if (st == SITS_OK) {
        FUZZ_ASSERT(out && out[len] == 0 && len <= (64u << 20));
    } else {
        FUZZ_ASSERT(st == SITS_ERR_INVALID || st == SITS_ERR_NOMEM);
        FUZZ_ASSERT(out == NULL && (st == SITS_ERR_NOMEM || err.msg[0]));
    }
    free(out);
    sits_tmpl_destroy(t);
    json_decref(vars);
    return 0;
}
