/* crc32c.c: CRC-32C (reflected polynomial 0x82f63b78), eight bytes at a time
 * with the SSE4.2 instruction where present, else byte by byte through one
 * 256-entry table (built on first use). Both give the same value. */
#include "common/crc32c.h"

#include <string.h>

static uint32_t table[256];
static int table_ready;

static void table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        table[i] = c;
    }
    table_ready = 1;
}

static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t n) {
    if (!table_ready) table_init(); /* idempotent: a racing second build writes the same values */
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n > 0; n--, p++) c = __builtin_ia32_crc32qi(c, *p);
    return c;
}

static int have_hw(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    return known;
}
#else
static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) { return crc_table(c, p, n); }
static int have_hw(void) { return 0; }
#endif

uint32_t crc32c_extend(uint32_t crc, const void *p, size_t n) {
    uint32_t c = ~crc;
    c = have_hw() ? crc_hw(c, p, n) : crc_table(c, p, n);
    return ~c;
}
