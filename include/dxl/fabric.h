/* fabric.h -- dxl's verbs-shaped RDMA API, one face for the tcp and verbs providers */
#ifndef DXL_FABRIC_H
#define DXL_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Objects (all opaque):
 *
 *   struct dxl_fabric  one per process: the provider, this node's listening
 *                      endpoint, the protection domain, every registered
 *                      memory region. For tcp it also runs the "NIC" thread
 *                      that serves one-sided requests of remote peers.
 *   struct dxl_ctx     one per worker thread: a completion queue, a shared
 *                      receive queue, and the thread's queue pairs. Only its
 *                      owner thread may call functions on a ctx or its QPs.
 *                      A ctx has an index (0..DXL_FABRIC_MAX_CTX-1) that
 *                      remote peers name when they connect to it.
 *   struct dxl_qp      a reliable connected queue pair between a local ctx
 *                      and a remote (node, ctx index). The side that called
 *                      dxl_qp_connect() is "active": it may post READ, WRITE,
 *                      CAS, FAA and SEND. The remote side's QP is "passive":
 *                      it appears in the remote ctx when the first message
 *                      arrives (wc.qp of a RECV completion) and may post SEND
 *                      only (RPC replies).
 *   struct dxl_mr      a registered memory region of this process. Its
 *                      lkey names it as a local buffer; its descriptor
 *                      {addr, len, rkey, node} lets peers access it.
 *
 * Ordering (both providers, tested by the conformance suite):
 *  - on one QP, requests execute at the target in posting order and their
 *    completions are delivered in posting order (RC);
 *  - an atomic (CAS/FAA) executes before any later request on the same QP;
 *  - a READ posted after a WRITE on the same QP returns data placed after
 *    the WRITE (read-your-writes), and its completion means the WRITE has
 *    been placed at the target. For a region registered DXL_MR_PERSISTENT it
 *    also means the WRITE is durable (H9, 000 L665-675) as far as placing
 *    makes it so: tcp runs the region's persist function first; verbs only
 *    where the NIC writes into the persistence domain (persistent memory),
 *    not into a file's page cache (that needs the owner's CPU: for the
 *    log, its persister, docs/log.md).
 *  - CAS and FAA are atomic against all other fabric atomics on the same
 *    8-byte word from any QP of any node. They are not atomic against CPU
 *    stores of the target: a word is owned by the NIC or by the CPU, never
 *    both (000 L1426).
 *
 * Hence one-sided write-back of records (engine.h dxl_record_wb_unlock_chain:
 * WRITEs, flush READ, unlock CAS) is tcp-only (dxl_record_wb_onesided_ok);
 * on verbs a record store that is not persistent memory (DXL_DUR_PMEM)
 * registers its records without DXL_MR_REMOTE_WRITE, so that no one-sided
 * write-back can land there without being durable.
 *
 * Errors: every function returns 0 / a count, or a negative DXL_E_* code with
 * dxl_errmsg() saying what failed. Failed remote operations are reported as
 * completions with a status, never by a crash or a hang: a dead or stuck
 * peer turns into DXL_WC_PEER_UNREACHABLE within cfg.timeout_ms.
 *
 * What a failed QP's completions mean (both providers; docs/fabric.md
 * "Failures: what a completion in error means"): the first outstanding
 * request carries the cause, every later one DXL_WC_FLUSHED.
 *  - After a remote error (REM_ACCESS_ERR, REM_OP_ERR first): the failed
 *    request and every FLUSHED one did not execute.
 *  - After a timeout or a lost connection (PEER_UNREACHABLE first): each
 *    request completed PEER_UNREACHABLE or FLUSHED may have executed
 *    before the failure was detected (its outcome is unknown, as with a
 *    peer that dies). It does not execute after the target learns of the
 *    failure, nor after a request the same fabric posts on a QP it
 *    connects afterwards to the same target address -- except a request
 *    still in transit when the initiator gave up, which the target learns
 *    of only when it arrives: on verbs a packet still in the network (its
 *    life is bounded by the network's packet lifetime; none was seen over
 *    rxe's loopback), on tcp none (the target's one NIC thread closes the
 *    abandoned connection, named in the new connection's handshake, before
 *    it reads a request of the new one). A caller retrying on a new QP
 *    must allow for the failed attempt having taken effect; one that also
 *    counts on it never taking effect later does so only on tcp or on a
 *    loopback QP (docs/fabric.md "Failures"); beyond that, epochs
 *    (re-registered regions, new rkeys) fence a stale packet.
 * A request still outstanding when its QP is deleted (dxl_qp_delete) may
 * or may not execute: the QP closes in order (tcp) / disconnects (verbs).
 */

