/* chat.c -- load a model's chat template(s) and render conversations with them (contract: chat.h).
 *
 * Templates are kept as a list of (name, compiled template); the unnamed default has name "default", as in
 * transformers' dict form. Selection on render follows transformers' get_chat_template(): an explicit name,
 * else "tool_use" when tools are given and the model has one, else "default". continue_final_message cuts
 * the rendered text after the last message's content exactly as render_jinja_template does. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tokenizer/chat.h"
#include "util/log.h"

#define CHAT_ERR(...) SITS_ERROR(SITS_SUB_TOK, __VA_ARGS__)

typedef struct {
    char *name;
    char *src;            /* the template source (continue_final_message checks it names the field) */
    sits_tmpl_t *tmpl;
} chat_named_t;

struct sits_chat {
    chat_named_t *t;      /* t[0] is the default when has_default */
    size_t n;
    int has_default;
    char *source;         /* where the default came from */
    json_t *special;      /* special token variables: {"bos_token": "<s>", ...} */
};

/* The templates of the families earlier releases recognised, as their models publish them
 * (Meta-Llama-3-8B-Instruct, Llama-2-7b-chat-hf, Mistral-7B-Instruct-v0.1, Qwen2-7B-Instruct). */
static const struct { const char *name, *src; } BUILTIN[] = {
    { "llama3",
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
      "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}" },
    { "llama2",
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
      "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
      "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
      "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
      "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}" },
    { "mistral",
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
      "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}" },
    { "chatml",
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}" },
};
#define N_BUILTIN (sizeof(BUILTIN) / sizeof(BUILTIN[0]))

/* The special-token attributes transformers puts in special_tokens_map (and so in the template's variables). */
static const char *const SPECIAL_KEYS[] = { "bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                            "cls_token", "mask_token" };

/* Whole file -> malloc'd NUL-terminated buffer. SITS_ERR_NOT_FOUND when absent (not logged). */
static sits_status_t read_file(const char *path, char **buf_p, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return SITS_ERR_NOT_FOUND;
        CHAT_ERR("%s: %s", path, strerror(errno));
        return SITS_ERR_IO;
    }
    sits_status_t st = SITS_OK;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) goto err_io;
    long sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) goto err_io;
    if (sz > 16L << 20) {
        CHAT_ERR("%s: %ld bytes is too large for a chat template (16 MiB at most)", path, sz);
        st = SITS_ERR_FORMAT;
        goto out;
    }
    buf = malloc((size_t)sz + 1);
    if (!buf) { st = SITS_ERR_NOMEM; goto out; }
    if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) goto err_io;
    buf[sz] = 0;
    *buf_p = buf;
    if (len_p) *len_p = (size_t)sz;
    fclose(f);
    return SITS_OK;
err_io:
    CHAT_ERR("%s: read failed: %s", path, strerror(errno));
    st = SITS_ERR_IO;
out:
    free(buf);
    fclose(f);
    return st;
}

static sits_status_t add_template(sits_chat_t *c, const char *name, const char *src, size_t len, const char *where)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) return SITS_OK;  /* the first source of a name wins */
    sits_tmpl_error_t err = { 0 };
    sits_tmpl_t *t = NULL;
    sits_status_t st = sits_tmpl_compile(src, len, &t, &err);
    if (st != SITS_OK) {
        CHAT_ERR("%s: chat template '%s' refused: %s", where, name, err.msg[0] ? err.msg : sits_status_str(st));
        return st;
    }
    chat_named_t *nt = realloc(c->t, (c->n + 1) * sizeof *nt);
    char *nm = strdup(name), *cp = malloc(len + 1);
    if (!nt || !nm || !cp) {
        free(nm);
        free(cp);
        if (nt) c->t = nt;
        sits_tmpl_destroy(t);
        return SITS_ERR_NOMEM;
    }
    memcpy(cp, src, len);
    cp[len] = 0;
    c->t = nt;
    c->t[c->n].name = nm;
    c->t[c->n].src = cp;
    c->t[c->n].tmpl = t;
    c->n++;
    if (!strcmp(name, "default")) c->has_default = 1;
    return SITS_OK;
}

