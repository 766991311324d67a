/* dist/store_proto.h - internal: the store's wire format and its limits,
 * shared by dist/store_server.c and dist/store_client.c, and the pure
 * parsers (dist/store_wire.c: bytes in, a parsed request or a reason out; no
 * sockets, no logging, no allocation), which the fuzz harness
 * tests/fuzz/fuzz_store.c drives directly.
 *
 * Request:  u8 op, u32 key_len, u32 val_len, key bytes, value bytes.
 * Response: u8 status, u32 val_len, value bytes.
 * Integers are little-endian (all ranks run the same binary on the same
 * architecture). GET blocks on the server until the key exists; the client
 * enforces the timeout.
 *
 * The first request on a connection must be HELLO carrying the job token
 * (dist/job_token.h); until then nothing else is parsed, and a HELLO's
 * value is at most SG_STORE_HELLO_MAX bytes, so a connection without the
 * token can make the server hold a few hundred bytes, never more. */
#ifndef SG_DIST_STORE_PROTO_H
#define SG_DIST_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "dist/job_token.h"

enum {
    SG_OP_SET = 1,   /* key, value -> ok */
    SG_OP_GET = 2,   /* key -> value (waits) */
    SG_OP_ADD = 3,   /* key, int64 delta -> int64 new value */
    SG_OP_CHECK = 4, /* key -> u8 exists */
    SG_OP_HELLO = 5, /* value: hello (below) -> ok | wrong token | rank taken */
    SG_OP_BYE = 6,   /* -> ok; the connection's close is then not a death */
};

/* Response status. */
enum {
    SG_ST_OK = 0,
    SG_ST_BAD = 1,         /* malformed or unknown request */
    SG_ST_WRONG_TOKEN = 2, /* HELLO with another job's token */
    SG_ST_RANK_TAKEN = 3,  /* HELLO claiming a rank a live connection holds;
                              value: that connection's peer address */
    SG_ST_FULL = 4,        /* SET over the store's total size cap */
};

/* HELLO value: u32 magic, i32 rank, u32 kind, then the token (1 to
 * SG_TOKEN_MAX bytes). kind CLAIM: the rank's first connection (a second
 * live claim to one rank is refused); EXTRA: another connection of a rank
 * that already claimed (heartbeats, a reconnect). */
#define SG_STORE_HELLO_MAGIC 0x31545353u /* "SST1" */
enum { SG_HELLO_CLAIM = 0, SG_HELLO_EXTRA = 1 };
#define SG_STORE_HELLO_MAX (12 + SG_TOKEN_MAX)

/* Limits. A request larger than these is refused when its 9-byte header
 * arrives, before any of its body is buffered. */
#define SG_STORE_MAX_KEY 4096
#define SG_STORE_MAX_VAL (16u << 20) /* Gloo's address list for 4096 ranks is ~0.6 MiB */
#define SG_STORE_HDR 9
#define SG_STORE_RESP_HDR 5
/* Unread responses one connection may have queued: a client reads each
 * answer before its next request, so two largest answers is already a
 * client that does not read. Over it the connection is dropped. */
#define SG_STORE_MAX_OUT (2u * (SG_STORE_MAX_VAL + SG_STORE_RESP_HDR))
/* Bytes of partially received requests over all connections: a request
 * above SG_STORE_SMALL_REQ reserves its size from this budget before its
 * body is read (otherwise it waits, unread, until others complete). */
#define SG_STORE_INFLIGHT_MAX (64u << 20)
#define SG_STORE_SMALL_REQ (64u << 10)
/* Total bytes of keys and values the table may hold (SETs beyond: SG_ST_FULL). */
#define SG_STORE_MAX_TOTAL ((size_t)1 << 30)
/* Connections that have not said HELLO yet: at most this many (the oldest
 * is dropped for a new one), each for at most SG_STORE_HELLO_S seconds. */
#define SG_STORE_MAX_PENDING 64
#define SG_STORE_HELLO_S 10.0
/* sg_store_server_stop waits at most this long for the server thread. */
#define SG_STORE_STOP_S 5.0

#define SG_STORE_DEAD_PREFIX "__dead/"
#define SG_STORE_HB_PREFIX "__hb/"
#define SG_STORE_LEFT_KEY "__left"
/* sg_store_diagnose's claim, winner and verdict: __diag/SEQ/{claim,winner,verdict} */
#define SG_STORE_DIAG_PREFIX "__diag/"

/* ---- pure parsers (dist/store_wire.c) ---- */

