/* dummy.h -- [dummy] the random weights of --load-format dummy: one definition for the host (model/weights.c,
 * the cpu backend's dummy_rows) and the device (kernels/dummy.cu repeats this arithmetic; tests/gpu/dummy_cuda.sh
 * checks the two give the same model).
 *
 * Element (row, col) of tensor (kind, layer), from the load's seed:
 *   base   = seed ^ kind << 56 ^ layer << 40
 *   stream = splitmix64 output of the state base ^ row
 *   u      = (splitmix64 output of the state stream + col * 0x9e3779b97f4a7c15) >> 40, divided by 2^24 (exact)
 *   value  = (u - 0.5) * 0.1   (two fp32 roundings, in this order)
 * The value does not depend on the slice asked for, so every TP size holds the same model. Norm weights are not
 * drawn (1, or 0 where the model stores w of 1 + w). */
#ifndef SITS_UTIL_DUMMY_H
#define SITS_UTIL_DUMMY_H

#include <stdint.h>

static inline uint64_t sits_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t sits_dummy_base(uint64_t seed, unsigned kind, int layer)
{
    return seed ^ ((uint64_t)kind << 56) ^ ((uint64_t)layer << 40);
}

static inline uint64_t sits_dummy_stream(uint64_t base, int64_t row)
{
    uint64_t rs = base ^ (uint64_t)row;
    return sits_splitmix64(&rs);
}

static inline float sits_dummy_value(uint64_t stream, int64_t col)
{
    uint64_t st = stream + (uint64_t)col * 0x9e3779b97f4a7c15ull;
    float u = (float)(sits_splitmix64(&st) >> 40) / (float)(1 << 24);
    return (u - 0.5f) * 0.1f;
}

#endif
