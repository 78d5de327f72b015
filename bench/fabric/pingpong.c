/* pingpong.c -- the floor: blocking TCP ping-pong of one payload over the same path */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/fabric/bench_fabric.h"
#include "common/common.h"

/*
 * One connection with TCP_NODELAY on both ends; the client writes `size`
 * bytes with blocking send() and reads the echo with blocking recv(). One
 * sample = one round trip. This is what a one-sided READ over the tcp
 * provider cannot beat: the provider moves at least the same bytes through
 * the same kernel path, plus its own headers and threads.
 */
int bf_pingpong(const struct bf_opts *o, const char *ctl_addr, uint32_t size,
		struct bf_pp *pp, int run)
{
	char err[256], line[64];
	uint8_t *out = malloc(size), *in = malloc(size);
	struct dxl_hist *h = malloc(sizeof(*h));
	int fd = -1, rc = -1;
	pp->size = size;
	if (!out || !in || !h) {
		snprintf(pp->note, sizeof(pp->note), "out of memory");
		goto done;
	}
	dxl_hist_reset(h);
	fd = bf_tcp_connect(ctl_addr, 10000, err, sizeof(err));
	if (fd < 0) {
		snprintf(pp->note, sizeof(pp->note), "%.150s", err);
		goto done;
	}
	snprintf(line, sizeof(line), "ECHO %u\n", size);
	if (bf_write_full(fd, line, strlen(line)) ||
	    bf_read_line(fd, line, sizeof(line)) || strcmp(line, "OK") != 0) {
		snprintf(pp->note, sizeof(pp->note), "echo service refused");
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
		if (bf_write_full(fd, out, size) || bf_read_full(fd, in, size)) {
			snprintf(pp->note, sizeof(pp->note), "echo connection broke");
			goto done;
		}
		uint64_t t1 = dxl_now_ns();
		if (end)
			dxl_hist_record(h, t1 - t0);
		if ((n++ % 16) == 0 && memcmp(in, out, size) != 0)
			pp->verify_errors++;
	}
	double secs = (double)(dxl_now_ns() - begin) / 1e9;
	pp->p50_ns[run] = dxl_hist_pct(h, 50);
	pp->p99_ns[run] = dxl_hist_pct(h, 99);
	pp->p999_ns[run] = dxl_hist_pct(h, 99.9);
	pp->mean_ns[run] = dxl_hist_mean(h);
	pp->samples[run] = h->count;
	pp->ops_per_s[run] = secs > 0 ? (double)h->count / secs : 0;
	if (run + 1 > pp->runs)
		pp->runs = run + 1;
	pp->floor_p50_ns = 0;
	for (int i = 0; i < pp->runs; i++)
		if (pp->p50_ns[i] &&
		    (!pp->floor_p50_ns || pp->p50_ns[i] < pp->floor_p50_ns))
			pp->floor_p50_ns = pp->p50_ns[i];
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	free(out);
	free(in);
	free(h);
	return rc;
}
