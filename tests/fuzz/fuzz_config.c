/* fuzz_config.c -- libFuzzer target: sits_model_config_parse on config.json text. On success the
 * parsed config must satisfy the invariants config.h states (positive sizes, nh % nkv == 0, even
 * head_dim, n_eos within bounds) and the RoPE table must be computable with finite values. */
#include "fuzz_common.h"
#include "model/config.h"
#include <math.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    sits_model_config_t cfg;
    if (sits_model_config_parse(buf, size, "fuzz", &cfg) == SITS_OK) {
        FUZZ_ASSERT(cfg.vocab_size > 0 && cfg.hidden_size > 0 && cfg.intermediate_size > 0 && cfg.n_layers > 0);
        FUZZ_ASSERT(cfg.n_heads > 0 && cfg.n_kv_heads > 0 && cfg.n_heads % cfg.n_kv_heads == 0);
        FUZZ_ASSERT(cfg.head_dim > 0 && cfg.head_dim % 2 == 0);
        FUZZ_ASSERT(cfg.n_eos >= 0 && cfg.n_eos <= SITS_MAX_EOS);
        FUZZ_ASSERT(memchr(cfg.model_type, 0, sizeof cfg.model_type) && memchr(cfg.torch_dtype, 0, sizeof cfg.torch_dtype));
        if (cfg.head_dim <= (1 << 16)) {
            float *inv = malloc(sizeof(float) * (size_t)(cfg.head_dim / 2));
            if (inv) {
                sits_model_rope_inv_freq(&cfg, inv);
                for (int i = 0; i < cfg.head_dim / 2; i++) FUZZ_ASSERT(isfinite(inv[i]));
                free(inv);
            }
        }
    }
    free(buf);
    return 0;
}
