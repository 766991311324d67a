/* dist/mesh_wire.h - internal: the small-collective mesh's wire format and
 * its pure parsers (dist/mesh_wire.c: bytes in, parsed or a reason out; no
 * sockets, no logging), shared by dist/mesh.c and the fuzz harness
 * tests/fuzz/fuzz_mesh.c.
 *
 * Handshake (the higher rank connects to the lower and sends first):
 *   u32 magic "SGM1", i32 rank, u32 token_len, token bytes (1..SG_TOKEN_MAX)
 * answered by one status byte (SG_MESH_ACK_*). Every collective message then
 * starts with a header: u32 magic (high 16 bits) | sequence (low 16), u32
 * payload bytes. Integers are little-endian.
 */
#ifndef SG_DIST_MESH_WIRE_H
#define SG_DIST_MESH_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dist/job_token.h"

#define SG_MESH_HELLO_MAGIC 0x314d4753u /* "SGM1" */
#define SG_MESH_HELLO_FIXED 12
#define SG_MESH_HELLO_MAX (SG_MESH_HELLO_FIXED + SG_TOKEN_MAX)
#define SG_MESH_MSG_MAGIC 0x5347u /* "SG" */

enum {
    SG_MESH_ACK_OK = 0,
    SG_MESH_ACK_WRONG_TOKEN = 1,
    SG_MESH_ACK_RANK_TAKEN = 2,
    SG_MESH_ACK_BAD = 3,
};

/* The handshake parser's verdict on the bytes so far (not an sg_status:
 * "more bytes needed" is neither success nor failure; nothing is logged). */
typedef enum sg_mesh_wire_result {
    SG_MESH_WIRE_BAD = -1, /* malformed: *why says what is wrong */
    SG_MESH_WIRE_MORE = 0, /* incomplete: *need says how many bytes it takes */
    SG_MESH_WIRE_OK = 1,   /* complete and well-formed */
} sg_mesh_wire_result;

typedef struct sg_mesh_hello {
    int32_t rank;
    const uint8_t *token; /* into the buffer */
    size_t token_len;
} sg_mesh_hello;

/* Parses the handshake at the start of buf (len bytes) received by rank
 * `self` of `world`: the sender must be a higher rank. SG_MESH_WIRE_OK
 * (*h filled), SG_MESH_WIRE_MORE (*need = the bytes the whole handshake
 * takes, as far as known), or SG_MESH_WIRE_BAD with *why. */
sg_mesh_wire_result sg_mesh_parse_hello(const void *buf, size_t len, int self, int world,
                                        sg_mesh_hello *h, size_t *need, const char **why);
/* Writes the handshake into out (SG_MESH_HELLO_MAX bytes); its length, or 0
 * for an empty or too long token. */
size_t sg_mesh_build_hello(uint8_t *out, int32_t rank, const char *token, size_t token_len);

typedef struct sg_mesh_msg_hdr {
    uint32_t magic_seq; /* magic in the high 16 bits, seq in the low 16 */
    uint32_t bytes;
} sg_mesh_msg_hdr;

/* The header of collective number seq carrying bytes. */
sg_mesh_msg_hdr sg_mesh_make_header(uint32_t seq, uint32_t bytes);
/* Checks a received header (8 bytes) against the expected one: 1 if they
 * match; else 0 with what differs in err (the peer's collective number and
 * size, for the message naming the rank). A bool, not a status. */
int sg_mesh_check_header(const void *got, sg_mesh_msg_hdr want, char *err, size_t errlen);

#endif
