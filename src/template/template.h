/* template.h -- Jinja2 templates, rendered as transformers' apply_chat_template renders a model's
 * chat_template: jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
 * loopcontrols extension, the globals raise_exception(msg) and strftime_now(fmt), transformers' tojson
 * (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)) and the
 * {% generation %} block of its AssistantTracker extension (renders its body).
 *
 * Compile once (the lexer and parser build an AST; every filter, test, method and statement name is
 * resolved then, so a template that uses something this interpreter does not implement is refused at
 * load with its line and the construct), render many times. A compiled template is immutable: renders
 * may run on several threads at once.
 *
 * Nesting is bounded (template tree depth, evaluation depth 1000, 256 nested macro calls), so a render
 * fits in 512 KiB of stack whatever the template (test_template passes under ulimit -s 512).
 *
 * Values are jinja2's: none, bool, int (64-bit), float (double, printed as Python's repr), string
 * (UTF-8), list, dict (insertion order kept, as Python's), callable (macros, builtins, bound methods),
 * namespace, undefined. Variables come from a JSON object (jansson): JSON null -> none, true/false ->
 * bool, integer -> int, real -> float, string, array -> list, object -> dict. Output is what Python's
 * str() of each value gives ({{ none }} -> "None", {{ [1,'a'] }} -> "[1, 'a']", {{ 1.0 }} -> "1.0"). */
#ifndef SITS_TEMPLATE_TEMPLATE_H
#define SITS_TEMPLATE_TEMPLATE_H

#include <stddef.h>
#include <time.h>
#include <jansson.h>
#include "util/status.h"

typedef struct sits_tmpl sits_tmpl_t;

/* Where and why compiling or rendering failed. line: 1-based line of the template (0 when unknown). */
typedef struct {
    int line;
    int raised;       /* render: 1 when the template called raise_exception(); msg is then its argument */
    char msg[512];    /* e.g. "line 12: unsupported filter 'wordwrap'" or the raised message */
} sits_tmpl_error_t;

typedef struct {
    time_t now;       /* strftime_now's clock, local time (0: time(NULL)); tests pass a fixed time */
} sits_tmpl_render_opts_t;

/* src: len bytes of UTF-8 template source. Syntax errors -> SITS_ERR_FORMAT, constructs this interpreter
 * does not implement -> SITS_ERR_UNSUPPORTED; both fill *err (may be NULL) and log nothing. */
sits_status_t sits_tmpl_compile(const char *src, size_t len, sits_tmpl_t **tmpl_p, sits_tmpl_error_t *err);
void sits_tmpl_destroy(sits_tmpl_t *tmpl);

/* vars: a JSON object whose members become the template's global variables (messages, tools, documents,
 * add_generation_prompt, bos_token, ...). opts may be NULL. *out_p is malloc'd and NUL-terminated,
 * *len_p excludes the NUL (the output may hold NUL bytes only if the variables do).
 * Errors: raise_exception() and jinja2 runtime errors (undefined attribute access, type errors,
 * calling a non-callable, division by zero, ...) -> SITS_ERR_INVALID with *err filled; out of memory ->
 * SITS_ERR_NOMEM; a render past the sandbox limits (output over 64 MiB, recursion deeper than 256,
 * loops over 10 million iterations) -> SITS_ERR_INVALID. */
sits_status_t sits_tmpl_render(const sits_tmpl_t *tmpl, const json_t *vars, const sits_tmpl_render_opts_t *opts,
                               char **out_p, size_t *len_p, sits_tmpl_error_t *err);

#endif