static sits_status_t set_source(sits_chat_t *c, const char *s)
{
    free(c->source);
    c->source = strdup(s);
    return c->source ? SITS_OK : SITS_ERR_NOMEM;
}

/* tokenizer_config.json's token fields are strings or AddedToken objects {"content": ...}. */
static const char *token_text(const json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content"))) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static sits_status_t add_specials(sits_chat_t *c, const json_t *cfg)
{
    if (!json_is_object(cfg)) return SITS_OK;
    for (size_t k = 0; k < sizeof(SPECIAL_KEYS) / sizeof(SPECIAL_KEYS[0]); k++) {
        const char *s = token_text(json_object_get(cfg, SPECIAL_KEYS[k]));
        if (s && !json_object_get(c->special, SPECIAL_KEYS[k]) &&
            json_object_set_new(c->special, SPECIAL_KEYS[k], json_string(s)) != 0)
            return SITS_ERR_NOMEM;
    }
    const json_t *extra = json_object_get(cfg, "additional_special_tokens");
    if (json_is_array(extra) && !json_object_get(c->special, "additional_special_tokens")) {
        json_t *list = json_array();
        size_t i;
        const json_t *x;
        json_array_foreach(extra, i, x) if (token_text(x)) json_array_append_new(list, json_string(token_text(x)));
        if (!list || json_object_set_new(c->special, "additional_special_tokens", list) != 0) return SITS_ERR_NOMEM;
    }
    return SITS_OK;
}

static json_t *load_json(const char *path, sits_status_t *st_p)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    *st_p = SITS_OK;
    if (!j) {
        FILE *f = fopen(path, "rb");
        if (!f) return NULL;  /* absent: optional */
        fclose(f);
        CHAT_ERR("%s: line %d: %s", path, jerr.line, jerr.text);
        *st_p = SITS_ERR_FORMAT;
    }
    return j;
}

/* tokenizer_config.json: special tokens and chat_template (string or [{name, template}]). */
static sits_status_t load_tokenizer_config(sits_chat_t *c, const char *dir)
{
    char path[4096];
    sits_status_t st;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg = load_json(path, &st);
    if (st != SITS_OK) return st;
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    json_t *stm = load_json(path, &st);
    if (st != SITS_OK) goto out;
    SITS_CHECK_GOTO(add_specials(c, cfg), st, out);
    SITS_CHECK_GOTO(add_specials(c, stm), st, out);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (json_is_string(ct)) {
        if (!c->has_default) {
            SITS_CHECK_GOTO(add_template(c, "default", json_string_value(ct), json_string_length(ct), path), st, out);
            SITS_CHECK_GOTO(set_source(c, "tokenizer_config.json"), st, out);
        }
    } else if (json_is_array(ct)) {
        size_t i;
        const json_t *x;
        json_array_foreach(ct, i, x) {
            const json_t *nm = json_object_get(x, "name"), *tx = json_object_get(x, "template");
            if (!json_is_string(nm) || !json_is_string(tx)) {
                CHAT_ERR("%s: chat_template[%zu] is not {\"name\": string, \"template\": string}", path, i);
                st = SITS_ERR_FORMAT;
                goto out;
            }
            int was_default = c->has_default;
            SITS_CHECK_GOTO(add_template(c, json_string_value(nm), json_string_value(tx), json_string_length(tx), path),
                            st, out);
            if (!was_default && c->has_default) SITS_CHECK_GOTO(set_source(c, "tokenizer_config.json"), st, out);
        }
    } else if (ct && !json_is_null(ct)) {
        CHAT_ERR("%s: chat_template must be a string or a list of {name, template}", path);
        st = SITS_ERR_FORMAT;
    }
out:
    json_decref(cfg);
    json_decref(stm);
    return st;
}

/* [mm] model_dir/chat_template.json {"chat_template": string}: a multimodal model's processor template (Gemma 3,
 * Qwen2.5-VL, LLaVA), the default when the tokenizer has none (as vLLM falls back to the processor's). */
