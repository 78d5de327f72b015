/* gen_seeds.c -- write valid records, superblocks and head slots as fuzzing seeds
 * Usage: gen_seeds DIR   (creates DIR/record, DIR/superblock, DIR/head) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/log.h"

static void put(const char *dir, const char *sub, int i, const void *b, size_t n)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", dir, sub);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/%s/seed-%02d", dir, sub, i);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(b, 1, n, f) != n) {
		perror(p);
		exit(1);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds DIR\n");
		return 2;
	}
	mkdir(argv[1], 0755);
	static uint8_t buf[8192];
	const uint32_t parts[] = {1, 2, 3};
	const uint32_t lens[] = {0, 1, 100, 200, 1000};
	for (int i = 0; i < 5; i++) {
		uint8_t payload[1000];
		memset(payload, 'a' + i, sizeof(payload));
		struct dxl_rec r = {.type = DXL_REC_DATA, .writer = (uint32_t)i,
				    .epoch = 3, .seq = (uint64_t)i + 1,
				    .txn_id = 77, .commit_ts = 123456789,
				    .incarnation = (uint32_t)i + 1,
				    .nparts = (uint16_t)(i % 4), .payload = payload,
				    .payload_len = lens[i]};
		int n = dxl_rec_encode(&r, parts, buf, sizeof(buf));
		put(argv[1], "record", i, buf, (size_t)n);
	}
	int n = dxl_rec_encode_skip(1, 1, 9, 192, buf, sizeof(buf));
	put(argv[1], "record", 5, buf, (size_t)n);
	n = dxl_rec_encode_skip_inc(1, 1, 7, 10, 256, buf, sizeof(buf));
	put(argv[1], "record", 6, buf, (size_t)n);

	/* a superblock: create a tiny region and copy its first 4 KiB */
	char path[1024];
	snprintf(path, sizeof(path), "%s/sb-region", argv[1]);
	remove(path);
	struct dxl_region_id id = {.cluster = "fuzz", .node_id = 1, .kind = 1};
	struct dxl_region *reg;
	if (dxl_region_create(path, 4096, DXL_DUR_PROCESS, &id, &reg) != 0) {
		fprintf(stderr, "gen_seeds: %s\n", dxl_errmsg());
		return 1;
	}
	FILE *f = fopen(path, "rb");
	size_t got = fread(buf, 1, DXL_REGION_HDR_SIZE, f);
	fclose(f);
	dxl_region_close(&reg);
	remove(path);
	put(argv[1], "superblock", 0, buf, got);

	/* head slots: from a formatted log */
	snprintf(path, sizeof(path), "%s/log-region", argv[1]);
	remove(path);
	id.kind = DXL_REGION_LOG;
	if (dxl_region_create(path, dxl_logstore_bytes(1, 8192), DXL_DUR_PROCESS,
			      &id, &reg) != 0 ||
	    dxl_logstore_format(reg, 0, 1, 8192) != 0) {
		fprintf(stderr, "gen_seeds: %s\n", dxl_errmsg());
		return 1;
	}
	struct dxl_logstore *ls;
	dxl_logstore_open(reg, &ls);
	dxl_logstore_set_head(ls, 0, 128, 3, 99);
	put(argv[1], "head", 0,
	    (uint8_t *)dxl_region_data(reg) + dxl_logstore_ctl_off(ls, 0),
	    2 * DXL_RING_HEAD_SLOT_SIZE);
	/* a control block up to the incarnation slots, one of them written */
	uint8_t *ctl = (uint8_t *)dxl_region_data(reg) + dxl_logstore_ctl_off(ls, 0);
	dxl_ring_inc_encode(ctl + DXL_RING_INC_OFF + DXL_RING_INC_SLOT, 5);
	put(argv[1], "head", 1, ctl, DXL_RING_CTL_READ);
	dxl_logstore_close(&ls);
	dxl_region_close(&reg);
	remove(path);

	/* write sets: one of each op, and a single put */
	static const char v1[] = "balance=100", v2[] = "x";
	struct dxl_ws_entry ws[3] = {
		{.table = 1, .op = DXL_WS_UPDATE, .key = 42, .version = 2, .value = v1,
		 .len = sizeof(v1) - 1},
		{.table = 2, .op = DXL_WS_INSERT, .key = 7, .version = 4, .value = v2, .len = 1},
		{.table = 1, .op = DXL_WS_DELETE, .key = 9, .version = 6},
	};
	static uint8_t wbuf[1024];
	int wl = dxl_writeset_encode(ws, 3, wbuf, sizeof(wbuf));
	if (wl < 0) {
		fprintf(stderr, "gen_seeds: %s\n", dxl_errmsg());
		return 1;
	}
	put(argv[1], "writeset", 0, wbuf, (size_t)wl);
	wl = dxl_writeset_encode(ws, 1, wbuf, sizeof(wbuf));
	if (wl > 0)
		put(argv[1], "writeset", 1, wbuf, (size_t)wl);
	return 0;
}
