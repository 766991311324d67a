/* tests/fuzz/fuzz_store.c - fuzz harness: the rendezvous store's wire
 * parsers (dist/store_wire.c, dist/store_proto.h), as the server meets them
 * on one connection.
 *
 * Input: byte 0 picks the world size (1..256), the rest is what a client
 * sends. The stream is cut into requests the way the server does: before
 * HELLO only a HELLO is accepted; a HELLO's value is parsed and its token
 * compared (constant time) with the job's; after a valid HELLO everything
 * else. The first 5 bytes also go through the client's response-header
 * parser. Invariants that abort (so the driver saves the input): a parsed
 * request lies inside the input and within the limits, its key has no NUL;
 * "need more" always asks for more than it has and never more than one
 * request's cap (what the server would buffer); a HELLO built from a parsed
 * one parses back to the same fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "dist/job_token.h"
#include "dist/store_proto.h"

#define TOKEN "fuzz-job-token"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int world = 1 + data[0];
    const uint8_t *b = data + 1;
    size_t len = size - 1;

    uint8_t st;
    uint32_t rlen;
    const char *why = NULL;
    if (len >= SG_STORE_RESP_HDR &&
        sg_store_parse_response(b, SG_STORE_MAX_VAL, &st, &rlen, &why) == SG_WIRE_OK &&
        (st > SG_ST_FULL || rlen > SG_STORE_MAX_VAL))
        abort();

    int authed = 0;
    size_t off = 0;
    for (int n = 0; n < 10000 && off <= len; n++) {
        sg_store_request r;
        size_t need = 0;
        why = NULL;
        sg_wire_result pr = sg_store_parse_request(b + off, len - off, authed, &r, &need, &why);
        if (pr == SG_WIRE_BAD) {
            if (!why) abort(); /* every refusal says why */
            break;
        }
        if (pr == SG_WIRE_MORE) {
            if (need <= len - off) abort();
            if (need > (size_t)SG_STORE_HDR + SG_STORE_MAX_KEY + SG_STORE_MAX_VAL) abort();
            if (!authed && need > (size_t)SG_STORE_HDR + SG_STORE_HELLO_MAX) abort();
            break;
        }
        if (pr != SG_WIRE_OK) abort();
        if (r.size > len - off || r.size != SG_STORE_HDR + (size_t)r.klen + r.vlen) abort();
        if (r.klen > SG_STORE_MAX_KEY || r.vlen > SG_STORE_MAX_VAL) abort();
        if (r.klen && memchr(r.key, 0, r.klen)) abort();
        if ((const uint8_t *)r.key != b + off + SG_STORE_HDR ||
            r.val != b + off + SG_STORE_HDR + r.klen)
            abort();
        if (!authed && r.op != SG_OP_HELLO) abort();
        if (r.op == SG_OP_HELLO) {
            sg_store_hello h;
            if (sg_store_parse_hello(r.val, r.vlen, world, &h, &why) != SG_WIRE_OK) break;
            if (h.rank < 0 || h.rank >= world || h.token_len == 0 || h.token_len > SG_TOKEN_MAX)
                abort();
            uint8_t again[SG_STORE_HELLO_MAX];
            size_t hl =
                sg_store_build_hello(again, h.rank, h.kind, (const char *)h.token, h.token_len);
            sg_store_hello h2;
            if (hl != r.vlen || memcmp(again, r.val, hl) != 0) abort();
            if (sg_store_parse_hello(again, hl, world, &h2, &why) != SG_WIRE_OK ||
                h2.rank != h.rank || h2.kind != h.kind || h2.token_len != h.token_len)
                abort();
            if (!sg_token_equal(h.token, h.token_len, TOKEN, strlen(TOKEN)))
                break; /* a stranger: dropped */
            authed = 1;
        }
        off += r.size;
    }
    return 0;
}
