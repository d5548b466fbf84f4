/* test_grammar.c -- structured output (src/grammar): schemas, regexes and choices compiled to grammars,
 * then random walks over two vocabularies (a synthetic one: every byte plus multi-byte tokens; the
 * byte-level fixture tokenizer's) where each step draws uniformly among the tokens the mask allows --
 * what a random-weight model does under a constraint. Checks here: the mask is never empty before the
 * document is complete (no dead ends: nothing allowed that cannot be continued), the drawn token is
 * accepted, a token outside the mask is refused, for the first EXACT_STEPS steps of each walk the mask
 * equals token by token what the state accepts byte by byte (sits_grammar_state_accepts: no trie, no
 * loop-class shortcut), the finished text matches the grammar; wrong schemas
 * are refused naming the keyword. The finished documents go to OUT (jsonl) for the independent check:
 * tests/unit/grammar_validate.sh validates them with python jsonschema / re.fullmatch.
 * usage: test_grammar CASES.json REFUSED.json TOKENIZER_DIR OUT.jsonl */
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WALKS 12
#define MAX_STEPS 3000
#define EXACT_STEPS 48

static int failures;

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct {
    const char *name;
    sits_grammar_vocab_t *v;
    char **bytes;
    size_t *lens;
    int n;
    int32_t stop;
    int32_t prio[8];    /* tokens that close things, tried first late in a walk */
    int n_prio;
} vocab_t;

static int allowed(const uint32_t *m, int32_t id) { return (m[id >> 5] >> (id & 31)) & 1; }

/* one walk; returns 1 and the text when the document completed */
static int walk(sits_grammar_t *g, vocab_t *vb, uint64_t seed, char **text_p, size_t *len_p)
{
    sits_grammar_state_t *st = NULL;
    uint32_t *mask = malloc(SITS_GRAMMAR_MASK_WORDS(vb->n) * 4);
    int32_t *cand = malloc(sizeof *cand * (size_t)vb->n);
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    int done = 0;
    if (sits_grammar_state_create(g, vb->v, &st) != SITS_OK) { printf("  state_create failed\n"); failures++; goto out; }
    for (int step = 0; step < MAX_STEPS; step++) {
        if (sits_grammar_state_mask(st, mask) != SITS_OK) { printf("  mask failed\n"); failures++; goto out; }
        int nc = 0;
        for (int i = 0; i < vb->n; i++) if (allowed(mask, i)) cand[nc++] = i;
        if (nc == 0) {
            printf("  FAIL %s: empty mask after %zu bytes: %.*s\n", vb->name, len, (int)len, text);
            failures++;
            goto out;
        }
        for (int i = 0; step < EXACT_STEPS && i < vb->n; i++) {
            int a = sits_grammar_state_accepts(st, i);
            if (a != allowed(mask, i)) {
                printf("  FAIL %s: token %d: mask %d, accepts %d, after %zu bytes: %.*s\n", vb->name, i, allowed(mask, i), a, len,
                       (int)len, text);
                failures++;
                goto out;
            }
        }
        int complete = sits_grammar_state_complete(st);
        if (allowed(mask, vb->stop) != complete) {
            printf("  FAIL %s: stop token allowed %d but complete %d\n", vb->name, allowed(mask, vb->stop), complete);
            failures++;
            goto out;
        }
        int32_t pick = cand[rng_next(&seed) % (uint64_t)nc];
        if (step > 40 && rng_next(&seed) % 4 != 0)
            for (int k = 0; k < vb->n_prio; k++) if (allowed(mask, vb->prio[k])) { pick = vb->prio[k]; break; }
        /* a token outside the mask is refused */
        int32_t bad = (int32_t)(rng_next(&seed) % (uint64_t)vb->n);
        if (!allowed(mask, bad) && sits_grammar_state_accept(st, bad) != SITS_ERR_INVALID) {
            printf("  FAIL %s: token %d outside the mask was accepted\n", vb->name, bad);
            failures++;
            goto out;
        }
        if (sits_grammar_state_accept(st, pick) != SITS_OK) {
            printf("  FAIL %s: token %d from the mask was refused\n", vb->name, pick);
            failures++;
            goto out;
        }
        if (pick == vb->stop) { done = 1; break; }
        if (len + vb->lens[pick] + 1 > cap) break;
        memcpy(text + len, vb->bytes[pick], vb->lens[pick]);
        len += vb->lens[pick];
    }
    if (done && !sits_grammar_matches(g, text, len)) {
        printf("  FAIL %s: the finished text does not match: %.*s\n", vb->name, (int)len, text);
        failures++;
        done = 0;
    }
out:
    sits_grammar_state_destroy(st);
    free(mask);
    free(cand);
    if (done) {
        text[len] = 0;
        *text_p = text;
        *len_p = len;
    } else {
        free(text);
    }
    return done;
}