struct dxl_fabric;
struct dxl_ctx;
struct dxl_qp;
struct dxl_mr;

#define DXL_FABRIC_MAX_CTX 64   /* ctx indexes per process */
#define DXL_FABRIC_ADDR_MAX 64  /* "host:port" strings */

enum dxl_fabric_provider {
	DXL_FABRIC_TCP = 0,   /* software one-sided RDMA over TCP */
	DXL_FABRIC_VERBS = 1, /* rdma-core: libibverbs + librdmacm */
};

/* Power-failure model (tcp provider; see docs/fabric.md) */
enum dxl_pf_policy {
	DXL_PF_NONE = 0,   /* every un-flushed line survives */
	DXL_PF_ALL = 1,    /* every un-flushed line is lost */
	DXL_PF_RANDOM = 2, /* each un-flushed line is lost with p=1/2 (seeded) */
};

struct dxl_fabric_cfg {
	enum dxl_fabric_provider provider; /* default DXL_FABRIC_TCP */
	uint32_t node_id;                  /* this node's id; default 0 */
	/* "host:port" to listen on; port 0 picks a free port (see
	 * dxl_fabric_addr). Default "127.0.0.1:0". */
	char listen_addr[DXL_FABRIC_ADDR_MAX];
	uint32_t timeout_ms;   /* dead-peer detection and connect; default 1000 */
	uint32_t sq_depth;     /* send queue slots per QP; default 256 */
	uint32_t cq_depth;     /* completion queue entries per ctx; default 4096 */
	uint32_t srq_depth;    /* receive buffers per ctx; default 512 */
	uint32_t max_inline;   /* largest inline WRITE/SEND payload; default 64 */
	uint32_t max_msg;      /* largest SEND payload; default 65536 */
	uint32_t idle_spin_us; /* spin this long before blocking; default 50 */
	/* verbs only: device name ("" = first), port (default 1), GID index
	 * (-1 = let rdma_cm choose the GID that matches the IP address, which
	 * on RoCE is the IPv4-mapped RoCE v2 GID; else the given index). */
	char device[64];
	uint8_t port;
	int gid_index;
	/* tcp only: the power-failure model. When pf_signal != 0, receiving that
	 * signal arms a simulated power failure with pf_policy and pf_seed
	 * that strikes within the next DXL_PF_STRIKE_WINDOW steps of the NIC
	 * (a step count drawn from pf_seed) or after DXL_PF_IDLE_MS without
	 * any (see dxl_fabric_power_fail_arm). Default 0 (off). The
	 * environment variable DXL_FABRIC_PF="SIG:POLICY[:SEED[:IDLE_MS]]"
	 * (e.g. "USR2:random:42") sets these fields in dxl_fabric_cfg_init.
	 * pf_idle_ms: strike after this long without a step (0 =
	 * DXL_PF_IDLE_MS); a node with slow traffic needs more to be struck
	 * in it. */
	int pf_signal;
	enum dxl_pf_policy pf_policy;
	uint64_t pf_seed;
	uint32_t pf_idle_ms;
};

/* dxl_fabric_cfg_init -- fill cfg with the defaults above (and DXL_FABRIC_PF) */
void dxl_fabric_cfg_init(struct dxl_fabric_cfg *cfg);

struct dxl_config;

/*
 * dxl_fabric_cfg_load -- override cfg's fields from the "fabric.*" keys of a
 * config (see docs/fabric.md for the table): fabric.provider, fabric.listen,
 * fabric.timeout_ms, fabric.sq_depth, fabric.cq_depth, fabric.srq_depth,
 * fabric.max_inline, fabric.max_msg, fabric.idle_spin_us, fabric.device,
 * fabric.port, fabric.gid_index. Absent keys keep cfg's value. Unknown
 * "fabric.*" keys and bad values give DXL_E_CONFIG naming file, line and key;
 * cfg is unchanged on error.
 */
