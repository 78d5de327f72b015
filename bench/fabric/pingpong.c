/* pingpong.c -- the floor: the faster of a blocking and a busy-polling TCP
 * ping-pong of one payload over the same path */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/fabric/bench_fabric.h"
#include "common/common.h"

struct pp_one {
	uint64_t p50, p99, p999, samples;
	double mean, ops_per_s;
};

/*
 * One connection with TCP_NODELAY on both ends; the client writes `size`
 * bytes with a blocking send() and reads the echo, for pp_ms after a
 * warm-up. spin = 0: both ends sleep in recv() until the bytes are there
 * (each round trip pays the wake-up of an idle CPU twice); spin = 1: both
 * ends busy-poll (recv(MSG_DONTWAIT) in a loop, bf_read_full_spin), as
 * dxl's own tcp provider and client do. One sample = one round trip.
 */
static int pp_measure(const struct bf_opts *o, const char *ctl_addr, uint32_t size, int spin,
		      uint8_t *out, uint8_t *in, struct dxl_hist *h, struct pp_one *r,
		      uint64_t *verify_errors, char *note, size_t notecap)
{
	char err[256], line[64];
	int rc = -1;
	dxl_hist_reset(h);
	int fd = bf_tcp_connect(ctl_addr, 10000, err, sizeof(err));
	if (fd < 0) {
		snprintf(note, notecap, "%.150s", err);
		return -1;
	}
	snprintf(line, sizeof(line), "ECHO %u%s\n", size, spin ? " SPIN" : "");
	if (bf_write_full(fd, line, strlen(line)) ||
	    bf_read_line(fd, line, sizeof(line)) || strcmp(line, "OK") != 0) {
		snprintf(note, notecap, "echo service refused%s", spin ? " (busy-polling)" : "");
		goto done;
	}
	bf_pattern_fill(o->seed ^ size, 0, out, size);
	uint64_t warm_end = dxl_now_ns() + (uint64_t)o->warmup_ms * 1000000ull;
	uint64_t end = 0, n = 0, begin = 0;
	for (;;) {
		uint64_t t0 = dxl_now_ns();
		if (!end && t0 >= warm_end) {
			begin = t0;
			end = t0 + (uint64_t)o->pp_ms * 1000000ull;
		}
		if (end && t0 >= end)
			break;
		memcpy(out, &n, DXL_MIN(size, (uint32_t)sizeof(n)));
		if (bf_write_full(fd, out, size) ||
		    (spin ? bf_read_full_spin(fd, in, size) : bf_read_full(fd, in, size))) {
			snprintf(note, notecap, "echo connection broke");
			goto done;
		}
		uint64_t t1 = dxl_now_ns();
		if (end)
			dxl_hist_record(h, t1 - t0);
		if ((n++ % 16) == 0 && memcmp(in, out, size) != 0)
			(*verify_errors)++;
	}
	double secs = (double)(dxl_now_ns() - begin) / 1e9;
	r->p50 = dxl_hist_pct(h, 50);
	r->p99 = dxl_hist_pct(h, 99);
	r->p999 = dxl_hist_pct(h, 99.9);
	r->mean = dxl_hist_mean(h);
	r->samples = h->count;
	r->ops_per_s = secs > 0 ? (double)h->count / secs : 0;
	rc = 0;
done:
	close(fd);
	return rc;
}

/*
 * bf_pingpong -- run `run` of the floor for one size: a blocking and a
 * busy-polling ping-pong (in that order on even runs, the other way round
 * on odd ones), and keep the faster (lower p50) as the run's figures. The
 * floor (floor_p50_ns) is the lowest p50 over the runs: the best the medium
 * does, whichever way its ends wait.
 */
int bf_pingpong(const struct bf_opts *o, const char *ctl_addr, uint32_t size,
		struct bf_pp *pp, int run)
{
	uint8_t *out = malloc(size), *in = malloc(size);
	struct dxl_hist *h = malloc(sizeof(*h));
	int rc = -1;
	pp->size = size;
	if (!out || !in || !h) {
		snprintf(pp->note, sizeof(pp->note), "out of memory");
		goto done;
	}
	struct pp_one m[2]; /* [0] blocking, [1] busy-polling */
	int ok[2];
	memset(m, 0, sizeof(m));
	for (int k = 0; k < 2; k++) {
		int spin = (run % 2) ? 1 - k : k;
		ok[spin] = pp_measure(o, ctl_addr, size, spin, out, in, h, &m[spin],
				      &pp->verify_errors, pp->note, sizeof(pp->note)) == 0 &&
			   m[spin].p50 > 0;
	}
	if (!ok[0] && !ok[1])
		goto done;
	int best = !ok[0] ? 1 : !ok[1] ? 0 : m[1].p50 < m[0].p50 ? 1 : 0;
	pp->p50_block_ns[run] = ok[0] ? m[0].p50 : 0;
	pp->p50_spin_ns[run] = ok[1] ? m[1].p50 : 0;
	pp->spin_won[run] = best == 1;
	pp->p50_ns[run] = m[best].p50;
	pp->p99_ns[run] = m[best].p99;
	pp->p999_ns[run] = m[best].p999;
	pp->mean_ns[run] = m[best].mean;
	pp->samples[run] = m[best].samples;
	pp->ops_per_s[run] = m[best].ops_per_s;
	if (run + 1 > pp->runs)
		pp->runs = run + 1;
	pp->floor_p50_ns = 0;
	for (int i = 0; i < pp->runs; i++)
		if (pp->p50_ns[i] &&
		    (!pp->floor_p50_ns || pp->p50_ns[i] < pp->floor_p50_ns))
			pp->floor_p50_ns = pp->p50_ns[i];
	rc = 0;
done:
	free(out);
	free(in);
	free(h);
	return rc;
}
