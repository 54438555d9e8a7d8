/* util.h: small host helpers every layer uses: checked allocation, whole-file
 * reads, directories, wall-clock time. */
#ifndef DK_UTIL_H
#define DK_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#ifdef __cplusplus
extern "C" {
#endif

void *dk_malloc(size_t n);             /* aborts with file:line on failure */
void *dk_calloc(size_t n, size_t size);
void *dk_realloc(void *p, size_t n);
char *dk_strdup(const char *s);

/* Reads a whole file (NUL-terminated); error names the path. */
dk_status dk_read_file(const char *path, char **out, size_t *len);
dk_status dk_write_file(const char *path, const void *data, size_t len);
dk_status dk_mkdirs(const char *path); /* mkdir -p */
void dk_remove_tree(const char *path); /* rm -rf, links not followed; best effort */
int dk_file_exists(const char *path);
int dk_dir_exists(const char *path);

double dk_now(void); /* monotonic seconds */

#ifdef __cplusplus
}
#endif

#endif
