/* extract.c: a line scanner over Markdown code fences that remembers the
 * last complete python block and the last complete bare block (extract.h). */
#include "rl/extract.h"

#include <ctype.h>
#include <string.h>

#include "common/util.h"

typedef struct {
    size_t begin, end; /* content bytes: from the line after the opening fence to the closing fence */
    int indent;        /* spaces before the opening fence */
    int found;
} span;

/* One line without its '\n' and '\r'. */
typedef struct {
    const char *p;
    size_t n;
} line_t;

/* A fence line: spaces <= 3, a run of >= 3 backticks; *run, *indent and the
 * info string after the run. */
static int fence(line_t l, int *run, int *indent, line_t *info) {
    size_t i = 0;
    while (i < l.n && l.p[i] == ' ' && i < 4) i++;
    if (i > 3) return 0;
    *indent = (int)i;
    size_t k = i;
    while (k < l.n && l.p[k] == '`') k++;
    if (k - i < 3) return 0;
    *run = (int)(k - i);
    info->p = l.p + k;
    info->n = l.n - k;
    return 1;
}

static int blank(line_t l) {
    for (size_t i = 0; i < l.n; i++)
        if (!isspace((unsigned char)l.p[i])) return 0;
    return 1;
}

static int same_word_nocase(const char *a, size_t n, const char *word) {
    if (strlen(word) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)a[i]) != word[i]) return 0;
    return 1;
}

/* EXTRACT_PYTHON, EXTRACT_BARE, or EXTRACT_NONE for another language or an
 * info string that holds a backtick (then the line is no fence at all: -1). */
static int info_kind(line_t info) {
    if (memchr(info.p, '`', info.n)) return -1;
    size_t i = 0;
    while (i < info.n && isspace((unsigned char)info.p[i])) i++;
    size_t j = i;
    while (j < info.n && !isspace((unsigned char)info.p[j]) && info.p[j] != '{') j++;
    if (j == i) return EXTRACT_BARE;
    static const char *const py[] = {"python", "py", "python3"};
    for (size_t k = 0; k < sizeof py / sizeof py[0]; k++)
        if (same_word_nocase(info.p + i, j - i, py[k])) return EXTRACT_PYTHON;
    return EXTRACT_NONE;
}

static char *copy_block(const char *text, span s) {
    char *out = dk_malloc(s.end - s.begin + 1), *o = out;
    size_t pos = s.begin;
    while (pos < s.end) {
        const char *nl = memchr(text + pos, '\n', s.end - pos);
        size_t e = nl ? (size_t)(nl - text) : s.end;
        size_t b = pos, n = e;
        for (int k = 0; k < s.indent && b < n && text[b] == ' '; k++) b++;
        if (n > b && text[n - 1] == '\r') n--;
        memcpy(o, text + b, n - b);
        o += n - b;
        *o++ = '\n';
        pos = e + 1;
    }
    *o = 0;
    return out;
}

extract_kind extract_code_block(const char *text, size_t len, char **code) {
    span last_py = {0}, last_bare = {0};
    int open = 0, open_run = 0, open_kind = 0;
    span cur = {0};
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        line_t l = {text + pos, end - pos};
        if (l.n && l.p[l.n - 1] == '\r') l.n--;
        int run, indent;
        line_t info;
        if (!open) {
            if (fence(l, &run, &indent, &info)) {
                int k = info_kind(info);
                if (k >= 0) {
                    open = 1;
                    open_run = run;
                    open_kind = k;
                    cur = (span){next, next, indent, 1};
                }
            }
        } else if (fence(l, &run, &indent, &info) && run >= open_run && blank(info)) {
            open = 0;
            cur.end = pos;
            if (open_kind == EXTRACT_PYTHON) last_py = cur;
            else if (open_kind == EXTRACT_BARE) last_bare = cur;
        }
        pos = next;
    }
    /* A block still open here was cut off: it is ignored. */
    if (last_py.found) {
        *code = copy_block(text, last_py);
        return EXTRACT_PYTHON;
    }
    if (last_bare.found) {
        *code = copy_block(text, last_bare);
        return EXTRACT_BARE;
    }
    *code = NULL;
    return EXTRACT_NONE;
}
