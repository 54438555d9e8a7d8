/* crc32c.h: CRC-32C (Castagnoli), the checksum every checkpoint file carries
 * so that a resume can tell a complete file from a truncated or damaged one.
 * The SSE4.2 crc32 instruction computes it at memory speed where the CPU has
 * it; a table-driven loop gives the same values elsewhere. */
#ifndef DK_CRC32C_H
#define DK_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of (the bytes CRC covered) followed by P[0, n): start from 0;
 * crc32c_extend(0, "123456789", 9) == 0xe3069283. */
uint32_t crc32c_extend(uint32_t crc, const void *p, size_t n);

#endif
