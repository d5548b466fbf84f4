/* precision.c -- [fp8] the --quant policy parser, its log lines and the host FP8 quantiser; see precision.h. */
#include "model/precision.h"
#include "util/dtype.h"
#include "util/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *lin_names[SITS_LIN_PER_LAYER] = { "qkv", "o", "gate_up", "down" };

const char *sits_linear_name(sits_linear_t lin) { return (unsigned)lin < SITS_LIN_PER_LAYER ? lin_names[lin] : "lm_head"; }

void sits_quant_plan_free(sits_quant_plan_t *plan)
{
    if (!plan) return;
    free(plan->layer);
    plan->layer = NULL;
}

/* Group name -> bitmask of linears (bit SITS_LIN_PER_LAYER = lm_head); 0 when unknown. */
static unsigned group_mask(const char *s, size_t len)
{
    static const struct { const char *name; unsigned mask; } g[] = {
        { "attn", 1u << SITS_LIN_QKV | 1u << SITS_LIN_O },
        { "ffn", 1u << SITS_LIN_GATE_UP | 1u << SITS_LIN_DOWN },
        { "mlp", 1u << SITS_LIN_GATE_UP | 1u << SITS_LIN_DOWN },
        { "qkv", 1u << SITS_LIN_QKV },
        { "o", 1u << SITS_LIN_O },
        { "gate_up", 1u << SITS_LIN_GATE_UP },
        { "down", 1u << SITS_LIN_DOWN },
        { "all", 0xfu },
        { "lm_head", 1u << SITS_LIN_PER_LAYER },
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (strlen(g[i].name) == len && !strncmp(g[i].name, s, len)) return g[i].mask;
    return 0;
}

static int parse_prec(const char *s, size_t len, sits_prec_t *p)
{
    if (len == 4 && !strncmp(s, "bf16", 4)) *p = SITS_PREC_BF16;
    else if (len == 3 && !strncmp(s, "fp8", 3)) *p = SITS_PREC_FP8;
    else if (len == 4 && !strncmp(s, "auto", 4)) *p = SITS_PREC_AUTO;
    else if (len == 4 && !strncmp(s, "int4", 4)) *p = SITS_PREC_INT4;   /* [int4] */
    else return -1;
    return 0;
}

/* A non-negative decimal at *s (advanced past it); -1 when there is none. */
static long parse_uint(const char **s)
{
    if (!isdigit((unsigned char)**s)) return -1;
    errno = 0;
    char *end;
    long v = strtol(*s, &end, 10);
    if (errno || v > 1000000) return -1;
    *s = end;
    return v;
}

sits_status_t sits_quant_plan_parse(const char *spec, int n_layers, sits_quant_plan_t *plan, char *err, size_t err_len)
{
    uint8_t *layer = NULL;
    uint8_t lm_head = SITS_PREC_AUTO;
    if (n_layers > 0) {
        layer = calloc((size_t)n_layers * SITS_LIN_PER_LAYER, 1);   /* SITS_PREC_AUTO == 0 */
        if (!layer) return SITS_ERR_NOMEM;
    }
    const char *p = spec ? spec : "";
    while (*p) {
        const char *item = p, *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *eq = memchr(item, '=', (size_t)(end - item));
        unsigned mask = 0xfu;
        long a = 0, b = -1;       /* b -1: to the last layer */
        const char *val = item;
        if (eq) {
            const char *br = memchr(item, '[', (size_t)(eq - item));
            const char *name_end = br ? br : eq;
            mask = group_mask(item, (size_t)(name_end - item));
            if (!mask) {
                snprintf(err, err_len, "--quant: unknown layer group '%.*s' in '%.*s' (attn, ffn, mlp, qkv, o, gate_up, down, all, lm_head)",
                         (int)(name_end - item), item, (int)(end - item), item);
                goto bad;
            }
            if (br) {
                const char *q = br + 1;
                if (mask & (1u << SITS_LIN_PER_LAYER)) {
                    snprintf(err, err_len, "--quant: lm_head takes no layer range in '%.*s'", (int)(end - item), item);
                    goto bad;
                }
                if (*q == ':') {
                    a = 0;
                } else if ((a = parse_uint(&q)) < 0) {
                    goto bad_range;
                }
                if (*q == ':') {
                    q++;
                    if (*q != ']' && (b = parse_uint(&q)) < 0) goto bad_range;
                } else {
                    b = a + 1;    /* [i]: one layer */
                }
                if (*q != ']' || q + 1 != eq) goto bad_range;
                if (b >= 0 && b <= a) {
                    snprintf(err, err_len, "--quant: empty layer range in '%.*s' (ranges are [first:end), end excluded)",
                             (int)(end - item), item);
                    goto bad;
                }
                if (n_layers > 0 && (a >= n_layers || b > n_layers)) {
                    snprintf(err, err_len, "--quant: layer range in '%.*s' goes past the model's %d layers (0..%d)",
                             (int)(end - item), item, n_layers, n_layers - 1);
                    goto bad;
                }
            }
            val = eq + 1;
        }
        sits_prec_t prec;
        if (parse_prec(val, (size_t)(end - val), &prec)) {
            snprintf(err, err_len, "--quant: unknown precision '%.*s' in '%.*s' (bf16, fp8, int4, auto)", (int)(end - val), val,
                     (int)(end - item), item);
            goto bad;
        }
        if (prec == SITS_PREC_INT4 && (mask & (1u << SITS_LIN_PER_LAYER))) {
            snprintf(err, err_len, "--quant: lm_head cannot be int4 in '%.*s' (bf16 or fp8: the logits are the most sensitive GEMM)",
                     (int)(end - item), item);
            goto bad;
        }
        if (n_layers > 0) {
            long last = b < 0 ? n_layers : b;
            for (long l = a; l < last; l++)
                for (int k = 0; k < SITS_LIN_PER_LAYER; k++)
                    if (mask & (1u << k)) layer[l * SITS_LIN_PER_LAYER + k] = (uint8_t)prec;
        }
        if (mask & (1u << SITS_LIN_PER_LAYER)) lm_head = (uint8_t)prec;
        if (!*end) break;
        p = end + 1;
        if (!*p) {
            snprintf(err, err_len, "--quant: '%s' ends with a comma", spec);
            goto bad;
        }
    }
    if (plan && n_layers > 0) {
        plan->n_layers = n_layers;
        plan->layer = layer;
        plan->lm_head = lm_head;
    } else {
        free(layer);
    }
    return SITS_OK;
bad_range:
    {
        const char *item_end = strchr(p, ',');
        int len = item_end ? (int)(item_end - p) : (int)strlen(p);
        snprintf(err, err_len, "--quant: bad layer range in '%.*s' (expected GROUP[a:b]=PREC, [a:], [:b] or [i])", len, p);
    }
bad:
    free(layer);
    return SITS_ERR_INVALID;
}

static const char *prec_name(int p) { return p == SITS_PREC_FP8 ? "fp8" : p == SITS_PREC_INT4 ? "int4" : "bf16"; }

void sits_quant_plan_log(const uint8_t *prec, int layer0, int layer1, int lm_head, const char *spec)
{
    int l = layer0;
    while (l < layer1) {
        int r = l + 1;
        while (r < layer1 && !memcmp(prec + (size_t)r * SITS_LIN_PER_LAYER, prec + (size_t)l * SITS_LIN_PER_LAYER,
                                     SITS_LIN_PER_LAYER))
            r++;
        const uint8_t *q = prec + (size_t)l * SITS_LIN_PER_LAYER;
        SITS_INFO(SITS_SUB_MODEL, "quant%s%s%s: layers %d-%d: qkv %s, o %s, gate_up %s, down %s", spec && *spec ? " '" : "",
                  spec && *spec ? spec : "", spec && *spec ? "'" : "", l, r - 1, prec_name(q[SITS_LIN_QKV]),
                  prec_name(q[SITS_LIN_O]), prec_name(q[SITS_LIN_GATE_UP]), prec_name(q[SITS_LIN_DOWN]));
        l = r;
    }
    if (lm_head >= 0) SITS_INFO(SITS_SUB_MODEL, "quant: lm_head %s", prec_name(lm_head));
}