static sits_status_t load_processor_template(sits_chat_t *c, const char *dir)
{
    if (c->has_default) return SITS_OK;
    char path[4096];
    sits_status_t st;
    snprintf(path, sizeof path, "%s/chat_template.json", dir);
    json_t *j = load_json(path, &st);
    if (st != SITS_OK || !j) return st;
    const json_t *ct = json_object_get(j, "chat_template");
    if (!json_is_string(ct)) {
        CHAT_ERR("%s: expected {\"chat_template\": string}", path);
        st = SITS_ERR_FORMAT;
    } else {
        st = add_template(c, "default", json_string_value(ct), json_string_length(ct), path);
        if (st == SITS_OK) st = set_source(c, "chat_template.json");
    }
    json_decref(j);
    return st;
}

/* model_dir/additional_chat_templates/NAME.jinja (transformers >= 4.52 saves named templates there). */
static sits_status_t load_additional(sits_chat_t *c, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/additional_chat_templates", dir);
    DIR *d = opendir(path);
    if (!d) return SITS_OK;
    sits_status_t st = SITS_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 6 || strcmp(e->d_name + l - 6, ".jinja") != 0) continue;
        char file[4600], name[256];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        snprintf(name, sizeof name, "%.*s", (int)(l - 6), e->d_name);
        char *src = NULL;
        size_t len = 0;
        SITS_CHECK_GOTO(read_file(file, &src, &len), st, out);
        st = add_template(c, name, src, len, file);
        free(src);
        if (st != SITS_OK) goto out;
    }
out:
    closedir(d);
    return st;
}

static sits_status_t load_override(sits_chat_t *c, const char *override)
{
    char *src = NULL;
    size_t len = 0;
    struct stat sb;
    if (stat(override, &sb) == 0 && S_ISREG(sb.st_mode)) {
        SITS_CHECK(read_file(override, &src, &len));
        sits_status_t st = add_template(c, "default", src, len, override);
        free(src);
        SITS_CHECK(st);
        return set_source(c, override);
    }
    return SITS_ERR_NOT_FOUND;  /* a name: resolved after the model's templates are known */
}

sits_status_t sits_chat_load(const char *dir, const char *override, sits_chat_t **chat_p)
{
    sits_status_t st = SITS_OK;
    sits_chat_t *c = calloc(1, sizeof *c);
    if (!c || !(c->special = json_object())) { free(c); return SITS_ERR_NOMEM; }
    int by_name = 0;
    if (override && *override) {
        st = load_override(c, override);
        if (st == SITS_ERR_NOT_FOUND) by_name = 1;
        else if (st != SITS_OK) goto err;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    char *src = NULL;
    size_t len = 0;
    st = read_file(path, &src, &len);
    if (st == SITS_OK) {
        int was_default = c->has_default;
        st = add_template(c, "default", src, len, path);
        free(src);
        if (st != SITS_OK) goto err;
        if (!was_default) SITS_CHECK_GOTO(set_source(c, "chat_template.jinja"), st, err);
    } else if (st != SITS_ERR_NOT_FOUND) {
        goto err;
    }
    SITS_CHECK_GOTO(load_tokenizer_config(c, dir), st, err);
    SITS_CHECK_GOTO(load_processor_template(c, dir), st, err);
    SITS_CHECK_GOTO(load_additional(c, dir), st, err);
    if (by_name) {
        /* NAME: one of the model's templates, else a built-in family */
        size_t i;
        for (i = 0; i < c->n && strcmp(c->t[i].name, override) != 0; i++) {}
        if (i < c->n) {   /* make it the default; the model's default steps aside */
            for (size_t j = 0; j < c->n; j++)
                if (j != i && !strcmp(c->t[j].name, "default")) { free(c->t[j].name); c->t[j].name = strdup("model-default"); }
            if (strcmp(c->t[i].name, "default") != 0) {
                free(c->t[i].name);
                c->t[i].name = strdup("default");
            }
            c->has_default = 1;
            char s[300];
            snprintf(s, sizeof s, "named template '%s'", override);
            SITS_CHECK_GOTO(set_source(c, s), st, err);
        } else {
            size_t b;
            for (b = 0; b < N_BUILTIN && strcmp(BUILTIN[b].name, override) != 0; b++) {}
            if (b == N_BUILTIN) {
                CHAT_ERR("--chat-template '%s': neither a file, a named template of the model, nor a built-in "
                         "template (llama3, llama2, mistral, chatml)", override);
                st = SITS_ERR_INVALID;
                goto err;
            }
            for (size_t j = 0; j < c->n; j++)
                if (!strcmp(c->t[j].name, "default")) { free(c->t[j].name); c->t[j].name = strdup("model-default"); }
            c->has_default = 0;
            SITS_CHECK_GOTO(add_template(c, "default", BUILTIN[b].src, strlen(BUILTIN[b].src), "built-in"), st, err);
            char s[64];
            snprintf(s, sizeof s, "built-in %s", BUILTIN[b].name);
            SITS_CHECK_GOTO(set_source(c, s), st, err);
        }
        for (size_t j = 0; j < c->n; j++)
            if (!c->t[j].name) { st = SITS_ERR_NOMEM; goto err; }
    }
    if (!c->source) SITS_CHECK_GOTO(set_source(c, c->n ? "named templates only" : "none"), st, err);
    SITS_INFO(SITS_SUB_TOK, "chat template: %s (%zu template%s)", c->source, c->n, c->n == 1 ? "" : "s");
    *chat_p = c;
    return SITS_OK;
err:
    sits_chat_destroy(c);
    return st;
}

void sits_chat_destroy(sits_chat_t *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->t[i].name);
        free(c->t[i].src);
        sits_tmpl_destroy(c->t[i].tmpl);
    }
    free(c->t);
    free(c->source);
    json_decref(c->special);
    free(c);
}

