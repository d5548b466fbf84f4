/* kv_dtype.c -- [int8 kv] [fp8 kv] the KV cache dtype of a backend (--kv-cache-dtype): parsing and the
 * check of what each backend stores (see the KV dtypes paragraph of backend.h). */
#include "backend/backend.h"
#include "util/log.h"

#include <string.h>

sits_status_t sits_backend_kv_dtype_parse(const char *name, sits_dtype_t act_dtype, sits_dtype_t *dt_p)
{
    if (!name || !*name || !strcmp(name, "auto")) *dt_p = act_dtype;
    else if (!strcmp(name, "bf16") || !strcmp(name, "bfloat16")) *dt_p = SITS_DT_BF16;
    else if (!strcmp(name, "fp32") || !strcmp(name, "float32") || !strcmp(name, "f32")) *dt_p = SITS_DT_F32;
    else if (!strcmp(name, "int8") || !strcmp(name, "i8")) *dt_p = SITS_DT_I8;
    else if (!strcmp(name, "fp8") || !strcmp(name, "fp8_e4m3") || !strcmp(name, "e4m3")) *dt_p = SITS_DT_F8_E4M3;
    else {
        SITS_ERROR(SITS_SUB_BACKEND, "unknown --kv-cache-dtype '%s' (auto, bf16, fp32, int8, fp8)", name);
        return SITS_ERR_INVALID;
    }
    return SITS_OK;
}

sits_status_t sits_backend_set_kv_dtype(sits_backend_t *be, sits_dtype_t dt)
{
    int ok = dt == be->act_dtype || sits_kv_dtype_is_q8(dt) || (be->act_dtype == SITS_DT_F32 && dt == SITS_DT_BF16);
    if (!ok) {
        SITS_ERROR(SITS_SUB_BACKEND, "the %s backend cannot keep its KV cache in %s (%s activations)", be->ops->name,
                   sits_dtype_name(dt), sits_dtype_name(be->act_dtype));
        return SITS_ERR_UNSUPPORTED;
    }
    be->kv_dtype = dt;
    return SITS_OK;
}
