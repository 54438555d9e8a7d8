/* extract.h: the candidate kernel in a model response: the LAST fenced python
 * code block: the recipe's answer format (docs/DESIGN.md §9).
 *
 * Fences follow Markdown (CommonMark) rules, so code that merely contains
 * backticks is not cut:
 *  - an opening fence is a line of at most 3 spaces, then 3 or more
 *    backticks, then an optional info string without backticks;
 *  - the block ends at a line of at most 3 spaces, then at least as many
 *    backticks as opened it, then only whitespace. Backticks inside a code
 *    line (x = "```") or a shorter run never close it; a ```` fence can
 *    hold ``` lines;
 *  - a block whose closing fence never comes (a response cut by the token
 *    budget) is no block: the answer is then the last complete block before
 *    it, if any;
 *  - the block's language is the first word of the info string, ignoring
 *    case: "python", "py" and "python3" are python (```python, ``` py);
 *    no word is a bare fence; anything else (bash, text, ...) never counts.
 * The answer is the last python block; only when there is none, the last
 * bare block. CRLF line ends are read as LF and returned as LF. Content lines
 * lose up to as many leading spaces as the opening fence had. */
#ifndef DK_RL_EXTRACT_H
#define DK_RL_EXTRACT_H

#include <stddef.h>

typedef enum { EXTRACT_NONE = 0, EXTRACT_PYTHON, EXTRACT_BARE } extract_kind;

/* text: len bytes. Returns what kind of block was chosen; *code is the
 * block's content (malloc'ed, NUL-terminated, ending in '\n' unless empty),
 * or NULL with EXTRACT_NONE. */
extract_kind extract_code_block(const char *text, size_t len, char **code);

#endif
