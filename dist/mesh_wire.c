/* dist/mesh_wire.c - the mesh's pure parsers (dist/mesh_wire.h). */
#include "dist/mesh_wire.h"

#include <stdio.h>
#include <string.h>

sg_mesh_wire_result sg_mesh_parse_hello(const void *buf, size_t len, int self, int world,
                                        sg_mesh_hello *h, size_t *need, const char **why) {
    const uint8_t *b = buf;
    *need = SG_MESH_HELLO_FIXED;
    if (len >= 4) {
        uint32_t magic;
        memcpy(&magic, b, 4);
        if (magic != SG_MESH_HELLO_MAGIC) {
            *why = "no segtrain mesh handshake (another program or version)";
            return SG_MESH_WIRE_BAD;
        }
    }
    if (len < SG_MESH_HELLO_FIXED) return SG_MESH_WIRE_MORE;
    int32_t rank;
    uint32_t tl;
    memcpy(&rank, b + 4, 4);
    memcpy(&tl, b + 8, 4);
    if (rank <= self || rank >= world) {
        *why = "a rank that does not connect to this one (only higher ranks do)";
        return SG_MESH_WIRE_BAD;
    }
    if (tl == 0 || tl > SG_TOKEN_MAX) {
        *why = "a handshake without a valid job token";
        return SG_MESH_WIRE_BAD;
    }
    *need = SG_MESH_HELLO_FIXED + tl;
    if (len < *need) return SG_MESH_WIRE_MORE;
    h->rank = rank;
    h->token = b + SG_MESH_HELLO_FIXED;
    h->token_len = tl;
    return SG_MESH_WIRE_OK;
}

size_t sg_mesh_build_hello(uint8_t *out, int32_t rank, const char *token, size_t token_len) {
    if (token_len == 0 || token_len > SG_TOKEN_MAX) return 0;
    uint32_t magic = SG_MESH_HELLO_MAGIC, tl = (uint32_t)token_len;
    memcpy(out, &magic, 4);
    memcpy(out + 4, &rank, 4);
    memcpy(out + 8, &tl, 4);
    memcpy(out + SG_MESH_HELLO_FIXED, token, token_len);
    return SG_MESH_HELLO_FIXED + token_len;
}

sg_mesh_msg_hdr sg_mesh_make_header(uint32_t seq, uint32_t bytes) {
    sg_mesh_msg_hdr h = {((uint32_t)SG_MESH_MSG_MAGIC << 16) | (seq & 0xffffu), bytes};
    return h;
}

int sg_mesh_check_header(const void *got, sg_mesh_msg_hdr want, char *err, size_t errlen) {
    sg_mesh_msg_hdr g;
    memcpy(&g, got, sizeof g);
    if (g.magic_seq == want.magic_seq && g.bytes == want.bytes) return 1;
    if ((g.magic_seq >> 16) != SG_MESH_MSG_MAGIC)
        snprintf(err, errlen,
                 "sent bytes that are not a mesh message (lost its place in the stream)");
    else
        snprintf(
            err, errlen,
            "is in a different collective (its collective #%u has %u bytes, ours #%u has %u): ranks took "
            "different code paths",
            g.magic_seq & 0xffffu, g.bytes, want.magic_seq & 0xffffu, want.bytes);
    return 0;
}
