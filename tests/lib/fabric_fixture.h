/* fabric_fixture.h -- test helpers for fabric users: cfg from env, patterns, waits */
#ifndef DXLT_FABRIC_FIXTURE_H
#define DXLT_FABRIC_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/fabric.h"

/*
 * Helpers shared by every test that talks over the fabric (conformance, log,
 * replica ...). None of them uses cmocka: they return values or negative
 * DXL_E_* codes and the test asserts. Names start with dxlt_ (dxl test).
 *
 * Environment (read by dxlt_fabric_cfg_from_env and friends):
 *   DXL_TEST_PROVIDER   tcp | verbs            (default tcp)
 *   DXL_TEST_ADDR       host to listen on       (default 127.0.0.1; in the
 *                       Soft-RoCE guest: the guest's eth0 address)
 *   DXL_TEST_DEVICE     verbs device name      (default "" = first)
 *   DXL_TEST_GID_INDEX  verbs GID index        (default -1 = auto)
 *   DXL_TEST_WAIT_MS    budget of one "wait for a completion / a reply"
 *                       in the helpers (default 10000; raise it under
 *                       QEMU TCG or valgrind). Never a timing assertion.
 *   DXL_TEST_ALARM_S    watchdog per test, see dxlt_watchdog_arm
 *                       (default 120)
 *   DXL_TEST_REQUIRE_DEVICE  set: a provider without a device (DXL_E_NODEV)
 *                       fails the tests instead of skipping them (for the
 *                       Soft-RoCE guest, where a missing rxe0 is a bug)
 */

/* dxlt_fabric_cfg_from_env -- dxl_fabric_cfg_init + the DXL_TEST_* values
 * above (provider, listen_addr = "ADDR:0", device, gid_index). An unknown
 * provider name is reported on stderr and falls back to tcp. */
void dxlt_fabric_cfg_from_env(struct dxl_fabric_cfg *cfg);

/* dxlt_test_provider -- the provider DXL_TEST_PROVIDER names (default tcp) */
enum dxl_fabric_provider dxlt_test_provider(void);

/* dxlt_test_host -- DXL_TEST_ADDR or "127.0.0.1" (static string) */
const char *dxlt_test_host(void);

/*
 * dxlt_cluster_args -- the 'dxl cluster up' options that make a cluster run
 * the provider DXL_TEST_PROVIDER names, appended to argv at *n (at most cap
 * entries in all; the strings are static). tcp: none. verbs: --provider
 * verbs, --durability msync (so the log persister serves every replica:
 * docs/log.md), -o fabric.listen=DXL_TEST_ADDR:0 (the RDMA interface) and
 * --session-timeout DXL_TEST_SESSION_MS (default 4000: a ZooKeeper session
 * must outlive the pauses of a guest under software emulation). Append
 * them after the caller's own options: the last --session-timeout wins.
 */
void dxlt_cluster_args(const char **argv, int *n, int cap);

/* dxlt_wait_ms -- DXL_TEST_WAIT_MS or 10000 */
int dxlt_wait_ms(void);

/*
 * dxlt_watchdog_arm -- (re)arm a SIGALRM in `seconds` (0 = DXL_TEST_ALARM_S
 * or 120). When it fires, every live peer of tests/lib/peer.h is SIGKILLed,
 * a line naming `what` is printed and the process exits with status 124, so
 * that a hanging test never leaves processes behind. Call it in each test's
 * setup; dxlt_watchdog_disarm() cancels it.
 */
void dxlt_watchdog_arm(unsigned seconds, const char *what);
void dxlt_watchdog_disarm(void);

/* ---- data patterns ------------------------------------------------------ */

/* dxlt_pattern_byte -- byte `off` of the pseudo-random stream of `seed` */
uint8_t dxlt_pattern_byte(uint64_t seed, uint64_t off);

/* dxlt_pattern_fill -- buf[i] = dxlt_pattern_byte(seed, start + i) */
void dxlt_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t start);

/* dxlt_pattern_check -- -1 if buf matches dxlt_pattern_fill(seed, start),
 * else the offset (in buf) of the first wrong byte */
long dxlt_pattern_check(const void *buf, size_t len, uint64_t seed,
			uint64_t start);

/* ---- memory --------------------------------------------------------------- */

/* dxlt_alloc_pages -- zeroed, page-aligned anonymous mapping; NULL on error */
void *dxlt_alloc_pages(size_t len);
void dxlt_free_pages(void *p, size_t len);

/* ---- completions ---------------------------------------------------------- */

/*
 * dxlt_wait_wc -- poll ctx c until n completions are reaped into wc[] or
 * timeout_ms pass (timeout_ms < 0: dxlt_wait_ms()). Uses dxl_ctx_wait, so it
 * does not burn a core. Returns the number reaped (possibly < n on timeout)
 * or a negative DXL_E_* from dxl_ctx_poll.
 */
int dxlt_wait_wc(struct dxl_ctx *c, struct dxl_wc *wc, int n, int timeout_ms);

/*
 * dxlt_post_wait -- post one request (forced SIGNALED, next = NULL) on qp and
 * wait for its completion (c must be qp's ctx and have no other traffic).
 * Returns the completion status (>= 0, enum dxl_wc_status), a negative
 * DXL_E_* from dxl_qp_post, or DXL_E_TIMEDOUT.
 */
int dxlt_post_wait(struct dxl_ctx *c, struct dxl_qp *qp, struct dxl_wr *wr);

/* convenience wrappers of dxlt_post_wait for one request */
int dxlt_read(struct dxl_ctx *c, struct dxl_qp *qp, void *local, uint32_t lkey,
	      uint64_t raddr, uint32_t rkey, uint32_t len);
int dxlt_write(struct dxl_ctx *c, struct dxl_qp *qp, const void *local,
	       uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len);
/* result: 8-byte aligned, in a region with lkey */
int dxlt_cas(struct dxl_ctx *c, struct dxl_qp *qp, uint64_t *result,
	     uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t compare,
	     uint64_t swap);
int dxlt_faa(struct dxl_ctx *c, struct dxl_qp *qp, uint64_t *result,
	     uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t add);

/*
 * dxlt_free_addr -- an address "host:port" of the test host where nothing
 * listens now: open a fabric with cfg, note its address, close it. Works in
 * any provider's port space. out must hold DXL_FABRIC_ADDR_MAX bytes.
 */
int dxlt_free_addr(const struct dxl_fabric_cfg *cfg, char *out);

#endif /* DXLT_FABRIC_FIXTURE_H */
