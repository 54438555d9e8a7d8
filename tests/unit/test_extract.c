/* test_extract.c: the last-python-block rule of rl/extract.c on responses a
 * model really writes: several blocks, other languages, bare fences only as a
 * fallback, backticks inside code strings, longer fences holding ```,
 * indented fences, CRLF line ends, a block cut off by the token budget, and
 * responses with no block at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/extract.h"

static int failures = 0, n_cases = 0;

static void expect(const char *name, const char *text, extract_kind kind, const char *code) {
    char *got = NULL;
    extract_kind k = extract_code_block(text, strlen(text), &got);
    n_cases++;
    int ok = k == kind && ((code == NULL && got == NULL) || (code && got && strcmp(code, got) == 0));
    if (!ok) {
        failures++;
        fprintf(stderr, "FAIL %s: kind %d (want %d)\n--- got\n%s\n--- want\n%s\n---\n", name, (int)k, (int)kind,
                got ? got : "(null)", code ? code : "(null)");
    }
    free(got);
}

int main(void) {
    expect("one block",
           "Here is my kernel:\n```python\nimport torch\nclass ModelNew:\n    pass\n```\nDone.\n",
           EXTRACT_PYTHON, "import torch\nclass ModelNew:\n    pass\n");
    expect("last of several",
           "First try:\n```python\nv = 1\n```\nBetter:\n```python\nv = 2\n```\nand a note\n",
           EXTRACT_PYTHON, "v = 2\n");
    expect("python beats a later bare block",
           "```python\nv = 1\n```\nRun it with:\n```\npython main.py\n```\n", EXTRACT_PYTHON, "v = 1\n");
    expect("python beats a later bash block", "```python\nv = 1\n```\n```bash\nls\n```\n", EXTRACT_PYTHON,
           "v = 1\n");
    expect("py tag with a space and upper case", "``` py\nv = 3\n```\n```PYTHON\nv = 4\n```\n", EXTRACT_PYTHON,
           "v = 4\n");
    expect("python3 tag and trailing info", "```python3 title=\"kernel.py\"\nv = 5\n```\n", EXTRACT_PYTHON,
           "v = 5\n");
    expect("bare fence when no python block", "```\nv = 6\n```\ntext\n```\nv = 7\n```\n", EXTRACT_BARE,
           "v = 7\n");
    expect("other languages only", "```cpp\nint x;\n```\n```text\nhello\n```\n", EXTRACT_NONE, NULL);
    expect("no block", "I could not write a kernel for this.", EXTRACT_NONE, NULL);
    expect("empty response", "", EXTRACT_NONE, NULL);
    expect("backticks in a string",
           "```python\nFENCE = \"```\"\ndoc = 'use ```python blocks'\nx = 1\n```\n", EXTRACT_PYTHON,
           "FENCE = \"```\"\ndoc = 'use ```python blocks'\nx = 1\n");
    expect("a shorter run does not close a longer fence",
           "````python\ns = \"\"\"\n```\n\"\"\"\n````\n", EXTRACT_PYTHON, "s = \"\"\"\n```\n\"\"\"\n");
    expect("a closing fence with trailing text is content",
           "```python\nx = 1\n``` not a fence\ny = 2\n```\n", EXTRACT_PYTHON, "x = 1\n``` not a fence\ny = 2\n");
    expect("4-space indented fence is code, not a fence", "    ```python\n    x = 1\n    ```\n", EXTRACT_NONE, NULL);
    expect("indented fence strips its indent", "1. kernel:\n   ```python\n   def f():\n       return 1\n   ```\n",
           EXTRACT_PYTHON, "def f():\n    return 1\n");
    expect("CRLF line ends",
           "Kernel:\r\n```python\r\nimport torch\r\nx = 1\r\n```\r\n", EXTRACT_PYTHON, "import torch\nx = 1\n");
    expect("unterminated final block falls back to the previous one",
           "```python\nv = 1\n```\nNow faster:\n```python\nv = 2\nwhile True:\n", EXTRACT_PYTHON, "v = 1\n");
    expect("a lone unterminated block is no block", "```python\nimport torch\nclass ModelNew", EXTRACT_NONE, NULL);
    expect("unterminated python block after a bare one",
           "```\nv = 0\n```\n```python\nv = 1\n", EXTRACT_BARE, "v = 0\n");
    expect("closing fence at the end without newline", "```python\nv = 8\n```", EXTRACT_PYTHON, "v = 8\n");
    expect("empty block", "```python\n```\n", EXTRACT_PYTHON, "");
    expect("inline triple backticks are not fences", "Use ```python``` fences: ```x = 1```\n", EXTRACT_NONE, NULL);
    expect("fence-like lines inside a bash block do not open python",
           "```bash\n```python\n```\nv = 9\n```python\nv = 10\n```\n", EXTRACT_PYTHON, "v = 10\n");
    printf("extract: %d responses, %d failures\n", n_cases, failures);
    return failures ? 1 : 0;
}
