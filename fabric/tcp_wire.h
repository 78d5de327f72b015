/* tcp_wire.h -- the tcp provider's wire format: handshake and frames */
#ifndef DXL_TCP_WIRE_H
#define DXL_TCP_WIRE_H

#include <stdint.h>
#include <string.h>
#include "common/endian.h"

/*
 * One TCP connection per QP. Every integer is little-endian; there is no
 * padding anywhere.
 *
 * Handshake, first thing on the socket. The active side sends
 * TCP_HS_REQ_SIZE (40) bytes + 8 per abandoned connection, the passive side
 * answers TCP_HS_SIZE (20) bytes:
 *
 *   active -> passive                   passive -> active
 *   0  u32 magic   TCP_MAGIC            0  u32 magic   TCP_MAGIC
 *   4  u16 version TCP_VERSION          4  u16 version TCP_VERSION
 *   6  u16 flags   0                    6  u16 status  TCP_HS_OK / _NOENT /
 *   8  u32 node    active's node id                    _VERSION
 *   12 u32 ctx     target ctx index     8  u32 node    passive's node id
 *   16 u32 src_ctx active's ctx index   12 u32 ctx     echo of the target ctx
 *   20 u64 nonce   the active fabric's  16 u32 zero
 *                  random identity (!= 0)
 *   28 u64 conn    this connection's id in that fabric (!= 0)
 *   36 u32 nkill   abandoned connections that follow (<= TCP_HS_MAX_KILL)
 *   40 u64 kill[nkill]  ids (same nonce) of connections to this node that
 *                  the active side has closed
 *
 * Before it answers, the passive side closes every connection of that nonce
 * named in kill[] that it still serves, discarding its unexecuted requests:
 * a request the initiator has given up on (completed FLUSHED or
 * PEER_UNREACHABLE) never executes after a request of a newer connection,
 * even when the old connection's close has not arrived yet.
 *
 * A bad magic closes the connection without an answer. A version or ctx
 * problem is answered with the status (only the first 20 bytes are read
 * when the version is not ours), then the passive side closes.
 *
 * Then both directions carry frames: a TCP_FRAME_SIZE (40 bytes) header,
 * followed by a payload for WRITE, SEND and RESP:
 *
 *   0  u8  op      TCP_OP_READ..TCP_OP_RESP
 *   1  u8  flags   requests: TCP_F_SIGNALED (answer even on success);
 *                  RESP: status (TCP_ST_*)
 *   2  u8  rop     RESP: the op of the request answered; requests: 0
 *   3  u8  zero
 *   4  u32 len     READ: bytes to read (no payload); WRITE/SEND: payload
 *                  bytes; CAS/FAA: 8 (no payload); RESP: payload bytes (the
 *                  READ data or the 8-byte old value on success, else 0)
 *   8  u32 seq     requests: 0, 1, 2, ... per direction (mod 2^32);
 *                  RESP: seq of the request answered
 *   12 u32 rkey    READ/WRITE/CAS/FAA
 *   16 u64 raddr   READ/WRITE/CAS/FAA: remote virtual address
 *   24 u64 cmp_add CAS: compare value; FAA: addend
 *   32 u64 swap    CAS: new value
 *
 * Requests go from the active side to the passive side (READ, WRITE, CAS,
 * FAA, SEND) and from the passive side to the active side (SEND only: RPC
 * replies). The receiver of requests answers, in request order, every READ,
 * CAS and FAA, every SEND/WRITE with TCP_F_SIGNALED, and every request that
 * fails; an unsignalled WRITE/SEND that succeeds gets no answer, so a RESP
 * for seq k also acknowledges every earlier request. After a failed request
 * the receiver answers it, discards everything else it receives and closes
 * the connection once the answer is written (the QP is in error on both
 * sides, as in verbs RC).
 *
 * Everything received is validated: a bad magic, an unknown op, a non-zero
 * reserved byte, a sequence gap, a payload length over the limits (WRITE
 * and READ over TCP_MAX_RDMA, SEND over the receiver's max_msg, RESP data
 * not matching the request) closes the connection with a logged warning.
 */

#define TCP_MAGIC 0x4c584454u /* "TDXL" little-endian */
#define TCP_VERSION 2
#define TCP_HS_SIZE 20     /* the answer; also the request's common prefix */
#define TCP_HS_REQ_SIZE 40 /* the request without its kill list */
#define TCP_HS_MAX_KILL 64
#define TCP_FRAME_SIZE 40

