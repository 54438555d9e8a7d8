/* test_config_readme.c: configs/README.md must be exactly what
 * config_describe() writes from the key table, so the documentation of the
 * run configuration never drifts from the code. After changing a key, run
 * from the repository root:
 *     build/tests/unit_test_config_readme --write
 * which rewrites configs/README.md. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "trainer/config.h"

#define README "configs/README.md"

int main(int argc, char **argv) {
    char *want = NULL;
    size_t want_len = 0;
    FILE *m = open_memstream(&want, &want_len);
    if (!m) return 1;
    config_describe(m);
    fclose(m);
    if (argc == 2 && !strcmp(argv[1], "--write")) {
        if (dk_write_file(README, want, want_len)) {
            printf("FAIL %s\n", dk_error());
            return 1;
        }
        printf("wrote %s (%zu bytes)\n", README, want_len);
        free(want);
        return 0;
    }
    char *have;
    size_t have_len;
    if (dk_read_file(README, &have, &have_len)) {
        printf("FAIL %s\n", dk_error());
        return 1;
    }
    int same = have_len == want_len && !memcmp(have, want, want_len);
    if (!same) {
        /* name the first line that differs */
        int line = 1;
        size_t i = 0;
        while (i < have_len && i < want_len && have[i] == want[i]) line += have[i++] == '\n';
        size_t a = i, b = i;
        while (a > 0 && want[a - 1] != '\n') a--;
        while (b > 0 && have[b - 1] != '\n') b--;
        printf("FAIL %s differs from config_describe() at line %d\n  file:     %.*s\n  expected: %.*s\n", README, line,
               (int)strcspn(have + b, "\n"), have + b, (int)strcspn(want + a, "\n"), want + a);
        const char *build = getenv("DK_BUILD");
        printf("regenerate it from the repository root: %s/tests/unit_test_config_readme --write\n",
               build ? build : "build");
    } else {
        printf("%s matches config_describe() (%zu bytes)\n", README, want_len);
    }
    free(have);
    free(want);
    return same ? 0 : 1;
}
