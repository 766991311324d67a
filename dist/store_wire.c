/* dist/store_wire.c - the store's pure parsers (dist/store_proto.h): bytes
 * in, a parsed request or a reason out. No sockets, no logging, no
 * allocation, so the fuzz harness can call them on any input. */
#include <string.h>

#include "dist/store_proto.h"

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

sg_wire_result sg_store_parse_request(const void *buf, size_t len, int authed,
                                      sg_store_request *req, size_t *need, const char **why) {
    const uint8_t *b = buf;
    *need = SG_STORE_HDR;
    if (len < 1) return SG_WIRE_MORE;
    uint8_t op = b[0];
    if (op < SG_OP_SET || op > SG_OP_BYE) {
        *why = "unknown operation";
        return SG_WIRE_BAD;
    }
    if (!authed && op != SG_OP_HELLO) {
        *why = "a request before HELLO with the job token";
        return SG_WIRE_BAD;
    }
    if (len < SG_STORE_HDR) return SG_WIRE_MORE;
    uint32_t klen = rd32(b + 1), vlen = rd32(b + 5);
    if (klen > SG_STORE_MAX_KEY) {
        *why = "key longer than SG_STORE_MAX_KEY";
        return SG_WIRE_BAD;
    }
    if (vlen > SG_STORE_MAX_VAL) {
        *why = "value larger than SG_STORE_MAX_VAL";
        return SG_WIRE_BAD;
    }
    switch (op) {
    case SG_OP_HELLO:
        if (klen != 0 || vlen > SG_STORE_HELLO_MAX) {
            *why = "malformed HELLO (key or value size)";
            return SG_WIRE_BAD;
        }
        if (authed) {
            *why = "a second HELLO on one connection";
            return SG_WIRE_BAD;
        }
        break;
    case SG_OP_BYE:
        if (klen != 0 || vlen != 0) {
            *why = "malformed BYE (carries data)";
            return SG_WIRE_BAD;
        }
        break;
    case SG_OP_GET:
    case SG_OP_CHECK:
        if (vlen != 0) {
            *why = "GET or CHECK with a value";
            return SG_WIRE_BAD;
        }
        break;
    case SG_OP_ADD:
        if (vlen != 8) {
            *why = "ADD whose delta is not 8 bytes";
            return SG_WIRE_BAD;
        }
        break;
    default: /* SET: any value up to the cap */ break;
    }
    size_t total = SG_STORE_HDR + (size_t)klen + vlen;
    *need = total;
    if (len < total) return SG_WIRE_MORE;
    const char *key = (const char *)b + SG_STORE_HDR;
    if (klen && memchr(key, 0, klen)) {
        *why = "key with a NUL byte";
        return SG_WIRE_BAD;
    }
    req->op = op;
    req->key = key;
    req->klen = klen;
    req->val = b + SG_STORE_HDR + klen;
    req->vlen = vlen;
    req->size = total;
    return SG_WIRE_OK;
}

sg_wire_result sg_store_parse_hello(const void *val, size_t len, int world, sg_store_hello *h,
                                    const char **why) {
    const uint8_t *v = val;
    if (len < 13 || len > SG_STORE_HELLO_MAX) {
        *why = "HELLO of the wrong size (no token?)";
        return SG_WIRE_BAD;
    }
    if (rd32(v) != SG_STORE_HELLO_MAGIC) {
        *why = "HELLO without segtrain's magic (another program or version)";
        return SG_WIRE_BAD;
    }
    int32_t rank;
    memcpy(&rank, v + 4, 4);
    uint32_t kind = rd32(v + 8);
    if (rank < 0 || rank >= world) {
        *why = "HELLO with a rank outside the world";
        return SG_WIRE_BAD;
    }
    if (kind != SG_HELLO_CLAIM && kind != SG_HELLO_EXTRA) {
        *why = "HELLO of an unknown kind";
        return SG_WIRE_BAD;
    }
    h->rank = rank;
    h->kind = kind;
    h->token = v + 12;
    h->token_len = len - 12;
    return SG_WIRE_OK;
}

size_t sg_store_build_hello(uint8_t *out, int32_t rank, uint32_t kind, const char *token,
                            size_t token_len) {
    if (token_len == 0 || token_len > SG_TOKEN_MAX) return 0;
    uint32_t magic = SG_STORE_HELLO_MAGIC;
    memcpy(out, &magic, 4);
    memcpy(out + 4, &rank, 4);
    memcpy(out + 8, &kind, 4);
    memcpy(out + 12, token, token_len);
    return 12 + token_len;
}

sg_wire_result sg_store_parse_response(const void *hdr, uint32_t max_len, uint8_t *status,
                                       uint32_t *vlen, const char **why) {
    const uint8_t *b = hdr;
    *status = b[0];
    *vlen = rd32(b + 1);
    if (*status > SG_ST_FULL) {
        *why = "unknown response status";
        return SG_WIRE_BAD;
    }
    if (*vlen > max_len) {
        *why = "response larger than expected";
        return SG_WIRE_BAD;
    }
    return SG_WIRE_OK;
}