int sits_chat_available(const sits_chat_t *c) { return c && c->n > 0; }
const char *sits_chat_source(const sits_chat_t *c) { return c && c->source ? c->source : "none"; }

static const chat_named_t *select_template(const sits_chat_t *c, const char *name, int has_tools);

const char *sits_chat_template_text(const sits_chat_t *c, int has_tools)
{
    const chat_named_t *t = c && c->n > 0 ? select_template(c, NULL, has_tools) : NULL;
    return t ? t->src : NULL;
}

static const chat_named_t *select_template(const sits_chat_t *c, const char *name, int has_tools)
{
    const char *want[2] = { name, NULL };
    if (!name) {
        want[0] = has_tools ? "tool_use" : "default";
        want[1] = has_tools ? "default" : NULL;
    }
    for (int w = 0; w < 2 && want[w]; w++)
        for (size_t i = 0; i < c->n; i++)
            if (!strcmp(c->t[i].name, want[w])) return &c->t[i];
    return NULL;
}

static void set_err(sits_tmpl_error_t *err, const char *fmt, const char *arg)
{
    if (!err) return;
    memset(err, 0, sizeof *err);
    snprintf(err->msg, sizeof err->msg, fmt, arg);
}

/* Python str.isspace() at s[i] (forwards) or ending at s[i] (backwards): ASCII whitespace, 0x1C-0x1F and the
 * Unicode White_Space characters. *len_p: its byte length. */
static int py_space_at(const char *s, size_t n, size_t i, int backwards, size_t *len_p)
{
    static const char *const WS[] = { "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
        "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
        "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80" };
    unsigned char ch = (unsigned char)(backwards ? s[i - 1] : s[i]);
    if (ch == ' ' || (ch >= 0x09 && ch <= 0x0d) || (ch >= 0x1c && ch <= 0x1f)) { *len_p = 1; return 1; }
    for (size_t k = 0; k < sizeof(WS) / sizeof(WS[0]); k++) {
        size_t l = strlen(WS[k]);
        if (backwards ? (i >= l && !memcmp(s + i - l, WS[k], l)) : (i + l <= n && !memcmp(s + i, WS[k], l))) {
            *len_p = l;
            return 1;
        }
    }
    return 0;
}

/* What transformers (5.x) does to the messages before the template sees them: keys whose value is None are
 * dropped (_normalize_chat_messages), and a reasoning text under any of reasoning_content / thinking /
 * reasoning is offered under "thinking" (first) and "reasoning_content" too (_alias_reasoning_fields).
 * Returns a new array. */