int dxl_fabric_cfg_load(const struct dxl_config *conf, struct dxl_fabric_cfg *cfg);

/*
 * dxl_fabric_cfg_client -- make cfg fit a process that connects out to
 * peers of provider p (a log writer, a coordinator, a tailer): sets
 * cfg->provider = p. With verbs, a loopback listen address (the default
 * "127.0.0.1:0") cannot work -- no RDMA device sits on lo, rdma_cm then
 * fails every connection -- so it becomes "A:0", A being the local address
 * the kernel routes peer ("host:port") from: the interface, hence the RDMA
 * device, that reaches the peer; "0.0.0.0:0" (the first device) when there
 * is no route. A listen address that is not loopback is kept; tcp keeps
 * everything. Errors: DXL_E_INVAL (cfg NULL, or listen address not
 * host:port).
 */
int dxl_fabric_cfg_client(struct dxl_fabric_cfg *cfg, enum dxl_fabric_provider p,
			  const char *peer);

/* "tcp"/"verbs" <-> enum; parse returns DXL_E_INVAL on an unknown name */
const char *dxl_fabric_provider_name(enum dxl_fabric_provider p);
int dxl_fabric_provider_parse(const char *name, enum dxl_fabric_provider *out);

/*
 * dxl_fabric_new -- open the provider and start listening.
 * Errors: DXL_E_INVAL (bad cfg), DXL_E_NODEV (verbs: no RDMA device; the
 * message says "use fabric=tcp"), DXL_E_BUSY (address in use), DXL_E_IO,
 * DXL_E_NOMEM.
 */
int dxl_fabric_new(const struct dxl_fabric_cfg *cfg, struct dxl_fabric **out);

/* dxl_fabric_delete -- close every ctx, QP and MR still open; *f = NULL */
void dxl_fabric_delete(struct dxl_fabric **f);

/* dxl_fabric_addr -- the address peers connect to ("127.0.0.1:41234") */
const char *dxl_fabric_addr(const struct dxl_fabric *f);
uint32_t dxl_fabric_node_id(const struct dxl_fabric *f);
enum dxl_fabric_provider dxl_fabric_provider(const struct dxl_fabric *f);
const struct dxl_fabric_cfg *dxl_fabric_cfg(const struct dxl_fabric *f);

/* ---- memory regions ------------------------------------------------------ */

enum dxl_mr_access {
	DXL_MR_LOCAL_WRITE = 1u << 0,   /* target of local READ results/RECVs */
	DXL_MR_REMOTE_READ = 1u << 1,
	DXL_MR_REMOTE_WRITE = 1u << 2,
	DXL_MR_REMOTE_ATOMIC = 1u << 3, /* CAS/FAA */
	DXL_MR_PERSISTENT = 1u << 4,    /* remote WRITEs follow the power-failure model */
};

/* What a peer needs to access a region; plain data, safe to copy. */
struct dxl_mr_desc {
	uint64_t addr; /* remote virtual address of the first byte */
	uint64_t len;
	uint32_t rkey;
	uint32_t node; /* node id of the owner */
};

#define DXL_MR_DESC_WIRE_SIZE 28 /* encoded size: magic(4)+addr+len+rkey+node */

/*
 * dxl_mr_reg -- register [addr, addr+len) with the given DXL_MR_* flags.
 * Errors: DXL_E_INVAL (NULL/zero length/unknown flag), DXL_E_NOMEM, DXL_E_IO.
 */
int dxl_mr_reg(struct dxl_fabric *f, void *addr, size_t len, unsigned access,
	       struct dxl_mr **out);

/*
 * dxl_mr_dereg -- unregister; from then on remote accesses with its rkey fail
 * with DXL_WC_REM_ACCESS_ERR. *mr = NULL.
 */
void dxl_mr_dereg(struct dxl_mr **mr);

void dxl_mr_desc(const struct dxl_mr *mr, struct dxl_mr_desc *out);
uint32_t dxl_mr_lkey(const struct dxl_mr *mr);
void *dxl_mr_addr(const struct dxl_mr *mr);
size_t dxl_mr_len(const struct dxl_mr *mr);

/* encode to / decode from DXL_MR_DESC_WIRE_SIZE little-endian bytes;
 * decode returns DXL_E_PROTO on a short buffer or a bad magic */
