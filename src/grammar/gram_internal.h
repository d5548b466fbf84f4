/* gram_internal.h -- the grammar representation shared by the engine (grammar.c) and the compilers
 * (schema.c, regex.c). Not part of the module's contract.
 *
 * elems: every alternative of every rule, each a run of elements ending with an END element.
 * rule r's alternatives start at elems positions alts[alt_off[r] .. alt_off[r] + alt_n[r]).
 * The start rule is rule 0. Byte sets are 256-bit maps in sets[]. */
#ifndef SITS_GRAMMAR_GRAM_INTERNAL_H
#define SITS_GRAMMAR_GRAM_INTERNAL_H

#include "grammar/grammar.h"

enum { GE_END = 0, GE_SET = 1, GE_RULE = 2 };
typedef struct { int32_t type, arg; } gram_elem_t;
typedef struct { uint32_t w[8]; } gram_set_t;

/* an alternative under construction */
typedef struct { gram_elem_t *e; int n, cap; } gram_alt_t;

/* the builder: rules get ids at creation, alternatives are added in any order */
typedef struct {
    gram_alt_t *rule_alts;     /* per rule: alternatives, each as a list of elements */
    int *rule_nalts, *rule_capalts;
    gram_alt_t **alts;         /* alts[r][k] */
    int n_rules, cap_rules;
    gram_set_t *sets;
    int n_sets, cap_sets;
    int oom;                   /* sticky allocation failure */
} gram_builder_t;

void gb_init(gram_builder_t *b);
void gb_free(gram_builder_t *b);
int gb_rule(gram_builder_t *b);                              /* a new rule with no alternatives */
void gb_add_alt(gram_builder_t *b, int rule, gram_alt_t *a); /* takes a's elements (a is reset) */
void ga_set(gram_builder_t *b, gram_alt_t *a, const gram_set_t *s);
void ga_byte(gram_builder_t *b, gram_alt_t *a, unsigned char c);
void ga_lit(gram_builder_t *b, gram_alt_t *a, const char *s, size_t n);
void ga_ref(gram_builder_t *b, gram_alt_t *a, int rule);
void ga_free(gram_alt_t *a);
/* rule ::= a single alternative that is the literal s */
int gb_lit_rule(gram_builder_t *b, const char *s, size_t n);
/* repetition of rule x between lo and hi times (hi < 0: unbounded); returns a rule */
int gb_repeat(gram_builder_t *b, int x, int lo, int hi);
void gs_add_range(gram_set_t *s, int lo, int hi);
int gs_has(const gram_set_t *s, int c);
/* one UTF-8 encoded character outside the ASCII range (valid sequences only) */
int gb_utf8_multibyte(gram_builder_t *b);
/* regex.c: the rule of a regex (json: inside a JSON string, no byte that needs escaping); -1 with err set */
int sits_grammar_regex_rule(gram_builder_t *b, const char *re, size_t len, char *err, size_t err_len, int json);
/* Finish: rule 0 is the start. */
sits_status_t gb_finish(gram_builder_t *b, sits_grammar_t **g_p);

#endif
