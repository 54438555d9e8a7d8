/* safetensors.h: reading and writing the Hugging Face safetensors format, the
 * way model weights enter and leave drkernel (docs/DESIGN.md §5, §13).
 *
 * A file is: 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__": {...}, "name": {"dtype", "shape", "data_offsets": [b, e]}},
 * then the raw tensor bytes (offsets relative to the end of the header). A
 * checkpoint directory holds either one `model.safetensors` or several shards
 * named by `model.safetensors.index.json` ("weight_map": tensor -> file).
 *
 * The reader maps the files (mmap) and validates every header entry up front,
 * so a truncated or inconsistent file fails at open with a message naming the
 * file and the tensor; tensor data is then read straight out of the map and
 * converted to fp32. The writer converts fp32 host data to bf16 / fp16 / fp32
 * (round-to-nearest-even) while streaming it to disk, so saving never needs a
 * second copy of the model. */
#ifndef DK_MODEL_SAFETENSORS_H
#define DK_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ST_MAX_DIMS 8

typedef enum { ST_F32 = 0, ST_F16 = 1, ST_BF16 = 2 } st_dtype;

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;
    const void *data; /* inside the file's map; not aligned beyond what the file gives */
    const char *file; /* path of the file that holds it (for messages) */
} st_tensor;

typedef struct st_map st_map;

typedef struct {
    char *source;        /* what was opened: the file, or the index json (for messages) */
    st_map *maps;        /* one per distinct file */
    int n_maps;
    st_tensor *tensors;  /* sorted by name */
    int n_tensors;
} st_reader;

/* Opens PATH: a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json (the index wins when both exist, as shards
 * written later supersede a single file). */
dk_status safetensors_open(st_reader *r, const char *path);
void safetensors_close(st_reader *r);

/* NULL when absent. */
const st_tensor *safetensors_find(const st_reader *r, const char *name);
/* Converts the whole tensor to fp32 (bf16 -> fp32 and fp16 -> fp32 are exact). */
void safetensors_tensor_to_f32(const st_tensor *t, float *out);
/* Converts elements [first, first + count) of the flattened tensor (a slice
 * for one shard, or a chunk to bound memory); the caller keeps it in range. */
void safetensors_tensor_to_f32_range(const st_tensor *t, size_t first, size_t count, float *out);
/* Finds NAME, checks its shape equals SHAPE[0..ndim) and converts it into OUT.
 * Errors name the file and the tensor: "missing" or "expected [..], got [..]". */
dk_status safetensors_read_f32(const st_reader *r, const char *name, int ndim, const int64_t *shape, float *out);
/* The same checks without the conversion: *out is the tensor. */
dk_status safetensors_check(const st_reader *r, const char *name, int ndim, const int64_t *shape, const st_tensor **out);

const char *safetensors_dtype_name(st_dtype d); /* "F32", "F16", "BF16" */
size_t safetensors_dtype_size(st_dtype d);
/* Accepts "bf16" | "fp16" | "fp32" and the torch spellings "bfloat16" |
 * "float16" | "float32"; the error names the value. */
dk_status safetensors_dtype_parse(const char *s, st_dtype *out);
/* The torch_dtype spelling for config.json: "bfloat16", "float16", "float32". */
const char *safetensors_dtype_torch_name(st_dtype d);

/* Scalar conversions, round-to-nearest-even on the way down; NaN stays NaN. */
float st_bf16_to_f32(uint16_t h);
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);
uint16_t st_f32_to_f16(float f);

/* One tensor to write: fp32 host data in row-major order. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const float *data;
} st_entry;

/* Writes the tensors, converted to DTYPE, as one safetensors file at PATH
 * (metadata {"format": "pt"}, header padded to 8 bytes). */
dk_status safetensors_write_file(const char *path, const st_entry *t, int n, st_dtype dtype);
/* Writes DIR/model.safetensors, or, when the tensors exceed MAX_SHARD_BYTES
 * (0 = no limit), DIR/model-0000k-of-0000n.safetensors shards of at most that
 * size (a tensor larger than the limit gets a shard of its own) plus
 * DIR/model.safetensors.index.json (metadata.total_size, weight_map). A stale
 * model.safetensors or index from an earlier save in DIR is removed so that
 * loaders do not pick it up instead. */
dk_status safetensors_write_dir(const char *dir, const st_entry *t, int n, st_dtype dtype, size_t max_shard_bytes);

/* Converts N fp32 values to DTYPE bytes at DST (round-to-nearest-even). */
void safetensors_convert_f32(const float *src, size_t n, st_dtype dtype, void *dst);

/* Where every byte of a set of tensors goes, before any is written: which
 * file holds each tensor, every file's header and size, each tensor's byte
 * offset in its file. It depends only on the entries' names and shapes (their
 * data may be NULL), the dtype and the shard limit, so ranks that each hold a
 * part of the data compute the same layout alone and write their parts in
 * parallel; safetensors_write_dir writes through the same layout, so the two
 * give the same bytes. */
typedef struct {
    st_dtype dtype;
    int n_entries, n_files;
    int *first;         /* file k holds entries [first[k], first[k+1]) */
    int *file_of;       /* entry i's file */
    size_t *offset;     /* entry i's data: byte offset from the start of its file */
    char **header;      /* file k's JSON header, padded with spaces to 8 bytes */
    size_t *header_len;
    size_t *file_size;  /* 8 + header_len + the data */
    size_t total_bytes; /* tensor bytes of all files (the index's total_size) */
} st_layout;

/* Same grouping as safetensors_write_dir (MAX_SHARD_BYTES 0: one file). */
dk_status safetensors_layout_plan(st_layout *l, const st_entry *t, int n, st_dtype dtype, size_t max_shard_bytes);
void safetensors_layout_free(st_layout *l);
/* File k's name: "model.safetensors" when alone, else model-0000k-of-0000n. */
void safetensors_layout_file_name(const st_layout *l, int k, char *buf, size_t cap);
/* Creates every file of the layout in DIR at its final size with its header
 * (the data reads as zeros until written), plus the index for several files;
 * removes a stale single file or index as safetensors_write_dir does. */
dk_status safetensors_layout_create(const st_layout *l, const st_entry *t, const char *dir);

#endif