int dxl_mr_desc_encode(const struct dxl_mr_desc *d, void *buf, size_t cap);
int dxl_mr_desc_decode(const void *buf, size_t len, struct dxl_mr_desc *out);

/*
 * dxl_mr_mark_durable -- the target's CPU has persisted [addr, addr+len)
 * of a DXL_MR_PERSISTENT region (e.g. after a cache flush or msync): remote
 * WRITEs already placed there are durable from now on. A no-op for the verbs
 * provider (real hardware) and for non-persistent regions.
 */
void dxl_mr_mark_durable(struct dxl_mr *mr, const void *addr, size_t len);

/*
 * dxl_mr_set_persist_fn -- what makes remote WRITEs into this persistent
 * region durable when the provider flushes them. The tcp provider calls
 * fn(arg, addr, len) for the ranges a QP wrote, when a later READ on that QP
 * executes (H9) and before the READ completes: a region whose durability
 * needs a CPU action (msync of a file mapping) does it there, so "the flush
 * READ completed" means what it says. Default: none (the model only).
 * The verbs provider ignores it: on real persistent memory with DDIO off
 * the NIC's READ is the flush (000 L494-500); a log region in msync mode
 * served over verbs gets the log's persister instead (dxl_persist_needed,
 * include/dxl/log.h). Set it right after
 * dxl_mr_reg, before peers learn the region's descriptor.
 */
typedef void (*dxl_mr_persist_fn)(void *arg, const void *addr, size_t len);
void dxl_mr_set_persist_fn(struct dxl_mr *mr, dxl_mr_persist_fn fn, void *arg);

/* ---- power-failure model (tcp provider) --------------------------------- */

/*
 * dxl_fabric_power_fail -- simulate a power failure of this node: stop
 * serving, then for every 64-byte line of a persistent region that a remote
 * WRITE changed and that is not yet durable, restore its previous content
 * (for the lines the policy selects), and SIGKILL this process. Does not
 * return on success. It is fault-injection for tests and `dxl cluster kill
 * --power-fail`, the one library call that ends the process.
 * Errors: DXL_E_NOTSUP (verbs provider).
 */
int dxl_fabric_power_fail(struct dxl_fabric *f, enum dxl_pf_policy policy,
			  uint64_t seed);

/*
 * dxl_fabric_power_fail_arm -- arm a simulated power failure that strikes
 * in the middle of the NIC's work (tcp provider): once the NIC has executed
 * `steps` more steps, a step being one 64-byte line of a WRITE into a
 * persistent region, or one request (READ, WRITE, atomic, SEND) of a QP
 * that has un-flushed lines (elsewhere a strike would find what the next
 * counted step finds). So it can strike
 * between any two requests of a chain (after a record's WRITE, before its
 * flush READ) or inside a WRITE, where each remaining line of the piece at
 * hand is placed or not by a coin drawn from seed (a NIC's DMA places the
 * lines of a WRITE in any order). If no step comes for idle_ms (counted
 * from the arming, then from each step), it strikes then. Either way: as dxl_fabric_power_fail (the policy picks the
 * un-flushed lines lost; the process is SIGKILLed). Returns 0 once the NIC
 * counts steps (what the caller posts afterwards is counted); the first
 * armed failure stands. With DXL_FABRIC_PF_REPORT=FILE in the environment
 * every power failure appends one line to FILE: "pf node=N policy=P
 * seed=S lost=L pending=U struck=now|idle|between requests|inside
 * write_lines=W placed=K" (W lines of the WRITE it struck in, K of them
 * placed). Errors: DXL_E_NOTSUP (verbs), DXL_E_INVAL, DXL_E_TIMEDOUT (the
 * NIC thread did not take it within 5 s).
 */
#define DXL_PF_STRIKE_WINDOW 64 /* pf_signal: steps drawn below this */
#define DXL_PF_IDLE_MS 20       /* pf_signal: strike after this without steps */
int dxl_fabric_power_fail_arm(struct dxl_fabric *f, enum dxl_pf_policy policy,
			      uint64_t seed, uint32_t steps, uint32_t idle_ms);

/* dxl_fabric_pending_lines -- lines that a power failure could lose now */
size_t dxl_fabric_pending_lines(struct dxl_fabric *f);

