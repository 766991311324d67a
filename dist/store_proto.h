/* dist/store_proto.h - internal: the store's wire format, shared by
 * dist/store_server.c and dist/store_client.c.
 *
 * Request:  u8 op, u32 key_len, u32 val_len, key bytes, value bytes.
 * Response: u8 status (0 ok), u32 val_len, value bytes.
 * Integers are little-endian (all ranks run the same binary on the same
 * architecture). GET blocks on the server until the key exists; the client
 * enforces the timeout. */
#ifndef SG_DIST_STORE_PROTO_H
#define SG_DIST_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

enum {
    SG_OP_SET = 1,   /* key, value -> ok */
    SG_OP_GET = 2,   /* key -> value (waits) */
    SG_OP_ADD = 3,   /* key, int64 delta -> int64 new value */
    SG_OP_CHECK = 4, /* key -> u8 exists */
    SG_OP_HELLO = 5, /* value: int32 rank -> ok (liveness tracking) */
    SG_OP_BYE = 6,   /* -> ok; the connection's close is then not a death */
};

#define SG_STORE_MAX_KEY 4096
#define SG_STORE_MAX_VAL (64u << 20)
#define SG_STORE_DEAD_PREFIX "__dead/"
#define SG_STORE_HB_PREFIX "__hb/"
#define SG_STORE_LEFT_KEY "__left"

typedef struct sg_store_server sg_store_server;
/* Binds addr:port (port 0: any), starts the server thread. NULL after
 * logging (port taken, no pipe or thread available): never exits. */
sg_store_server *sg_store_server_start(const char *addr, int port);
int sg_store_server_port(const sg_store_server *s);
void sg_store_server_stop(sg_store_server *s);

#endif
