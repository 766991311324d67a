/* tests/backend/run_memory.c - the memory, stream and thread ops every
 * other case relies on: alloc (zeroed, counted by get_info), free, upload,
 * download, copy, zero, host_alloc, upload_async + upload_wait, the stream
 * handles (distinct native streams with SG_CAP_ASYNC_STREAMS, NULL without:
 * backend.h), stream_wait and sync, direct host access with
 * SG_CAP_HOST_MEMORY; that upload_async is ordered after the compute ops
 * issued before it; and ops from a second thread after bind_thread.
 */
#include <pthread.h>
#include <string.h>

#include "tests/backend/cases.h"

void run_memory(tb_ctx *t, const tb_case *c) {
    sg_backend *be = t->be;
    const sg_ops *o = be->ops;
    size_t bytes = c->count;
    sg_backend_info i0, i1, i2;
    sg_backend_get_info(be, &i0);
    tb_expect(t, strncmp(i0.name, o->name, strlen(o->name)) == 0,
              "get_info name '%s' does not start with the backend's name '%s'", i0.name, o->name);
    tb_expect(t, i0.device[0] != 0, "get_info gives no device description");

    /* alloc is zeroed and counted; memory moved through these buffers is
     * not tracked by the run (this case checks the accounting itself) */
    uint8_t *d = o->alloc(be, bytes);
    sg_backend_get_info(be, &i1);
    tb_expect(t, i1.mem_in_use == i0.mem_in_use + bytes, "mem_in_use %zu after alloc(%zu), was %zu",
              i1.mem_in_use, bytes, i0.mem_in_use);
    tb_expect(t, i1.mem_peak >= i1.mem_in_use, "mem_peak %zu < mem_in_use %zu", i1.mem_peak,
              i1.mem_in_use);
    uint8_t *h = tb_hbytes(t, bytes);
    memset(h, 0xAB, bytes);
    o->download(be, h, d, bytes);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += h[i] != 0;
    tb_expect(t, nonzero == 0, "alloc must return zeroed memory (%zu non-zero bytes)", nonzero);

    /* host_alloc + upload_async on the copy stream; the compute stream
     * waits (upload_wait), so a copy on it sees the data */
    uint8_t *pin = tb_pinned(t, bytes);
    for (size_t i = 0; i < bytes; i++) pin[i] = (uint8_t)(i * 31 + 7);
    o->upload_async(be, d, pin, bytes);
    o->upload_wait(be);
    uint8_t *d2 = o->alloc(be, bytes);
    o->copy(be, d2, d, bytes);
    o->download(be, h, d2, bytes);
    tb_same(t, "upload_async, then copy", pin, h, bytes);
    if (sg_backend_has(be, SG_CAP_HOST_MEMORY)) /* the CPU may read backend memory */
        tb_same(t, "backend memory read directly (SG_CAP_HOST_MEMORY)", pin, d2, bytes);

    /* zero and upload/download of a range inside a buffer */
    o->zero(be, d2 + 10, 100);
    uint8_t part[7] = {1, 2, 3, 4, 5, 6, 7}, back[7];
    o->upload(be, d2 + 200, part, sizeof part);
    o->download(be, h, d2, bytes);
    o->download(be, back, d2 + 200, sizeof back);
    tb_expect(t, h[9] == pin[9] && h[10] == 0 && h[109] == 0 && h[110] == pin[110],
              "zero(p + 10, 100) wrote outside [10, 110) or not all of it");
    tb_same(t, "upload/download at an offset", part, back, sizeof part);
    tb_same(t, "upload at an offset (in the whole buffer)", part, h + 200, sizeof part);

    /* streams: native handles with SG_CAP_ASYNC_STREAMS, else NULL */
    void *sc = o->stream(be, SG_STREAM_COMPUTE), *sp = o->stream(be, SG_STREAM_COPY);
    void *sm = o->stream(be, SG_STREAM_COMM);
    if (sg_backend_has(be, SG_CAP_ASYNC_STREAMS))
        tb_expect(t, sc && sp && sm && sc != sp && sc != sm,
                  "SG_CAP_ASYNC_STREAMS: expected distinct compute, copy and comm streams");
    else tb_expect(t, !sc && !sp && !sm, "a backend without streams must return NULL handles");
    o->stream_wait(be, SG_STREAM_COMM, SG_STREAM_COMPUTE);
    o->stream_wait(be, SG_STREAM_COMPUTE, SG_STREAM_COMM);
    o->sync(be);

    o->free(be, d);
    o->free(be, d2);
    sg_backend_get_info(be, &i2);
    tb_expect(t, i2.mem_in_use == i0.mem_in_use, "mem_in_use %zu after free, was %zu",
              i2.mem_in_use, i0.mem_in_use);
    tb_expect(t, i2.mem_peak >= i0.mem_in_use + 2 * bytes, "mem_peak %zu below the %zu in use",
              i2.mem_peak, i0.mem_in_use + 2 * bytes);
}