/* ---- per-thread context --------------------------------------------------- */

/*
 * dxl_ctx_new -- create the calling thread's context with index idx.
 * Errors: DXL_E_INVAL (idx out of range), DXL_E_EXIST (idx in use),
 * DXL_E_NOMEM, DXL_E_IO.
 */
int dxl_ctx_new(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out);

/* dxl_ctx_delete -- destroy the ctx and all its QPs (active and passive) */
void dxl_ctx_delete(struct dxl_ctx **c);

/*
 * dxl_ctx_qp_count -- the QPs this ctx holds now: active ones, passive ones
 * the user has seen, and passive ones not freed yet (owner thread only).
 * Passive QPs are freed by the provider once they are down if the user
 * never saw them (no RECV named them); a passive QP the user has seen is
 * the user's to delete with dxl_qp_delete once it is DXL_QP_ERR (the RPC
 * layer does). So a ctx that serves reconnecting peers stays bounded.
 */
uint32_t dxl_ctx_qp_count(struct dxl_ctx *c);

uint32_t dxl_ctx_idx(const struct dxl_ctx *c);
struct dxl_fabric *dxl_ctx_fabric(const struct dxl_ctx *c);

/* ---- queue pairs -------------------------------------------------------- */

/*
 * dxl_qp_connect -- connect ctx c to remote ctx `remote_ctx` of the node
 * listening at remote_addr ("host:port"). Blocks at most cfg.timeout_ms.
 * Errors: DXL_E_INVAL (bad address), DXL_E_UNREACHABLE (refused, timed out),
 * DXL_E_NOENT (no ctx with that index at the peer), DXL_E_VERSION,
 * DXL_E_NOMEM, DXL_E_IO.
 */
int dxl_qp_connect(struct dxl_ctx *c, const char *remote_addr,
		   uint32_t remote_ctx, struct dxl_qp **out);

/* dxl_qp_delete -- close the QP (active or passive); *qp = NULL. Completions
 * of its outstanding requests are dropped, except received messages: a
 * receive buffer holding a message for the QP that was not polled yet comes
 * back as a DXL_WC_RECV completion with status DXL_WC_FLUSHED, its wr_id,
 * byte_len 0 and qp NULL (post it again). Passive QPs: the provider frees
 * the ones the user never saw once they are down; the ones a RECV named are
 * the user's to delete (see dxl_ctx_qp_count). */
void dxl_qp_delete(struct dxl_qp **qp);

enum dxl_qp_state {
	DXL_QP_RTS = 0, /* ready */
	DXL_QP_ERR = 1, /* failed: new posts return DXL_E_STATE; reconnect */
};

enum dxl_qp_state dxl_qp_state(const struct dxl_qp *qp);
uint32_t dxl_qp_remote_node(const struct dxl_qp *qp);
/* dxl_qp_ctx -- the ctx the QP belongs to (whose poll reaps its completions) */
struct dxl_ctx *dxl_qp_ctx(const struct dxl_qp *qp);
int dxl_qp_is_passive(const struct dxl_qp *qp);
/* one pointer of the owner's choice, e.g. its per-peer state */
void dxl_qp_set_user(struct dxl_qp *qp, void *user);
void *dxl_qp_user(const struct dxl_qp *qp);

/* ---- work requests ------------------------------------------------------ */

enum dxl_wr_opcode {
	DXL_WR_READ = 0,  /* remote [raddr, +len) -> local buffer */
	DXL_WR_WRITE = 1, /* local buffer -> remote [raddr, +len) */
	DXL_WR_CAS = 2,   /* 8 B at raddr: if == compare then = swap; old -> local */
	DXL_WR_FAA = 3,   /* 8 B at raddr += compare_add; old -> local */
	DXL_WR_SEND = 4,  /* local buffer -> a receive buffer of the remote ctx */
};

enum dxl_wr_flags {
	DXL_WR_SIGNALED = 1u << 0, /* produce a completion on success */
	DXL_WR_INLINE = 1u << 1,   /* copy payload at post (len <= max_inline) */
};

