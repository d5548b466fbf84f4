/* chat.c -- chat templates of the common model families, rendered byte-exactly as transformers'
 * apply_chat_template renders their real Jinja chat_template strings (tests/ref/gen_tokenizer_fixtures.py
 * holds those strings and the expected renders).
 *
 *   llama3  : bos + per message "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>",
 *             generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n".
 *   llama2  : optional leading system folded into the first user turn as "<<SYS>>\n{sys}\n<</SYS>>\n\n";
 *             user "{bos}[INST] {strip} [/INST]", assistant " {strip} {eos}"; roles must alternate
 *             user/assistant; no generation prompt.
 *   mistral : bos + user "[INST] {content} [/INST]", assistant "{content}{eos}"; alternation; no system.
 *   chatml  : (default system "You are a helpful assistant." when the first message is not system)
 *             "<|im_start|>{role}\n{content}<|im_end|>\n", generation prompt "<|im_start|>assistant\n". */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"
#include "util/log.h"

typedef struct { char *p; size_t n, cap; int oom; } cbuf_t;

static void cput(cbuf_t *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void cputs(cbuf_t *b, const char *s) { cput(b, s, strlen(s)); }

/* Python str.isspace(): Unicode White_Space plus the ASCII separators 0x1C-0x1F. */
static int py_space(uint32_t c) { return sits_tok_is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

/* Python str.strip() (Jinja's trim filter) */
static void cput_stripped(cbuf_t *b, const char *s)
{
    size_t n = strlen(s), a = 0, e = n;
    while (a < e) {
        uint32_t cp;
        size_t l = sits_tok_utf8_next(s + a, e - a, &cp);
        if (!py_space(cp)) break;
        a += l;
    }
    while (e > a) {
        size_t p = e - 1;
        while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        uint32_t cp;
        sits_tok_utf8_next(s + p, e - p, &cp);
        if (!py_space(cp)) break;
        e = p;
    }
    cput(b, s + a, e - a);
}

static const struct { const char *name; sits_chat_kind_t kind; } NAMES[] = {
    { "llama3", SITS_CHAT_LLAMA3 }, { "llama-3", SITS_CHAT_LLAMA3 }, { "llama2", SITS_CHAT_LLAMA2 },
    { "llama-2", SITS_CHAT_LLAMA2 }, { "mistral", SITS_CHAT_MISTRAL }, { "chatml", SITS_CHAT_CHATML },
    { "qwen2", SITS_CHAT_CHATML },
};

sits_status_t sits_chat_template_by_name(const char *name, sits_chat_kind_t *kind_p)
{
    for (size_t i = 0; name && i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
        if (!strcmp(name, NAMES[i].name)) { *kind_p = NAMES[i].kind; return SITS_OK; }
    SITS_ERROR(SITS_SUB_TOK, "unknown chat template '%s' (known: llama3, llama2, mistral, chatml)", name ? name : "");
    return SITS_ERR_INVALID;
}

const char *sits_chat_template_name(sits_chat_kind_t kind)
{
    switch (kind) {
    case SITS_CHAT_LLAMA3: return "llama3";
    case SITS_CHAT_LLAMA2: return "llama2";
    case SITS_CHAT_MISTRAL: return "mistral";
    case SITS_CHAT_CHATML: return "chatml";
    default: return "none";
    }
}

sits_status_t sits_chat_template_detect(const char *tmpl, sits_chat_kind_t *kind_p)
{
    if (tmpl) {
        if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>") && strstr(tmpl, "<|eot_id|>")) {
            *kind_p = SITS_CHAT_LLAMA3;
            return SITS_OK;
        }
        if (strstr(tmpl, "<|im_start|>") && strstr(tmpl, "<|im_end|>")) { *kind_p = SITS_CHAT_CHATML; return SITS_OK; }
        if (strstr(tmpl, "[INST]") && strstr(tmpl, "[/INST]")) {
            *kind_p = strstr(tmpl, "<<SYS>>") ? SITS_CHAT_LLAMA2 : SITS_CHAT_MISTRAL;
            return SITS_OK;
        }
    }
    SITS_ERROR(SITS_SUB_TOK, "chat_template of tokenizer_config.json not recognised (known: llama3, llama2, mistral, "
               "chatml); pass --chat-template NAME");
    return SITS_ERR_UNSUPPORTED;
}

static int alternates(const sits_chat_msg_t *m, size_t i0)
{
    /* the templates raise when (role == 'user') != (index % 2 == 0) */
    return (strcmp(m->role, "user") == 0) == (i0 % 2 == 0);
}

sits_status_t sits_chat_render_kind(sits_chat_kind_t kind, const char *bos, const char *eos,
                                    const sits_chat_msg_t *msgs, size_t n, int add_gen, char **out_p)
{
    cbuf_t b = { 0 };
    bos = bos ? bos : "";
    eos = eos ? eos : "";
    cput(&b, "", 0);
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) { SITS_ERROR(SITS_SUB_TOK, "chat message %zu without role/content", i); goto err_invalid; }
    switch (kind) {
    case SITS_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            if (i == 0) cputs(&b, bos);
            cputs(&b, "<|start_header_id|>");
            cputs(&b, msgs[i].role);
            cputs(&b, "<|end_header_id|>\n\n");
            cput_stripped(&b, msgs[i].content);
            cputs(&b, "<|eot_id|>");
        }
        if (add_gen) cputs(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case SITS_CHAT_LLAMA2: {
        size_t first = 0;
        const char *sys = NULL;
        if (n && !strcmp(msgs[0].role, "system")) { sys = msgs[0].content; first = 1; }
        for (size_t i = first; i < n; i++) {
            size_t i0 = i - first;
            if (!alternates(&msgs[i], i0)) goto err_alternate;
            cbuf_t c = { 0 };
            cput(&c, "", 0);
            if (i0 == 0 && sys) {
                cputs(&c, "<<SYS>>\n");
                cputs(&c, sys);
                cputs(&c, "\n<</SYS>>\n\n");
            }
            cputs(&c, msgs[i].content);
            if (c.oom) { free(c.p); goto err_nomem; }
            if (!strcmp(msgs[i].role, "user")) {
                cputs(&b, bos);
                cputs(&b, "[INST] ");
                cput_stripped(&b, c.p);
                cputs(&b, " [/INST]");
            } else if (!strcmp(msgs[i].role, "assistant")) {
                cputs(&b, " ");
                cput_stripped(&b, c.p);
                cputs(&b, " ");
                cputs(&b, eos);
            }
            free(c.p);
        }
        break;
    }
    case SITS_CHAT_MISTRAL:
        cputs(&b, bos);
        for (size_t i = 0; i < n; i++) {
            if (!alternates(&msgs[i], i)) goto err_alternate;
            if (!strcmp(msgs[i].role, "user")) {
                cputs(&b, "[INST] ");
                cputs(&b, msgs[i].content);
                cputs(&b, " [/INST]");
            } else if (!strcmp(msgs[i].role, "assistant")) {
                cputs(&b, msgs[i].content);
                cputs(&b, eos);
            } else {
                SITS_ERROR(SITS_SUB_TOK, "chat template mistral: only user and assistant roles are supported");
                goto err_invalid;
            }
        }
        break;
    case SITS_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) {
            if (i == 0 && strcmp(msgs[0].role, "system") != 0)
                cputs(&b, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
            cputs(&b, "<|im_start|>");
            cputs(&b, msgs[i].role);
            cputs(&b, "\n");
            cputs(&b, msgs[i].content);
            cputs(&b, "<|im_end|>\n");
        }
        if (add_gen) cputs(&b, "<|im_start|>assistant\n");
        break;
    default:
        SITS_ERROR(SITS_SUB_TOK, "no chat template selected");
        goto err_invalid;
    }
    if (b.oom) goto err_nomem;
    *out_p = b.p;
    return SITS_OK;
err_alternate:
    SITS_ERROR(SITS_SUB_TOK, "chat template %s: conversation roles must alternate user/assistant/user/assistant/...",
               sits_chat_template_name(kind));
err_invalid:
    free(b.p);
    return SITS_ERR_INVALID;
err_nomem:
    free(b.p);
    return SITS_ERR_NOMEM;
}

sits_status_t sits_chat_render(const sits_tokenizer_t *tok, const char *template_name, const sits_chat_msg_t *msgs,
                               size_t n, int add_gen, char **out_p)
{
    sits_chat_kind_t kind;
    if (template_name && *template_name) {
        SITS_CHECK(sits_chat_template_by_name(template_name, &kind));
    } else {
        if (!tok->chat_template) {
            SITS_ERROR(SITS_SUB_TOK, "the model has no chat_template in tokenizer_config.json; pass --chat-template NAME");
            return SITS_ERR_NOT_FOUND;
        }
        SITS_CHECK(sits_chat_template_detect(tok->chat_template, &kind));
    }
    /* chatml (Qwen2) has no BOS in its template; the others take tokenizer_config.json's strings */
    return sits_chat_render_kind(kind, tok->bos_token, tok->eos_token, msgs, n, add_gen, out_p);
}
