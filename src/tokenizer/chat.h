/* chat.h -- a model's chat template, rendered as transformers' apply_chat_template(tokenize=False) renders it.
 *
 * The template is the model's own Jinja source, run by src/template (a C Jinja interpreter):
 *   1. --chat-template FILE|NAME when given: a readable file holds the template source; otherwise NAME is one
 *      of the model's named templates, or a built-in one ("llama3", "llama2", "mistral", "chatml": the
 *      Llama-3-Instruct, Llama-2-chat, Mistral-Instruct v0.1 and Qwen2 ChatML templates as published);
 *   2. else model_dir/chat_template.jinja (transformers >= 4.43 writes the template there);
 *   3. else tokenizer_config.json "chat_template": a string, or a list of {name, template} (the "default"
 *      one, or "tool_use" when the request passes tools, as transformers chooses);
 *   4. [mm] else chat_template.json {"chat_template": string} (a multimodal model's processor template);
 *   plus named templates in model_dir/additional_chat_templates/NAME.jinja.
 * Every template found is compiled at load: one that uses a construct the interpreter does not implement
 * is refused there, naming the file, line and construct.
 *
 * Variables of a render (transformers' names): messages, tools (none unless given), documents (none unless
 * given), add_generation_prompt, the special tokens of tokenizer_config.json / special_tokens_map.json
 * (bos_token, eos_token, unk_token, pad_token, sep_token, cls_token, mask_token,
 * additional_special_tokens) and the caller's extra variables (chat_template_kwargs), which win.
 * A loaded sits_chat_t is immutable; renders may run on several threads. */
#ifndef SITS_TOKENIZER_CHAT_H
#define SITS_TOKENIZER_CHAT_H

#include <stddef.h>
#include <time.h>
#include <jansson.h>
#include "template/template.h"
#include "util/status.h"

typedef struct sits_chat sits_chat_t;

typedef struct {
    const json_t *messages;      /* array of message objects, passed to the template as they are */
    const json_t *tools;         /* array, or NULL (the template sees none) */
    const json_t *documents;     /* array, or NULL */
    const json_t *kwargs;        /* object of extra template variables, or NULL */
    const char *template_name;   /* a named template of the model (NULL: as transformers chooses) */
    int add_generation_prompt;
    int continue_final_message;  /* cut the render after the last message's content (assistant prefill);
                                  * exclusive with add_generation_prompt */
    time_t now;                  /* strftime_now's clock (0: now) */
} sits_chat_input_t;

/* override: --chat-template (NULL or "": none). No template anywhere is not an error: *chat_p is then a
 * chat without template (sits_chat_available() == 0; renders fail with SITS_ERR_NOT_FOUND).
 * Errors (logged with the file and reason): an unreadable/malformed file -> SITS_ERR_IO/FORMAT, an unknown
 * override name -> SITS_ERR_INVALID, a template the interpreter refuses -> SITS_ERR_UNSUPPORTED/FORMAT. */
sits_status_t sits_chat_load(const char *model_dir, const char *override, sits_chat_t **chat_p);
void sits_chat_destroy(sits_chat_t *chat);

int sits_chat_available(const sits_chat_t *chat);
/* Where the default template came from, for logs and errors: "tokenizer_config.json", "chat_template.jinja",
 * "built-in llama3", a file path, or "none". */
const char *sits_chat_source(const sits_chat_t *chat);

/* The source of the template a render without a template name uses (the "tool_use" one when has_tools and
 * the model has it), NULL without template: the server picks its tool-call parser from it. */
const char *sits_chat_template_text(const sits_chat_t *chat, int has_tools);

/* Render. *out_p malloc'd, NUL-terminated; *len_p (may be NULL) excludes the NUL. err (may be NULL) gets
 * the template's own message when it raises (err->raised) or fails at run time -> SITS_ERR_INVALID.
 * An unknown template_name -> SITS_ERR_NOT_FOUND. */
sits_status_t sits_chat_render(const sits_chat_t *chat, const sits_chat_input_t *in, char **out_p, size_t *len_p,
                               sits_tmpl_error_t *err);

/* The common case: one conversation of plain (role, content) strings. */
typedef struct {
    const char *role;
    const char *content;
} sits_chat_msg_t;
sits_status_t sits_chat_render_simple(const sits_chat_t *chat, const sits_chat_msg_t *msgs, size_t n,
                                      int add_generation_prompt, char **out_p, sits_tmpl_error_t *err);

#endif
