/* status.c -- names of status codes. */
#include "util/status.h"

const char *sits_status_str(sits_status_t st)
{
    switch (st) {
    case SITS_OK: return "ok";
    case SITS_ERR_INVALID: return "invalid argument";
    case SITS_ERR_NOMEM: return "out of memory";
    case SITS_ERR_IO: return "i/o error";
    case SITS_ERR_FORMAT: return "malformed input";
    case SITS_ERR_UNSUPPORTED: return "unsupported";
    case SITS_ERR_NOT_FOUND: return "not found";
    case SITS_ERR_MPI: return "mpi error";
    case SITS_ERR_CUDA: return "cuda error";
    case SITS_ERR_NCCL: return "nccl error";
    case SITS_ERR_CUBLAS: return "cublas error";
    case SITS_ERR_TIMEOUT: return "timed out";
    case SITS_ERR_INTERNAL: return "internal error";
    case SITS_ERR_BUSY: return "busy";
    case SITS_ERR_CANCELLED: return "cancelled";
    case SITS_ERR_PEER: return "peer rank failed";
    }
    return "unknown status";
}