static json_t *normalise_messages(const json_t *messages)
{
    static const char *const REASONING[] = { "reasoning_content", "thinking", "reasoning" };
    json_t *out = json_array();
    size_t i;
    const json_t *m;
    if (!out) return NULL;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) {
            if (json_array_append(out, (json_t *)m) != 0) goto fail;
            continue;
        }
        const json_t *reasoning = NULL;
        for (int k = 0; k < 3 && !reasoning; k++) {
            const json_t *v = json_object_get(m, REASONING[k]);
            if (v && !json_is_null(v)) reasoning = v;
        }
        json_t *nm = json_object();
        if (!nm || json_array_append_new(out, nm) != 0) goto fail;
        if (reasoning && json_object_set(nm, "thinking", (json_t *)reasoning) != 0) goto fail;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)m, key, v)
            if (!json_is_null(v) && json_object_set(nm, key, v) != 0) goto fail;
        if (reasoning && json_object_set(nm, "reasoning_content", (json_t *)reasoning) != 0) goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

#define CONTINUE_TAG "CONTINUE_FINAL_MESSAGE_TAG "

/* render_jinja_template's continue_final_message, first half: append the tag to the final message's content
 * (its last text block when it is a list). *final_p: the text being continued. */
static sits_status_t continue_mark(json_t *messages, const char *src, const json_t **final_p, sits_tmpl_error_t *err)
{
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    json_t *content = json_object_get(last, "content");
    if (!content) {
        set_err(err, "continue_final_message is set but the final message has no \"%s\" to continue!", "content");
        return SITS_ERR_INVALID;
    }
    if (!strstr(src, "content")) {
        set_err(err, "continue_final_message is set to \"%s\" but this is not an accepted field in the chat_template",
                "content");
        return SITS_ERR_INVALID;
    }
    json_t *holder = last;
    const char *field = "content";
    if (json_is_array(content)) {
        holder = NULL;
        for (size_t i = json_array_size(content); i-- > 0 && !holder;)
            if (json_object_get(json_array_get(content, i), "text")) holder = json_array_get(content, i);
        if (!holder) {
            set_err(err, "continue_final_message is set but we could not find any text to continue in the final "
                         "message!%s", "");
            return SITS_ERR_INVALID;
        }
        field = "text";
    }
    json_t *text = json_object_get(holder, field);
    if (!json_is_string(text)) {
        set_err(err, "continue_final_message: the final message's %s is not a string", field);
        return SITS_ERR_INVALID;
    }
    size_t n = json_string_length(text);
    char *tagged = malloc(n + sizeof CONTINUE_TAG);
    if (!tagged) return SITS_ERR_NOMEM;
    memcpy(tagged, json_string_value(text), n);
    memcpy(tagged + n, CONTINUE_TAG, sizeof CONTINUE_TAG);
    json_t *orig = json_incref(text);
    int bad = json_object_set_new(holder, field, json_stringn_nocheck(tagged, n + sizeof CONTINUE_TAG - 1));
    free(tagged);
    if (bad) { json_decref(orig); return SITS_ERR_NOMEM; }
    *final_p = orig;   /* the caller releases it */
    return SITS_OK;
}

/* second half: cut the render at the tag (then rstrip when the template trimmed the space after it). */
static sits_status_t continue_cut(const json_t *final, char *out, size_t *len, sits_tmpl_error_t *err)
{
    const char *m = json_string_value(final);
    size_t n = json_string_length(final), a = 0, e = n, l;
    while (a < e && py_space_at(m, n, a, 0, &l)) a += l;
    while (e > a && py_space_at(m, n, e, 1, &l)) e -= l;
    static const char tag[] = "CONTINUE_FINAL_MESSAGE_TAG";   /* the tag, stripped */
    size_t tl = sizeof tag - 1, tag_loc = (size_t)-1;
    for (size_t p = *len >= tl ? *len - tl + 1 : 0; p-- > 0;)
        if (!memcmp(out + p, tag, tl)) { tag_loc = p; break; }
    int found_msg = e == a;
    for (size_t p = 0; !found_msg && p + (e - a) <= *len; p++)
        if (!memcmp(out + p, m + a, e - a)) found_msg = 1;
    if (!found_msg || tag_loc == (size_t)-1) {
        set_err(err, "continue_final_message is set but the final message does not appear in the chat after applying "
                     "the chat template! This can happen if the chat template deletes portions of the final message%s", "");
        return SITS_ERR_INVALID;
    }
    *len = tag_loc;
    if (out[tag_loc + tl] != ' ')   /* the template trimmed the space after the tag (out is NUL-terminated) */
        while (*len > 0 && py_space_at(out, *len, *len, 1, &l)) *len -= l;
    out[*len] = 0;
    return SITS_OK;
}