static void set_prio(vocab_t *vb)
{
    static const char *const closers[] = { "\"", "}", "]", "0", "1", "a", NULL };
    vb->n_prio = 0;
    vb->prio[vb->n_prio++] = vb->stop;
    for (int k = 0; closers[k]; k++)
        for (int i = 0; i < vb->n; i++)
            if (vb->bytes[i] && vb->lens[i] == strlen(closers[k]) && memcmp(vb->bytes[i], closers[k], vb->lens[i]) == 0) {
                vb->prio[vb->n_prio++] = i;
                break;
            }
}

static int make_synthetic(vocab_t *vb)
{
    static const char *const multi[] = { "{\"", "\":", "\": ", "\",", ", \"", "\"}", "}}", "]}", "[\"", "\"]", "true",
                                         "false", "null", "123", "-0.5", "e+", "\\u00e9", "\\\"", "\\n", "ab", " the",
                                         "é", "日本", "\xf0\x9f\x98\x80", "red", "blue \\\"q", "\"x\"", "}]", "[[", NULL };
    int nm = 0;
    while (multi[nm]) nm++;
    vb->name = "synthetic";
    vb->n = 256 + nm + 1;
    vb->stop = vb->n - 1;
    vb->bytes = calloc((size_t)vb->n, sizeof *vb->bytes);
    vb->lens = calloc((size_t)vb->n, sizeof *vb->lens);
    for (int i = 0; i < 256; i++) {
        vb->bytes[i] = malloc(1);
        vb->bytes[i][0] = (char)i;
        vb->lens[i] = 1;
    }
    for (int k = 0; k < nm; k++) {
        vb->bytes[256 + k] = strdup(multi[k]);
        vb->lens[256 + k] = strlen(multi[k]);
    }
    set_prio(vb);
    return sits_grammar_vocab_create_bytes((const char *const *)vb->bytes, vb->lens, vb->n, &vb->stop, 1, &vb->v) == SITS_OK ? 0 : -1;
}

static int make_tokenizer(vocab_t *vb, const char *dir)
{
    sits_tokenizer_t *tok = NULL;
    if (sits_tokenizer_load(dir, &tok) != SITS_OK) return -1;
    vb->name = "tokenizer";
    vb->n = (int)sits_tokenizer_vocab_size(tok);
    vb->stop = sits_tokenizer_eos_id(tok);
    vb->bytes = calloc((size_t)vb->n, sizeof *vb->bytes);
    vb->lens = calloc((size_t)vb->n, sizeof *vb->lens);
    char tmp[SITS_TOKEN_BYTES_MAX];
    for (int i = 0; i < vb->n; i++) {
        size_t n;
        if (sits_tokenizer_token_bytes(tok, i, tmp, sizeof tmp, &n) != 0) continue;
        vb->bytes[i] = malloc(n + 1);
        memcpy(vb->bytes[i], tmp, n);
        vb->lens[i] = n;
    }
    set_prio(vb);
    sits_status_t st = sits_grammar_vocab_create(tok, vb->n, &vb->stop, 1, &vb->v);
    sits_tokenizer_destroy(tok);
    return st == SITS_OK ? 0 : -1;
}

static void free_vocab(vocab_t *vb)
{
    for (int i = 0; i < vb->n; i++) free(vb->bytes[i]);
    free(vb->bytes);
    free(vb->lens);
    sits_grammar_vocab_destroy(vb->v);
}

