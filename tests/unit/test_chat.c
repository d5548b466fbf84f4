/* test_chat.c -- the chat layer (src/tokenizer/chat.c) against transformers' apply_chat_template.
 *
 * tests/fixtures/chat/ (tests/ref/gen_chat_fixtures.py): model directories built from real templates in each
 * form transformers reads (tokenizer_config.json string, named list, chat_template.jinja winning over
 * tokenizer_config.json, additional_chat_templates/), and cases.json with transformers' output for each
 * input -- or the error it raised. For every case: sits_chat_load + sits_chat_render must give the same
 * bytes, or fail where transformers raised (with the template's own message when it called
 * raise_exception). Then: the old family names as built-in templates, --chat-template as a file, refusals.
 * strftime_now runs at the generator's fixed time (2024-07-26 12:00 UTC). Exit 0 pass, 1 fail, 77 skip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "tokenizer/chat.h"
#include "util/log.h"

static int g_fail, g_checks, g_shown;

#define EXPECT(cond_, ...) do { g_checks++; if (!(cond_)) { g_fail++; if (g_shown++ < 30) { \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } } while (0)

static void show_diff(const char *got, size_t glen, const char *exp, size_t elen)
{
    size_t i = 0;
    while (i < glen && i < elen && got[i] == exp[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "    first difference at byte %zu (got %zu bytes, expected %zu)\n", i, glen, elen);
    fprintf(stderr, "    got: \"%.*s\"\n    exp: \"%.*s\"\n", (int)(glen - from < 120 ? glen - from : 120), got + from,
            (int)(elen - from < 120 ? elen - from : 120), exp + from);
}

static void check_cases(const char *fixdir, time_t now)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/cases.json", fixdir);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        exit(77);
    }
    const json_t *cases = json_object_get(doc, "cases");
    size_t i, n_ok = 0, n_err = 0;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        const char *model = json_string_value(json_object_get(c, "model"));
        const json_t *in = json_object_get(c, "input"), *exp = json_object_get(c, "expected");
        const char *perr = json_string_value(json_object_get(c, "error"));
        char dir[4600];
        snprintf(dir, sizeof dir, "%s/%s", fixdir, model);
        sits_chat_t *chat = NULL;
        sits_status_t st = sits_chat_load(dir, NULL, &chat);
        EXPECT(st == SITS_OK, "case %zu (%s): load failed: %s", i, model, sits_status_str(st));
        if (st != SITS_OK) continue;
        const json_t *name = json_object_get(in, "chat_template_name");
        sits_chat_input_t ci = {
            .messages = json_object_get(in, "messages"), .tools = json_object_get(in, "tools"),
            .documents = json_object_get(in, "documents"), .kwargs = json_object_get(in, "chat_template_kwargs"),
            .template_name = name ? json_string_value(name) : NULL,
            .add_generation_prompt = json_is_true(json_object_get(in, "add_generation_prompt")),
            .continue_final_message = json_is_true(json_object_get(in, "continue_final_message")), .now = now,
        };
        char *out = NULL;
        size_t len = 0;
        sits_tmpl_error_t terr = { 0 };
        st = sits_chat_render(chat, &ci, &out, &len, &terr);
        if (perr) {
            EXPECT(st != SITS_OK, "case %zu (%s): transformers raised \"%.100s\", we rendered %zu bytes", i, model, perr, len);
            /* the template's own raise_exception message is what a client sees: it must be the same */
            if (st != SITS_OK && !strncmp(perr, "TemplateError: ", 15)) {
                EXPECT(terr.raised && !strcmp(terr.msg, perr + 15), "case %zu (%s): raised \"%s\", transformers \"%s\"", i,
                       model, terr.msg, perr + 15);
            }
            if (st != SITS_OK) n_err++;
        } else {
            const char *e = json_string_value(exp);
            size_t elen = json_string_length(exp);
            int ok = st == SITS_OK && len == elen && !memcmp(out, e, elen);
            EXPECT(ok, "case %zu (%s): render differs from transformers (st %s: %s)", i, model, sits_status_str(st), terr.msg);
            if (!ok && st == SITS_OK && g_shown <= 30) show_diff(out, len, e, elen);
            if (ok) n_ok++;
        }
        free(out);
        sits_chat_destroy(chat);
    }
    printf("chat cases: %zu, byte-identical %zu, raised where transformers raised %zu\n", json_array_size(cases), n_ok, n_err);
    json_decref(doc);
}