sits_status_t sits_chat_render(const sits_chat_t *c, const sits_chat_input_t *in, char **out_p, size_t *len_p,
                               sits_tmpl_error_t *err)
{
    if (!json_is_array(in->messages)) {
        set_err(err, "messages must be a list%s", "");
        return SITS_ERR_INVALID;
    }
    int has_tools = in->tools && !json_is_null(in->tools);
    const chat_named_t *t = c ? select_template(c, in->template_name, has_tools) : NULL;
    if (!t) {
        if (!c || c->n == 0) {
            set_err(err, "the model has no chat template (pass --chat-template FILE|NAME)%s", "");
        } else if (in->template_name) {
            set_err(err, "the model has no chat template named '%s'", in->template_name);
        } else {
            set_err(err, "the model's chat templates are all named; none is 'default'%s", "");
        }
        return SITS_ERR_NOT_FOUND;
    }
    if (in->add_generation_prompt && in->continue_final_message) {
        set_err(err, "continue_final_message and add_generation_prompt are not compatible: use continue_final_message "
                     "when you want the model to continue the final message, and add_generation_prompt when you want "
                     "to add a header that will prompt it to start a new assistant message instead%s", "");
        return SITS_ERR_INVALID;
    }
    if (in->continue_final_message && json_array_size(in->messages) == 0) {
        set_err(err, "continue_final_message is set but the conversation is empty!%s", "");
        return SITS_ERR_INVALID;
    }
    json_t *msgs = normalise_messages(in->messages);
    if (!msgs) return SITS_ERR_NOMEM;
    const json_t *final = NULL;
    sits_status_t st = SITS_OK;
    if (in->continue_final_message) SITS_CHECK_GOTO(continue_mark(msgs, t->src, &final, err), st, out_msgs);
    /* the variables: special tokens, the caller's kwargs over them, then transformers' named arguments */
    json_t *vars = json_deep_copy(c->special);
    if (!vars) { st = SITS_ERR_NOMEM; goto out_msgs; }
    if ((json_is_object(in->kwargs) && json_object_update(vars, (json_t *)in->kwargs)) ||
        json_object_set(vars, "messages", msgs) ||
        json_object_set_new(vars, "tools", has_tools ? json_incref((json_t *)in->tools) : json_null()) ||
        json_object_set_new(vars, "documents",
                            in->documents && !json_is_null(in->documents) ? json_incref((json_t *)in->documents) : json_null()) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(in->add_generation_prompt))) {
        st = SITS_ERR_NOMEM;
        goto out;
    }
    sits_tmpl_render_opts_t opts = { .now = in->now };
    char *out = NULL;
    size_t len = 0;
    SITS_CHECK_GOTO(sits_tmpl_render(t->tmpl, vars, &opts, &out, &len, err), st, out);
    if (final) {
        st = continue_cut(final, out, &len, err);
        if (st != SITS_OK) { free(out); goto out; }
    }
    *out_p = out;
    if (len_p) *len_p = len;
out:
    json_decref(vars);
out_msgs:
    json_decref((json_t *)final);
    json_decref(msgs);
    return st;
}

sits_status_t sits_chat_render_simple(const sits_chat_t *c, const sits_chat_msg_t *msgs, size_t n, int add_gen,
                                      char **out_p, sits_tmpl_error_t *err)
{
    json_t *arr = json_array();
    if (!arr) return SITS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(arr, json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content)) != 0) {
            json_decref(arr);
            return SITS_ERR_NOMEM;
        }
    sits_chat_input_t in = { .messages = arr, .add_generation_prompt = add_gen };
    sits_status_t st = sits_chat_render(c, &in, out_p, NULL, err);
    json_decref(arr);
    return st;
}
