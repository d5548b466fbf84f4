/* check.h -- CHECK macros for foreign libraries: log the call text, file:line and the library's
 * own error string, then return (or goto) a mapped status. CUDA / NCCL / cuBLAS forms live in
 * src/backend/cuda_check.h so that only CUDA-side files include CUDA headers. */
#ifndef SITS_UTIL_CHECK_H
#define SITS_UTIL_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include "util/log.h"
#include "util/status.h"

#define SITS_MPI_ERRSTR_(e_, buf_) do { int l_ = 0; if (MPI_Error_string((e_), (buf_), &l_) != MPI_SUCCESS) \
    snprintf((buf_), sizeof(buf_), "mpi error %d", (e_)); } while (0)

#define SITS_MPI_CHECK(call_) do { int e_ = (call_); if (e_ != MPI_SUCCESS) { char b_[MPI_MAX_ERROR_STRING]; \
    SITS_MPI_ERRSTR_(e_, b_); SITS_ERROR(SITS_SUB_COMM, "%s: %s", #call_, b_); return SITS_ERR_MPI; } } while (0)

#define SITS_MPI_CHECK_GOTO(call_, st_, label_) do { int e_ = (call_); if (e_ != MPI_SUCCESS) { \
    char b_[MPI_MAX_ERROR_STRING]; SITS_MPI_ERRSTR_(e_, b_); SITS_ERROR(SITS_SUB_COMM, "%s: %s", #call_, b_); \
    (st_) = SITS_ERR_MPI; goto label_; } } while (0)

#endif
