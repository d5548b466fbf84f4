/* le.h -- little-endian integers in byte buffers: the one set of readers and writers for every wire
 * and file format of the project (step plans, KV shards, KV move messages, offload files). */
#ifndef SITS_UTIL_LE_H
#define SITS_UTIL_LE_H

#include <stdint.h>

static inline void sits_le_put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void sits_le_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void sits_le_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t sits_le_get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t sits_le_get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t sits_le_get64(const unsigned char *p) { return (uint64_t)sits_le_get32(p) | (uint64_t)sits_le_get32(p + 4) << 32; }

#endif