/* The old family names are built-in templates rendered by the same interpreter; the renders of
 * tests/fixtures/tokenizers/chat/cases.json (transformers, the families' published templates) must hold. */
static void check_builtins(const char *tokdir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/chat/cases.json", tokdir);
    json_error_t jerr;
    json_t *cases = json_load_file(path, 0, &jerr);
    EXPECT(cases != NULL, "%s: %s", path, jerr.text);
    if (!cases) return;
    char tmp[] = "/tmp/sits_chat_XXXXXX";
    if (!mkdtemp(tmp)) { perror("mkdtemp"); g_fail++; return; }
    size_t i, n_ok = 0;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        const char *fam = json_string_value(json_object_get(c, "family"));
        const char *bos = json_string_value(json_object_get(c, "bos_token"));
        const char *eos = json_string_value(json_object_get(c, "eos_token"));
        /* a model directory with only the special tokens: the template comes from --chat-template NAME */
        snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp);
        json_t *cfg = json_object();
        if (bos) json_object_set_new(cfg, "bos_token", json_string(bos));
        if (eos) json_object_set_new(cfg, "eos_token", json_string(eos));
        json_dump_file(cfg, path, 0);
        json_decref(cfg);
        sits_chat_t *chat = NULL;
        sits_status_t st = sits_chat_load(tmp, fam, &chat);
        EXPECT(st == SITS_OK, "built-in %s: load failed", fam);
        if (st != SITS_OK) continue;
        sits_chat_input_t ci = { .messages = json_object_get(c, "messages"),
                                 .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")) };
        char *out = NULL;
        size_t len = 0;
        st = sits_chat_render(chat, &ci, &out, &len, NULL);
        const json_t *exp = json_object_get(c, "expected");
        if (json_is_true(json_object_get(c, "error"))) {
            EXPECT(st == SITS_ERR_INVALID, "built-in %s case %zu: transformers raised, we rendered \"%s\"", fam, i, out ? out : "");
        } else {
            int ok = st == SITS_OK && len == json_string_length(exp) && !memcmp(out, json_string_value(exp), len);
            EXPECT(ok, "built-in %s case %zu differs", fam, i);
            if (!ok && st == SITS_OK) show_diff(out, len, json_string_value(exp), json_string_length(exp));
            n_ok += ok;
        }
        free(out);
        sits_chat_destroy(chat);
    }
    printf("built-in templates: %zu cases, %zu byte-identical\n", json_array_size(cases), n_ok);
    unlink(path);
    rmdir(tmp);
    json_decref(cases);
}

