/* dist/launch_resume.c - see launch_resume.h. */
#include "dist/launch_resume.h"

#include <stdio.h>
#include <string.h>

/* Appends s, single-quoted when it holds anything a shell would read. */
static int put_word(char *buf, size_t n, size_t *used, const char *s) {
    int plain = s[0] != 0;
    for (const char *p = s; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                       "-_./=:,+@%[]",
                       *p) != NULL;
    char word[4200];
    size_t w = 0;
    if (plain) {
        w = (size_t)snprintf(word, sizeof word, "%s", s);
    } else {
        word[w++] = '\'';
        for (const char *p = s; *p && w + 5 < sizeof word; p++) {
            if (*p == '\'') { /* ' -> '\'' */
                memcpy(word + w, "'\\''", 4);
                w += 4;
            } else {
                word[w++] = *p;
            }
        }
        word[w++] = '\'';
        word[w] = 0;
    }
    if (w >= sizeof word - 1 || *used + w + 2 > n) return -1;
    if (*used) buf[(*used)++] = ' ';
    memcpy(buf + *used, word, w + 1);
    *used += w;
    return 0;
}

int sg_launch_resume_command(int argc, char **argv, char **wargs, char *buf, size_t n) {
    if (n) buf[0] = 0;
    if (!wargs || !wargs[0]) return 0;
    const char *cmd = wargs[1];
    if (!cmd || (strcmp(cmd, "train") != 0 && cmd[0] != '-')) return 0;
    for (int i = 1; wargs[i]; i++)
        if (!strcmp(wargs[i], "--help") || !strcmp(wargs[i], "-h")) return 0;
    /* where --resume auto goes: over a --resume given, else after `train`,
     * else at the end */
    int resume_at = -1, resume_eq = 0, train_at = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--resume") && i + 1 < argc) resume_at = i + 1;
        else if (!strncmp(argv[i], "--resume=", 9)) resume_at = i, resume_eq = 1;
        else if (train_at < 0 && !strcmp(argv[i], "train")) train_at = i;
    }
    size_t used = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i == resume_at) a = resume_eq ? "--resume=auto" : "auto";
        if (put_word(buf, n, &used, a) != 0) goto too_long;
        if (resume_at < 0 && i == train_at &&
            (put_word(buf, n, &used, "--resume") || put_word(buf, n, &used, "auto")))
            goto too_long;
    }
    if (resume_at < 0 && train_at < 0 &&
        (put_word(buf, n, &used, "--resume") || put_word(buf, n, &used, "auto")))
        goto too_long;
    return 1;
too_long:
    if (n) buf[0] = 0;
    return 0;
}