/* upload_async must not overwrite a buffer that compute ops issued before
 * it still read (write after read across the copy stream): the ops below
 * read a for a while, the upload replaces a right after them. On an
 * asynchronous backend `count` floats make the ops outlast the copy's start;
 * a backend without SG_CAP_ASYNC_STREAMS (every op synchronous) runs the
 * same check on count/16 floats, to spare the host's memory. */
void run_upload_async_order(tb_ctx *t, const tb_case *c) {
    sg_backend *be = t->be;
    const sg_ops *o = be->ops;
    size_t n = sg_backend_has(be, SG_CAP_ASYNC_STREAMS) ? c->count : c->count / 16;
    float *old = tb_hzeros(t, n);
    for (size_t i = 0; i < n; i++) old[i] = (float)(i % 1000);
    float *pin = tb_pinned(t, n * sizeof(float));
    for (size_t i = 0; i < n; i++) pin[i] = -1.0f;
    float *a_d = tb_devf(t, old, n), *b_d = tb_devf(t, NULL, n);
    o->scale(be, a_d, b_d, 2.0f, n);
    for (int k = 0; k < 3; k++) o->axpy(be, 1.0f, a_d, b_d, n); /* b = 5a, exact */
    o->upload_async(be, a_d, pin, n * sizeof(float));
    o->upload_wait(be);
    float *host = tb_hzeros(t, n);
    o->download(be, host, b_d, n * sizeof(float));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += host[i] != 5.0f * old[i];
    tb_expect(t, wrong == 0,
              "%zu of %zu results read the uploaded data, not the old (upload_async "
              "overlapped the ops issued before it)",
              wrong, n);
    o->download(be, host, a_d, n * sizeof(float));
    tb_same(t, "the uploaded buffer", pin, host, n * sizeof(float));
}

/* A second thread binds to the backend (bind_thread), then runs ops on it:
 * the DDP communication thread's pattern. */
typedef struct bind_st {
    sg_backend *be;
    float *x_d, *y_d, *host;
    size_t n;
} bind_st;

static void *bound_thread(void *p) {
    bind_st *s = p;
    s->be->ops->bind_thread(s->be);
    s->be->ops->scale(s->be, s->x_d, s->y_d, 3.0f, s->n);
    s->be->ops->stream_wait(s->be, SG_STREAM_COMM, SG_STREAM_COMPUTE);
    s->be->ops->download(s->be, s->host, s->y_d, s->n * sizeof(float));
    return NULL;
}

void run_bind_thread(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bind_thread) || !TB_HAS(t, scale)) return;
    size_t n = c->count;
    float *x = tb_input(t, n), *y = tb_hzeros(t, n);
    bind_st s = {t->be, tb_devf(t, x, n), tb_devf(t, NULL, n), tb_hzeros(t, n), n};
    t->be->ops->sync(t->be);
    pthread_t th;
    if (!tb_expect(t, pthread_create(&th, NULL, bound_thread, &s) == 0, "pthread_create failed"))
        return;
    pthread_join(th, NULL);
    t->be->ops->bind_thread(t->be); /* harmless on the creating thread too */
    for (size_t i = 0; i < n; i++) y[i] = 3.0f * x[i];
    tb_close(t, "y computed on the bound thread", y, s.host, n, 0);
}
