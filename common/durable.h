/* durable.h: making a file's new content survive a crash. A kill -9 leaves
 * the page cache intact, but a power cut or a kernel crash does not: data is
 * on disk only after fsync, and a rename only after its directory is fsynced.
 * Used for the small files a resume relies on (config.ini, the log offsets). */
#ifndef DK_DURABLE_H
#define DK_DURABLE_H

#include <stddef.h>

#include "common/error.h"

/* fsync of an existing file or directory; errors name the path. */
dk_status dk_fsync_path(const char *path);
/* dk_write_file, then dk_fsync_path (no rename: for files inside a
 * directory that is itself renamed into place once complete). */
dk_status dk_write_file_synced(const char *path, const void *data, size_t len);
/* fsync(tmp), rename(tmp, path), fsync of path's directory: readers see the
 * old content or the new one, never a mix, before and after a crash. */
dk_status dk_rename_durable(const char *tmp, const char *path);
/* Writes data to PATH.tmp and renames it over path as above. */
dk_status dk_write_file_durable(const char *path, const void *data, size_t len);

#endif
