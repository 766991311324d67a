/* tests/fuzz/fuzz_mesh.c - fuzz harness: the small-collective mesh's wire
 * parsers (dist/mesh_wire.c): the handshake an accepting rank reads from a
 * connection, and the header of each collective message; plus the
 * launcher's report lines (dist/launch_report.c), the other bytes dist/
 * reads from a peer process.
 *
 * Input: byte 0 picks this rank and the world (self = b0 % 8, world =
 * self + 1 + b0 / 8), the rest is the bytes a connection sends: fed to the
 * handshake parser in pieces of every length the input's byte 1 suggests,
 * as a non-blocking reader gets them. Invariants that abort: the parser's
 * verdict does not depend on how the bytes were split; "need more" never
 * asks for more than one handshake's cap; a parsed handshake names a higher
 * rank inside the world and its token lies inside the input, and building
 * it again gives the same bytes. Every 8-byte window is checked as a
 * message header against the expected one; each line as a report.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "dist/job_token.h"
#include "dist/launch_report.h"
#include "dist/mesh_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int self = data[0] % 8, world = self + 1 + data[0] / 8;
    size_t step = 1 + data[1] % 16;
    const uint8_t *b = data + 2;
    size_t len = size - 2;

    /* the whole input at once */
    sg_mesh_hello h;
    size_t need = 0;
    const char *why = NULL;
    sg_mesh_wire_result whole = sg_mesh_parse_hello(b, len, self, world, &h, &need, &why);
    if (whole == SG_MESH_WIRE_BAD && !why) abort();
    if (whole == SG_MESH_WIRE_MORE && (need <= len || need > SG_MESH_HELLO_MAX)) abort();
    if (whole == SG_MESH_WIRE_OK) {
        if (h.rank <= self || h.rank >= world || h.token_len == 0 || h.token_len > SG_TOKEN_MAX)
            abort();
        if (h.token < b || h.token + h.token_len > b + len) abort();
        uint8_t again[SG_MESH_HELLO_MAX];
        size_t n = sg_mesh_build_hello(again, h.rank, (const char *)h.token, h.token_len);
        if (n != need || memcmp(again, b, n) != 0) abort();
        (void)sg_token_equal(h.token, h.token_len, "fuzz-token", 10);
    }
    /* the same bytes as a reader gets them: the verdict must not change */
    sg_mesh_wire_result verdict = SG_MESH_WIRE_MORE;
    for (size_t got = step < len ? step : len;; got = got + step < len ? got + step : len) {
        verdict = sg_mesh_parse_hello(b, got, self, world, &h, &need, &why);
        if (verdict != SG_MESH_WIRE_MORE || got == len) break;
    }
    if (verdict != whole) abort();

    /* message headers */
    sg_mesh_msg_hdr want = sg_mesh_make_header((uint32_t)data[1] * 257u, (uint32_t)len);
    char err[256];
    for (size_t i = 0; i + sizeof want <= len && i < 512; i++) {
        int ok = sg_mesh_check_header(b + i, want, err, sizeof err); /* a bool */
        if (ok != (memcmp(b + i, &want, sizeof want) == 0)) abort();
        if (!ok && !err[0]) abort();
    }

    /* report lines */
    size_t start = 0;
    for (size_t i = 0; i <= len && i < 4096; i++) {
        if (i < len && b[i] != '\n') continue;
        int s, c, st;
        if (sg_launch_report_parse((const char *)b + start, i - start, &s, &c, &st) == SG_OK &&
            (s < 0 || c < 0 || sg_launch_report_phrase(st) == NULL))
            abort();
        long long it = -1;
        if (sg_launch_report_parse_checkpoint((const char *)b + start, i - start, &it) == SG_OK &&
            it < 0)
            abort();
        start = i + 1;
    }
    return 0;
}
