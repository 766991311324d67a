/* tests/fuzz/fuzz_list_file.c - fuzz harness: the dataset list-file reader
 * (data/list_file.h), which reads a split file of the user's dataset.
 *
 * Input: the file's bytes, written to a private temporary path and read to
 * its end. Invariants that abort (so the driver saves the input): every
 * line returned has 1 or more fields, the first min(n, SG_LIST_FIELDS)
 * non-NULL and non-empty, none longer than 8190 characters nor holding a
 * space, tab or newline, line numbers strictly increasing and never above
 * the file's newline count + 1; the read ends in 0 (end of file) or -1
 * (a line past the limit), and after -1 the file is closed like any other.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "data/list_file.h"

static char path[64];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sg_log_set_level(SG_LOG_ERROR - 1); /* refusals are expected */
    snprintf(path, sizeof path, "/tmp/sg_fuzz_list_%d.txt", (int)getpid());
    atexit(remove_file);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    int newlines = 0;
    for (size_t i = 0; i < size; i++) newlines += data[i] == '\n';
    sg_list_file l;
    if (sg_list_open(&l, path, "list file", "a fuzz input") != SG_OK) abort();
    int last = 0, rc;
    while ((rc = sg_list_next(&l)) == 1) {
        if (l.lineno <= last || l.lineno > newlines + 1 || l.n_fields < 1) abort();
        last = l.lineno;
        int shown = l.n_fields < SG_LIST_FIELDS ? l.n_fields : SG_LIST_FIELDS;
        for (int i = 0; i < SG_LIST_FIELDS; i++) {
            const char *s = l.field[i];
            if ((i < shown) != (s != NULL)) abort();
            if (!s) continue;
            size_t n = strlen(s);
            if (n == 0 || n > 8190 || strpbrk(s, " \t\n")) abort();
        }
    }
    if (rc != 0 && rc != -1) abort();
    sg_list_close(&l);
    return 0;
}