struct dxl_wr {
	uint64_t wr_id;          /* returned in the completion */
	enum dxl_wr_opcode op;
	unsigned flags;          /* DXL_WR_* */
	void *local;             /* local buffer: data to send or place to fill */
	uint32_t len;            /* bytes; 8 for CAS/FAA */
	uint32_t lkey;           /* of the MR holding `local` (ignored if INLINE) */
	uint64_t remote_addr;    /* READ/WRITE/CAS/FAA */
	uint32_t rkey;           /* READ/WRITE/CAS/FAA */
	uint64_t compare_add;    /* CAS: compare value; FAA: addend */
	uint64_t swap;           /* CAS: new value */
	struct dxl_wr *next;     /* chain: posted with one doorbell */
};

/*
 * dxl_qp_post -- post a chain of work requests with one doorbell.
 *
 * The whole chain is accepted, or nothing is (then *bad, if not NULL, points
 * at the first rejected request). Unsignalled requests complete silently;
 * if one fails it still produces an error completion. The provider signals a
 * request by itself at least every sq_depth/2 unsignalled ones (and consumes
 * that completion internally), so unsignalled requests can never overflow
 * the send queue. Local buffers must stay valid until the request is
 * complete (a later signalled completion on the same QP implies it).
 *
 * Errors (nothing posted): DXL_E_INVAL (bad opcode, length, alignment of a
 * local atomic result, inline payload over max_inline, SEND over max_msg, a
 * chain longer than sq_depth: it could never fit),
 * DXL_E_NOTSUP (one-sided op on a passive QP), DXL_E_AGAIN (send queue full:
 * poll and retry), DXL_E_STATE (QP in error).
 */
int dxl_qp_post(struct dxl_qp *qp, struct dxl_wr *chain, struct dxl_wr **bad);

/*
 * dxl_ctx_post_recv -- give the ctx's shared receive queue one buffer; any
 * SEND arriving on any QP of this ctx lands in the oldest posted buffer.
 * Errors: DXL_E_INVAL, DXL_E_AGAIN (srq_depth buffers already posted).
 */
int dxl_ctx_post_recv(struct dxl_ctx *c, void *buf, uint32_t len, uint32_t lkey,
		      uint64_t wr_id);

/* ---- completions -------------------------------------------------------- */

enum dxl_wc_status {
	DXL_WC_SUCCESS = 0,
	DXL_WC_REM_ACCESS_ERR = 1,   /* bad rkey, out of bounds, misaligned atomic,
					missing access right */
	DXL_WC_PEER_UNREACHABLE = 2, /* peer died, disconnected or timed out */
	DXL_WC_LOCAL_ERR = 3,        /* local failure (e.g. RECV buffer too small) */
	DXL_WC_REM_OP_ERR = 4,       /* remote could not take a SEND (too large) */
	DXL_WC_FLUSHED = 5,          /* the QP entered the error state before this
					request completed: not executed after a
					remote error; after a timeout or a lost
					connection, executed before the failure
					or never (see "What a failed QP's
					completions mean" above). A RECV: the
					buffer comes back unused (its QP was
					deleted), qp NULL */
};

enum dxl_wc_opcode {
	DXL_WC_READ = 0,
	DXL_WC_WRITE = 1,
	DXL_WC_CAS = 2,
	DXL_WC_FAA = 3,
	DXL_WC_SEND = 4,
	DXL_WC_RECV = 5,
};

struct dxl_wc {
	uint64_t wr_id;
	enum dxl_wc_status status;
	enum dxl_wc_opcode opcode;
	uint32_t byte_len;   /* RECV: bytes received */
	struct dxl_qp *qp;   /* the QP (RECV: the QP the message came in on) */
};

const char *dxl_wc_status_str(enum dxl_wc_status s);

/*
 * dxl_ctx_poll -- reap up to n completions of this ctx without blocking.
 * Returns the number reaped (0..n) or a negative DXL_E_* code.
 */
int dxl_ctx_poll(struct dxl_ctx *c, struct dxl_wc *wc, int n);

/*
 * dxl_ctx_wait -- wait until a completion may be available, at most
 * timeout_ms (-1 = forever, 0 = check only): spin idle_spin_us, then block
 * without burning a core. Returns 0 (something to poll) or DXL_E_TIMEDOUT.
 */
int dxl_ctx_wait(struct dxl_ctx *c, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* DXL_FABRIC_H */