/* walks with both vocabularies; each finished document is written as {kind: spec, "text": ...} */
static void run_walks(FILE *out, sits_grammar_t *g, vocab_t *vbs, int nv, const char *kind, json_t *spec, const char *name)
{
    for (int v = 0; v < nv; v++) {
        int ok = 0;
        for (int w = 0; w < WALKS; w++) {
            char *text = NULL;
            size_t len = 0;
            if (!walk(g, &vbs[v], 1000003u * (uint64_t)w + 17u * (uint64_t)v + 1, &text, &len)) continue;
            json_t *s = json_stringn(text, len);
            if (!s) {
                printf("  FAIL %s/%s: output is not valid UTF-8\n", name, vbs[v].name);
                failures++;
            } else {
                json_t *o = json_pack("{s:s, s:O, s:o, s:s}", "name", name, kind, spec, "text", s, "vocab", vbs[v].name);
                char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
                fprintf(out, "%s\n", line);
                free(line);
                json_decref(o);
                ok++;
            }
            free(text);
        }
        printf("%-14s %-10s %d/%d walks finished\n", name, vbs[v].name, ok, WALKS);
        if (ok < WALKS / 2) {
            printf("  FAIL %s/%s: fewer than half the walks finished\n", name, vbs[v].name);
            failures++;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s CASES.json REFUSED.json TOKENIZER_DIR OUT.jsonl\n", argv[0]);
        return 1;
    }
    json_error_t jerr;
    json_t *cases = json_load_file(argv[1], 0, &jerr), *refused = json_load_file(argv[2], 0, &jerr);
    if (!cases || !refused) { printf("cannot read the case files: %s\n", jerr.text); return 1; }
    vocab_t vbs[2];
    memset(vbs, 0, sizeof vbs);
    if (make_synthetic(&vbs[0]) != 0 || make_tokenizer(&vbs[1], argv[3]) != 0) { printf("cannot build the vocabularies\n"); return 1; }
    FILE *out = fopen(argv[4], "w");
    if (!out) { printf("cannot write %s\n", argv[4]); return 1; }
    char err[256];

    /* refused schemas name the keyword */
    for (size_t i = 0; i < json_array_size(refused); i++) {
        json_t *e = json_array_get(refused, i);
        char *s = json_dumps(json_array_get(e, 0), JSON_COMPACT);
        const char *kw = json_string_value(json_array_get(e, 1));
        sits_grammar_t *g = NULL;
        err[0] = 0;
        sits_status_t st = sits_grammar_from_json_schema(s, strlen(s), err, sizeof err, &g);
        if (st != SITS_ERR_INVALID || !strstr(err, kw)) {
            printf("FAIL refused[%zu] %s: status %d, message '%s' (should name '%s')\n", i, s, (int)st, err, kw);
            failures++;
        }
        sits_grammar_destroy(g);
        free(s);
    }
    printf("refused schemas: %zu checked\n", json_array_size(refused));

    /* schemas */
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        char *s = json_dumps(json_object_get(c, "schema"), JSON_COMPACT);
        sits_grammar_t *g = NULL;
        if (sits_grammar_from_json_schema(s, strlen(s), err, sizeof err, &g) != SITS_OK) {
            printf("FAIL %s: not compiled: %s\n", name, err);
            failures++;
        } else {
            run_walks(out, g, vbs, 2, "schema", json_object_get(c, "schema"), name);
        }
        sits_grammar_destroy(g);
        free(s);
    }
    /* json_object */
    {
        sits_grammar_t *g = NULL;
        if (sits_grammar_from_json_object(&g) != SITS_OK) { printf("FAIL json_object\n"); failures++; }
        else {
            json_t *spec = json_pack("{s:s}", "type", "object");
            run_walks(out, g, vbs, 2, "schema", spec, "json_object");
            json_decref(spec);
            static const char *const good[] = { "{}", "{\"a\":[1,{\"b\":null}], \"c\":\"\\u00e9\"}", "{\"x\": -0.5e+3}" };
            static const char *const bad[] = { "[]", "{\"a\":}", "{\"a\":1,}", "{'a':1}", "{\"a\":01}", "{\"a\":\"\x01\"}",
                                               "{\"a\":\"\xc3\"}", "{\"a\":tru}" };
            for (int k = 0; k < 3; k++)
                if (!sits_grammar_matches(g, good[k], strlen(good[k]))) { printf("FAIL json_object refuses %s\n", good[k]); failures++; }
            for (int k = 0; k < 8; k++)
                if (sits_grammar_matches(g, bad[k], strlen(bad[k]))) { printf("FAIL json_object accepts %s\n", bad[k]); failures++; }
        }
        sits_grammar_destroy(g);
    }
    /* regexes */
    static const char *const regexes[] = { "[a-z]{2,4}-\\d+", "(yes|no|maybe)!?", "\\w{1,8}@\\w{1,8}\\.(com|org)",
                                           "[^,]{1,5},[A-F0-9]*", "(ab)*c?", "\\d{3}-\\d{4}",
                                           /* counted repetitions of large classes (the byte-class chains of grammar.c) */
                                           "[a-zA-Z0-9 ]{24}\\.", "[^\"]{0,40}x", "[ -~]{3,30}", NULL };
    for (int k = 0; regexes[k]; k++) {
        sits_grammar_t *g = NULL;
        if (sits_grammar_from_regex(regexes[k], strlen(regexes[k]), err, sizeof err, &g) != SITS_OK) {
            printf("FAIL regex %s: %s\n", regexes[k], err);
            failures++;
            continue;
        }
        json_t *spec = json_string(regexes[k]);
        char name[32];
        snprintf(name, sizeof name, "regex%d", k);
        run_walks(out, g, vbs, 2, "regex", spec, name);
        json_decref(spec);
        sits_grammar_destroy(g);
    }
    static const char *const bad_re[] = { "(ab", "a{3,1}", "[z-a]", "*a", "a\\b", NULL };
    for (int k = 0; bad_re[k]; k++) {
        sits_grammar_t *g = NULL;
        if (sits_grammar_from_regex(bad_re[k], strlen(bad_re[k]), err, sizeof err, &g) != SITS_ERR_INVALID) {
            printf("FAIL regex %s was not refused\n", bad_re[k]);
            failures++;
        }
        sits_grammar_destroy(g);
    }
    /* choice */
    {
        const char *ch[] = { "positive", "negative", "neutral", "neg" };
        size_t lens[] = { 8, 8, 7, 3 };
        sits_grammar_t *g = NULL;
        if (sits_grammar_from_choice(ch, lens, 4, &g) != SITS_OK) { printf("FAIL choice\n"); failures++; }
        else {
            json_t *spec = json_pack("[s,s,s,s]", ch[0], ch[1], ch[2], ch[3]);
            run_walks(out, g, vbs, 2, "choice", spec, "choice");
            json_decref(spec);
        }
        sits_grammar_destroy(g);
    }
    /* [allowed_token_ids] a token-id set: the mask is the set on both vocabularies (ids past one: not in its mask), accept
     * and accepts agree with it, the stop id only when listed, nothing of bytes (matches: 0); none: refused */
    {
        const int32_t ids[] = { 70, 3, 200, 3, vbs[0].stop };   /* below both vocabularies' sizes */
        sits_grammar_t *g = NULL;
        if (sits_grammar_from_token_ids(ids, 0, &g) != SITS_ERR_INVALID) { printf("FAIL token ids: an empty set\n"); failures++; }
        for (int n = 4; n <= 5; n++) {   /* without and with the synthetic vocabulary's stop id */
            if (sits_grammar_from_token_ids(ids, n, &g) != SITS_OK) { printf("FAIL token ids\n"); failures++; continue; }
            for (int k = 0; k < 2; k++) {
                sits_grammar_state_t *st = NULL;
                int words = (int)SITS_GRAMMAR_MASK_WORDS(vbs[k].n), bad = 0;
                uint32_t *m = calloc((size_t)words, 4);
                if (!m || sits_grammar_state_create(g, vbs[k].v, &st) != SITS_OK || sits_grammar_state_mask(st, m) != SITS_OK) {
                    printf("FAIL token ids: no state / mask\n");
                    failures++;
                    free(m);
                    sits_grammar_state_destroy(st);
                    continue;
                }
                for (int32_t id = 0; id < vbs[k].n; id++) {
                    int want = 0;
                    for (int j = 0; j < n; j++) want |= ids[j] == id;
                    bad += allowed(m, id) != want || sits_grammar_state_accepts(st, id) != want;
                }
                int stop_listed = 0;
                for (int j = 0; j < n; j++) stop_listed |= ids[j] == vbs[k].stop;
                bad += sits_grammar_state_accept(st, 5) != SITS_ERR_INVALID || sits_grammar_state_accept(st, 200) != SITS_OK ||
                       sits_grammar_state_accept(st, vbs[k].stop) != (stop_listed ? SITS_OK : SITS_ERR_INVALID) ||
                       sits_grammar_matches(g, "a", 1) != 0 || sits_grammar_state_accept(st, -1) != SITS_ERR_INVALID;
                if (bad) { printf("FAIL token ids (%d ids) on vocabulary %s: %d wrong\n", n, vbs[k].name, bad); failures++; }
                free(m);
                sits_grammar_state_destroy(st);
            }
            sits_grammar_destroy(g);
        }
        printf("token-id sets: checked\n");
    }
    /* [allowed_token_ids] beside another constraint (sits_grammar_restrict): along walks of a regex grammar on both
     * vocabularies, the restricted mask is the inner mask and the set (ids % 3 != 1, and the stop id), accepts /
     * accept agree with it, the inner state follows the same tokens; matches is the inner grammar's; a set of a set and
     * an empty set are refused */
    {
        const char *re = "(yes|no|maybe)[a-z ]{0,12}!";
        sits_grammar_t *inner = NULL, *g = NULL, *set = NULL;
        const int32_t one[] = { 3 };
        if (sits_grammar_from_regex(re, strlen(re), err, sizeof err, &inner) != SITS_OK) {
            printf("FAIL restrict: regex not compiled: %s\n", err);
            failures++;
        } else {
            int bad = 0, steps = 0, ended = 0;
            for (int k = 0; k < 2; k++) {
                int32_t *ids = malloc(sizeof *ids * (size_t)vbs[k].n);
                int n_ids = 0;
                for (int32_t id = 0; ids && id < vbs[k].n; id++)
                    if (id % 3 != 1 || id == vbs[k].stop) ids[n_ids++] = id;
                if (!ids || sits_grammar_restrict(inner, ids, n_ids, &g) != SITS_OK) { bad++; free(ids); continue; }
                int words = (int)SITS_GRAMMAR_MASK_WORDS(vbs[k].n);
                uint32_t *mi = calloc((size_t)words, 4), *mr = calloc((size_t)words, 4);
                for (int w = 0; w < 6 && mi && mr; w++) {
                    sits_grammar_state_t *si = NULL, *sr = NULL;
                    if (sits_grammar_state_create(inner, vbs[k].v, &si) != SITS_OK || sits_grammar_state_create(g, vbs[k].v, &sr) != SITS_OK) {
                        bad++;
                        sits_grammar_state_destroy(si);
                        break;
                    }
                    uint64_t rs = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1) + (uint64_t)k;
                    for (int step = 0; step < 40; step++, steps++) {
                        if (sits_grammar_state_mask(si, mi) != SITS_OK || sits_grammar_state_mask(sr, mr) != SITS_OK) { bad++; break; }
                        int n_ok = 0;
                        for (int32_t id = 0; id < vbs[k].n; id++) {
                            const int want = allowed(mi, id) && (id % 3 != 1 || id == vbs[k].stop);
                            bad += allowed(mr, id) != want || sits_grammar_state_accepts(sr, id) != want;
                            n_ok += want;
                        }
                        bad += sits_grammar_state_complete(sr) != sits_grammar_state_complete(si);
                        if (!n_ok) { ended++; break; }   /* the two share no token here (or the walk is done) */
                        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                        int pick = (int)((rs >> 33) % (uint64_t)n_ok), t = -1;
                        for (int32_t id = 0; id < vbs[k].n && t < 0; id++)
                            if (allowed(mr, id) && pick-- == 0) t = id;
                        if (t % 3 == 1 && t != vbs[k].stop) bad++;
                        bad += sits_grammar_state_accept(sr, t) != SITS_OK || sits_grammar_state_accept(si, t) != SITS_OK;
                        if (t == vbs[k].stop) { ended++; break; }
                    }
                    for (int32_t id = 1; id < vbs[k].n; id += 3)   /* outside the set: refused whatever the inner says */
                        if (id != vbs[k].stop && sits_grammar_state_accept(sr, id) == SITS_OK) { bad++; break; }
                    sits_grammar_state_destroy(si);
                    sits_grammar_state_destroy(sr);
                }
                bad += sits_grammar_matches(g, "maybe so!", 9) != 1 || sits_grammar_matches(g, "maybe so", 8) != 0;
                free(mi);
                free(mr);
                free(ids);
                sits_grammar_destroy(g);
                g = NULL;
            }
            if (sits_grammar_from_token_ids(one, 1, &set) != SITS_OK || sits_grammar_restrict(set, one, 1, &g) != SITS_ERR_INVALID ||
                sits_grammar_restrict(inner, one, 0, &g) != SITS_ERR_INVALID)
                bad++;
            sits_grammar_destroy(set);
            if (bad || !ended) { printf("FAIL restrict: %d wrong over %d steps (%d walks ended)\n", bad, steps, ended); failures++; }
            else printf("restricted grammars: %d steps, %d walks ended: checked\n", steps, ended);
        }
        sits_grammar_destroy(inner);
    }
    fclose(out);
    free_vocab(&vbs[0]);
    free_vocab(&vbs[1]);
    json_decref(cases);
    json_decref(refused);
    printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