/* A parser's verdict on the bytes so far (not an sg_status: "more bytes
 * needed" is neither success nor failure, and nothing is logged). */
typedef enum sg_wire_result {
    SG_WIRE_BAD = -1, /* malformed: *why says what is wrong */
    SG_WIRE_MORE = 0, /* incomplete: wait for more bytes */
    SG_WIRE_OK = 1,   /* complete and well-formed */
} sg_wire_result;

typedef struct sg_store_request {
    uint8_t op;
    const char *key; /* klen bytes, no NUL inside (not NUL-terminated) */
    uint32_t klen;
    const uint8_t *val; /* vlen bytes */
    uint32_t vlen;
    size_t size; /* bytes the whole request occupies */
} sg_store_request;

/* Looks at the request at the start of buf (len bytes). authed: the
 * connection has said HELLO (before that only a HELLO is accepted).
 * SG_WIRE_OK: *req describes it (pointers into buf). SG_WIRE_MORE: more
 * bytes are needed; *need is the request's total size once its header is
 * complete (else SG_STORE_HDR). SG_WIRE_BAD: *why says what is wrong (a
 * static string). Header fields are checked as soon as the header is
 * complete, before the body arrives. */
sg_wire_result sg_store_parse_request(const void *buf, size_t len, int authed,
                                      sg_store_request *req, size_t *need, const char **why);

typedef struct sg_store_hello {
    int32_t rank;
    uint32_t kind;
    const uint8_t *token; /* into the value */
    size_t token_len;
} sg_store_hello;

/* Parses a HELLO value; world: ranks are 0..world-1. SG_WIRE_OK or
 * SG_WIRE_BAD with *why. */
sg_wire_result sg_store_parse_hello(const void *val, size_t len, int world, sg_store_hello *h,
                                    const char **why);

/* Writes a HELLO value into out (SG_STORE_HELLO_MAX bytes); returns its
 * length, or 0 when the token is empty or too long. */
size_t sg_store_build_hello(uint8_t *out, int32_t rank, uint32_t kind, const char *token,
                            size_t token_len);

/* Parses a response header (SG_STORE_RESP_HDR bytes). SG_WIRE_OK, or
 * SG_WIRE_BAD when the length is over max_len or the status unknown. */
sg_wire_result sg_store_parse_response(const void *hdr, uint32_t max_len, uint8_t *status,
                                       uint32_t *vlen, const char **why);

/* ---- the server (dist/store_server.c) ---- */

typedef struct sg_store_server sg_store_server;

typedef struct sg_store_server_opts {
    const char *token; /* the job token (copied) */
    int world;         /* ranks 0..world-1 may say HELLO */
    int multi_node;    /* the job spans nodes: a loopback bind is warned about */
} sg_store_server_opts;

/* Listens on the MASTER_ADDR interface (rule in dist/net_addr.h) at port
 * (0: any), starts the server thread. NULL after logging (port taken, no
 * pipe or thread): never exits. */
sg_store_server *sg_store_server_start(const char *addr, int port, const sg_store_server_opts *o);
int sg_store_server_port(const sg_store_server *s); /* the port it listens on */
/* The address the server listens on (dotted quad). */
const char *sg_store_server_bound(const sg_store_server *s);
/* Stops the thread (waiting at most SG_STORE_STOP_S; past that it is left
 * running and its memory is not freed, after an error) and frees. */
void sg_store_server_stop(sg_store_server *s);

/* Counters for tests and the shutdown summary (read while running). */
typedef struct sg_store_server_stats {
    size_t connections;      /* open now */
    size_t buffered_bytes;   /* input + output buffers now */
    size_t inflight_bytes;   /* reserved for partial requests now */
    size_t peak_buffered;    /* largest buffered_bytes seen */
    size_t dropped_no_token; /* connections without (or with a wrong) token */
    size_t dropped_slow;     /* over SG_STORE_MAX_OUT */
    size_t dropped_bad;      /* malformed or over-limit requests */
    size_t refused_claims;   /* second claims to a rank */
    size_t requests;         /* requests handled (handshakes not counted) */
    size_t largest_value;    /* largest value SET so far, bytes */
} sg_store_server_stats;
void sg_store_server_get_stats(sg_store_server *s, sg_store_server_stats *out);
/* The server rank 0's store handle hosts (NULL on other ranks), for tests. */
struct sg_store;
sg_store_server *sg_store_hosted_server(struct sg_store *s);

#endif