/* --chat-template as a file; refusals named at load; no template at all. */
static void check_overrides(const char *fixdir)
{
    char tmp[] = "/tmp/sits_chat_XXXXXX", path[4096], dir[4600];
    if (!mkdtemp(tmp)) { perror("mkdtemp"); g_fail++; return; }
    snprintf(path, sizeof path, "%s/t.jinja", tmp);
    FILE *f = fopen(path, "w");
    fputs("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{{ bos_token }}", f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/llama31_string", fixdir);
    sits_chat_t *chat = NULL;
    EXPECT(sits_chat_load(dir, path, &chat) == SITS_OK, "--chat-template FILE refused");
    sits_chat_msg_t m[2] = { { "system", "S" }, { "user", "U" } };
    char *out = NULL;
    EXPECT(chat && sits_chat_render_simple(chat, m, 2, 1, &out, NULL) == SITS_OK && out &&
           !strcmp(out, "[system] S\n[user] U\n<|begin_of_text|>"), "file override rendered \"%s\"", out ? out : "(null)");
    free(out);
    sits_chat_destroy(chat);
    chat = NULL;
    /* a named template of the model */
    snprintf(dir, sizeof dir, "%s/hermes_named", fixdir);
    EXPECT(sits_chat_load(dir, "tool_use", &chat) == SITS_OK && !strcmp(sits_chat_source(chat), "named template 'tool_use'"),
           "--chat-template NAME of the model refused");
    sits_chat_destroy(chat);
    chat = NULL;
    /* the model's own default by name, and a name after a file-less default (no double free) */
    EXPECT(sits_chat_load(dir, "default", &chat) == SITS_OK && sits_chat_available(chat), "--chat-template default refused");
    sits_chat_destroy(chat);
    chat = NULL;
    /* unknown names and unsupported constructs are refused at load */
    EXPECT(sits_chat_load(dir, "vicuna", &chat) == SITS_ERR_INVALID, "unknown --chat-template name accepted");
    f = fopen(path, "w");
    fputs("line one\n{{ messages | wordwrap(10) }}", f);
    fclose(f);
    sits_status_t st = sits_chat_load(dir, path, &chat);
    EXPECT(st == SITS_ERR_UNSUPPORTED, "a template with an unknown filter loaded (%s)", sits_status_str(st));
    f = fopen(path, "w");
    fputs("{% if x %}unclosed", f);
    fclose(f);
    st = sits_chat_load(dir, path, &chat);
    EXPECT(st == SITS_ERR_FORMAT, "a malformed template loaded (%s)", sits_status_str(st));
    /* a directory without any template: loads, renders say so */
    EXPECT(sits_chat_load(tmp, NULL, &chat) == SITS_OK && !sits_chat_available(chat), "no template: not a chat without template");
    sits_tmpl_error_t terr;
    EXPECT(sits_chat_render_simple(chat, m, 1, 1, &out, &terr) == SITS_ERR_NOT_FOUND, "rendered without a template");
    sits_chat_destroy(chat);
    chat = NULL;
    /* [mm] a processor's chat_template.json is the default when the tokenizer has none; the tokenizer's wins */
    char cj[4700];
    snprintf(cj, sizeof cj, "%s/chat_template.json", tmp);
    f = fopen(cj, "w");
    fputs("{\"chat_template\": \"{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\"}", f);
    fclose(f);
    EXPECT(sits_chat_load(tmp, NULL, &chat) == SITS_OK && sits_chat_available(chat) &&
           !strcmp(sits_chat_source(chat), "chat_template.json"), "chat_template.json not read");
    EXPECT(chat && sits_chat_render_simple(chat, m, 2, 0, &out, NULL) == SITS_OK && out && !strcmp(out, "<system>S<user>U"),
           "chat_template.json rendered \"%s\"", out ? out : "(null)");
    free(out);
    out = NULL;
    sits_chat_destroy(chat);
    chat = NULL;
    snprintf(dir, sizeof dir, "%s/tokenizer_config.json", tmp);
    f = fopen(dir, "w");
    fputs("{\"chat_template\": \"T{{ messages | length }}\"}", f);
    fclose(f);
    EXPECT(sits_chat_load(tmp, NULL, &chat) == SITS_OK && !strcmp(sits_chat_source(chat), "tokenizer_config.json"),
           "chat_template.json won over tokenizer_config.json");
    sits_chat_destroy(chat);
    chat = NULL;
    unlink(dir);
    f = fopen(cj, "w");
    fputs("{\"chat_template\": 7}", f);
    fclose(f);
    EXPECT(sits_chat_load(tmp, NULL, &chat) == SITS_ERR_FORMAT, "a chat_template.json without a string loaded");
    unlink(cj);
    unlink(path);
    rmdir(tmp);
}

int main(int argc, char **argv)
{
    const char *top = getenv("top_srcdir");
    char fixdir[4096], tokdir[4096];
    snprintf(fixdir, sizeof fixdir, "%s/tests/fixtures/chat", argc > 1 ? argv[1] : top ? top : ".");
    snprintf(tokdir, sizeof tokdir, "%s/tests/fixtures/tokenizers", argc > 1 ? argv[1] : top ? top : ".");
    sits_log_set_level(SITS_LOG_NONE);
    setenv("TZ", "UTC", 1);
    tzset();
    check_cases(fixdir, (time_t)1721995200);
    check_builtins(tokdir);
    check_overrides(fixdir);
    printf("%d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
