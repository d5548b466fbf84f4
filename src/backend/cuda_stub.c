/* cuda_stub.c -- the CUDA backend entry points when sits-dist is built without CUDA. */
#include "backend/backend.h"
#include "util/log.h"

sits_status_t sits_backend_cuda_create(const sits_backend_params_t *params, sits_backend_t **be_p)
{
    SITS_ERROR(SITS_SUB_BACKEND, "this sits-dist was built without CUDA (configure --with-cuda)");
    return SITS_ERR_UNSUPPORTED;
}

int sits_backend_cuda_device_count(void) { return 0; }

void *sits_backend_cuda_stream(sits_backend_t *be) { return NULL; }

sits_status_t sits_backend_cuda_mem_info(sits_backend_t *be, size_t *free_p, size_t *total_p) { return SITS_ERR_UNSUPPORTED; }
uint64_t sits_backend_cuda_dev_allocs(sits_backend_t *be, uint64_t *bytes_p)
{
    if (bytes_p) *bytes_p = 0;
    return 0;
}