/* largest READ/WRITE payload (hardware RC allows 2 GiB) */
#define TCP_MAX_RDMA (1u << 30)

enum tcp_hs_status {
	TCP_HS_OK = 0,
	TCP_HS_NOENT = 1,   /* no ctx with that index */
	TCP_HS_VERSION = 2, /* protocol version not supported */
};

enum tcp_op {
	TCP_OP_READ = 1,
	TCP_OP_WRITE = 2,
	TCP_OP_CAS = 3,
	TCP_OP_FAA = 4,
	TCP_OP_SEND = 5,
	TCP_OP_RESP = 6,
};

#define TCP_F_SIGNALED 0x01

enum tcp_status {
	TCP_ST_OK = 0,
	TCP_ST_ACCESS = 1, /* bad rkey, bounds, rights, alignment */
	TCP_ST_OPERR = 2,  /* SEND not taken: no buffer in time, too large */
};

struct tcp_frame {
	uint8_t op;
	uint8_t flags; /* or status for RESP */
	uint8_t rop;
	uint8_t zero;
	uint32_t len;
	uint32_t seq;
	uint32_t rkey;
	uint64_t raddr;
	uint64_t cmp_add;
	uint64_t swap;
};

struct tcp_hs {
	uint32_t magic;
	uint16_t version;
	uint16_t status; /* flags in a request */
	uint32_t node;
	uint32_t ctx;
	uint32_t src_ctx;
	/* request only (bytes 20..39) */
	uint64_t nonce;
	uint64_t conn;
	uint32_t nkill;
};

static inline void tcp_frame_encode(const struct tcp_frame *f, uint8_t *p)
{
	p[0] = f->op;
	p[1] = f->flags;
	p[2] = f->rop;
	p[3] = 0;
	dxl_put_le32(p + 4, f->len);
	dxl_put_le32(p + 8, f->seq);
	dxl_put_le32(p + 12, f->rkey);
	dxl_put_le64(p + 16, f->raddr);
	dxl_put_le64(p + 24, f->cmp_add);
	dxl_put_le64(p + 32, f->swap);
}

static inline void tcp_frame_decode(const uint8_t *p, struct tcp_frame *f)
{
	f->op = p[0];
	f->flags = p[1];
	f->rop = p[2];
	f->zero = p[3];
	f->len = dxl_get_le32(p + 4);
	f->seq = dxl_get_le32(p + 8);
	f->rkey = dxl_get_le32(p + 12);
	f->raddr = dxl_get_le64(p + 16);
	f->cmp_add = dxl_get_le64(p + 24);
	f->swap = dxl_get_le64(p + 32);
}

static inline void tcp_hs_encode(const struct tcp_hs *h, uint8_t *p)
{
	dxl_put_le32(p, h->magic);
	dxl_put_le16(p + 4, h->version);
	dxl_put_le16(p + 6, h->status);
	dxl_put_le32(p + 8, h->node);
	dxl_put_le32(p + 12, h->ctx);
	dxl_put_le32(p + 16, h->src_ctx);
}

static inline void tcp_hs_decode(const uint8_t *p, struct tcp_hs *h)
{
	h->magic = dxl_get_le32(p);
	h->version = dxl_get_le16(p + 4);
	h->status = dxl_get_le16(p + 6);
	h->node = dxl_get_le32(p + 8);
	h->ctx = dxl_get_le32(p + 12);
	h->src_ctx = dxl_get_le32(p + 16);
	h->nonce = h->conn = 0;
	h->nkill = 0;
}

/* the request's TCP_HS_REQ_SIZE bytes (the kill list follows, u64 each) */
static inline void tcp_hs_req_encode(const struct tcp_hs *h, uint8_t *p)
{
	tcp_hs_encode(h, p);
	dxl_put_le64(p + 20, h->nonce);
	dxl_put_le64(p + 28, h->conn);
	dxl_put_le32(p + 36, h->nkill);
}

static inline void tcp_hs_req_decode(const uint8_t *p, struct tcp_hs *h)
{
	tcp_hs_decode(p, h);
	h->nonce = dxl_get_le64(p + 20);
	h->conn = dxl_get_le64(p + 28);
	h->nkill = dxl_get_le32(p + 36);
}

#endif /* DXL_TCP_WIRE_H */
