/* io/tfevents.c - see tfevents.h. */
#include "io/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"

#define TB_MAX_TAG 512

struct sg_tb_writer {
    FILE *f;
    int failed;
    char path[4096 + 128];
};

/* ---------------- CRC32C ---------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t sg_crc32c(uint32_t crc, const void *data, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_init);
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static uint32_t masked_crc(const void *data, size_t n) {
    uint32_t c = sg_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---------------- protobuf encoding ---------------- */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} pbuf;

static void put_bytes(pbuf *b, const void *d, size_t n) {
    SG_CHECK(b->len + n <= b->cap, "TensorBoard event larger than its buffer (internal error)");
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put_varint(pbuf *b, uint64_t v) {
    unsigned char t[10];
    size_t n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    put_bytes(b, t, n);
}

static void put_le(pbuf *b, uint64_t v, int n) {
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
    put_bytes(b, t, (size_t)n);
}

static void put_key(pbuf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_double(pbuf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put_key(b, field, 1);
    put_le(b, u, 8);
}

static void put_float(pbuf *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_key(b, field, 5);
    put_le(b, u, 4);
}

static void put_lendelim(pbuf *b, int field, const void *d, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    put_bytes(b, d, n);
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Event header fields: wall_time (1), step (2). */
static void put_event_head(pbuf *b, int64_t step) {
    put_double(b, 1, wall_time());
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)step);
}

/* ---------------- records ---------------- */

static void fail_once(sg_tb_writer *w) {
    if (w->failed) return;
    w->failed = 1;
    SG_WARN("TensorBoard: writing %s failed: %s; no more events are written in this run "
            "(metrics.jsonl has every value; free disk space, or set train.tensorboard: false)",
            w->path, strerror(errno ? errno : EIO));
}

static void write_record(sg_tb_writer *w, const pbuf *ev) {
    if (!w || w->failed) return;
    unsigned char head[12];
    uint64_t n = ev->len;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(n >> (8 * i));
    uint32_t c = masked_crc(head, 8);
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(c >> (8 * i));
    unsigned char tail[4];
    c = masked_crc(ev->p, ev->len);
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(c >> (8 * i));
    errno = 0;
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(ev->p, 1, ev->len, w->f) != ev->len ||
        fwrite(tail, 1, 4, w->f) != 4)
        fail_once(w);
}

sg_tb_writer *sg_tb_open(const char *dir, int64_t start_step) {
    static int opened = 0; /* files this process opened: part of the name */
    if (sg_mkdirs(dir) != 0) {
        SG_ERROR("TensorBoard: cannot create %s: %s (check run_dir's permissions, or set "
                 "train.tensorboard: false)",
                 dir, strerror(errno));
        return NULL;
    }
    sg_tb_writer *w = calloc(1, sizeof *w);
    SG_CHECK(w != NULL, "out of host memory");
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    int n = __atomic_fetch_add(&opened, 1, __ATOMIC_RELAXED);
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++, n++) {
        snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d.%d", dir,
                 (long long)time(NULL), host, (int)getpid(), n);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd >= 0) w->f = fdopen(fd, "wb");
    if (!w->f) {
        SG_ERROR("TensorBoard: cannot create an event file %s: %s (set train.tensorboard: "
                 "false to run without)",
                 w->path, strerror(errno));
        if (fd >= 0) close(fd);
        free(w);
        return NULL;
    }
    unsigned char buf[64];
    pbuf b = {buf, 0, sizeof buf};
    put_event_head(&b, 0);
    put_lendelim(&b, 3, "brain.Event:2", 13);
    write_record(w, &b);
    /* SessionLog { status: START } */
    unsigned char sl[2] = {0x08, 0x01};
    b.len = 0;
    put_event_head(&b, start_step);
    put_lendelim(&b, 6, sl, sizeof sl);
    write_record(w, &b);
    if (sg_tb_flush(w) != SG_OK) {
        sg_tb_close(w);
        return NULL;
    }
    return w;
}

void sg_tb_scalar(sg_tb_writer *w, int64_t step, const char *tag, double value) {
    if (!w || w->failed) return;
    size_t tl = strlen(tag);
    if (tl > TB_MAX_TAG) tl = TB_MAX_TAG;
    unsigned char val[TB_MAX_TAG + 32], sum[TB_MAX_TAG + 48], ev[TB_MAX_TAG + 96];
    pbuf v = {val, 0, sizeof val}, s = {sum, 0, sizeof sum}, e = {ev, 0, sizeof ev};
    put_lendelim(&v, 1, tag, tl);    /* Summary.Value.tag */
    put_float(&v, 2, (float)value);  /* Summary.Value.simple_value */
    put_lendelim(&s, 1, v.p, v.len); /* Summary.value */
    put_event_head(&e, step);
    put_lendelim(&e, 5, s.p, s.len); /* Event.summary */
    write_record(w, &e);
}

sg_status sg_tb_flush(sg_tb_writer *w) {
    if (!w) return SG_OK;
    if (!w->failed) {
        errno = 0;
        if (fflush(w->f) != 0) fail_once(w);
    }
    return w->failed ? SG_ERR_RUNTIME : SG_OK;
}

void sg_tb_close(sg_tb_writer *w) {
    if (!w) return;
    sg_tb_flush(w);
    if (fclose(w->f) != 0 && !w->failed) fail_once(w);
    free(w);
}

const char *sg_tb_path(const sg_tb_writer *w) { return w ? w->path : ""; }
