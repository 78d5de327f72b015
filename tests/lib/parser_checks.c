/* parser_checks.c -- parser properties checked by fuzzing and by regression replay */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/log.h"
#include "log/log_internal.h"
#include "tests/lib/parser_checks.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "parser property violated: %s (%s:%d)\n", \
				#cond, __FILE__, __LINE__);                  \
			abort();                                             \
		}                                                            \
	} while (0)

void dxl_check_record_parser(const uint8_t *data, size_t size)
{
	struct dxl_rec r;
	if (dxl_rec_decode(data, size, &r) != 0)
		return;
	CHECK(r.total_len >= DXL_REC_MIN_SIZE && r.total_len <= size);
	CHECK(r.total_len % 64 == 0);
	/* a reader sizing its fetch from the header gets the same length */
	CHECK(dxl_rec_peek_size(data, size) == r.total_len);
	if (r.type == DXL_REC_SKIP) {
		CHECK(r.payload == NULL && r.payload_len == 0 && r.nparts == 0);
		uint8_t *buf = malloc(r.total_len);
		CHECK(dxl_rec_encode_skip_inc(r.writer, r.epoch, r.incarnation,
					      r.seq, r.total_len, buf,
					      r.total_len) == (int)r.total_len);
		CHECK(memcmp(buf, data, r.total_len) == 0);
		free(buf);
		return;
	}
	CHECK(r.type == DXL_REC_DATA);
	CHECK(r.total_len == dxl_rec_size(r.nparts, r.payload_len));
	const uint8_t *p = r.payload;
	CHECK(p >= data && p + r.payload_len <= data + r.total_len);
	/* re-encoding the decoded record gives back the same record; the
	 * padding is not covered by the checksum, so compare what is */
	uint32_t *parts = malloc(sizeof(uint32_t) * (r.nparts ? r.nparts : 1));
	for (unsigned i = 0; i < r.nparts; i++)
		parts[i] = dxl_rec_part(&r, i);
	uint8_t *buf = malloc(r.total_len);
	CHECK(dxl_rec_encode(&r, parts, buf, r.total_len) == (int)r.total_len);
	size_t body = DXL_REC_HDR_SIZE + 4u * r.nparts + r.payload_len;
	CHECK(memcmp(buf, data, body) == 0);
	CHECK(memcmp(buf + r.total_len - DXL_REC_TRL_SIZE,
		     data + r.total_len - DXL_REC_TRL_SIZE, DXL_REC_TRL_SIZE) == 0);
	free(buf);
	free(parts);
}

void dxl_check_superblock_parser(const uint8_t *data, size_t size)
{
	enum dxl_durability mode;
	struct dxl_region_id id;
	uint64_t data_size, file_size;
	if (dxl_region_sb_decode(data, size, "fuzz", &mode, &id, &data_size,
				 &file_size) != 0)
		return;
	CHECK(size >= DXL_REGION_HDR_SIZE);
	CHECK((unsigned)mode <= DXL_DUR_PROCESS);
	CHECK(memchr(id.cluster, '\0', sizeof(id.cluster)) != NULL);
	CHECK(file_size == DXL_REGION_HDR_SIZE + data_size);
}

void dxl_check_head_parser(const uint8_t *data, size_t size)
{
	/* the input is (a prefix of) a control block: head slots, owner,
	 * watermark, incarnation slots */
	uint8_t ctl[DXL_RING_CTL_READ] = {0};
	memcpy(ctl, data, size < sizeof(ctl) ? size : sizeof(ctl));
	uint32_t inc = dxl_ring_inc_decode(ctl);
	if (inc) { /* one slot says so, its check word agreeing */
		int found = 0;
		for (int i = 0; i < 2; i++) {
			const uint8_t *sl = ctl + DXL_RING_INC_OFF + i * DXL_RING_INC_SLOT;
			uint8_t want[16];
			dxl_ring_inc_encode(want, inc);
			found |= memcmp(sl, want, 16) == 0;
		}
		CHECK(found);
	}
	struct dxl_ring_head h, d;
	int ret = dxl_ring_head_decode(ctl, &h);
	CHECK((ret == 0) == (dxl_ring_head_decode_durable(ctl, &d) == 0));
	if (ret != 0)
		return;
	CHECK(h.gen != 0);
	/* the durable head is never newer than the newest */
	CHECK(d.gen != 0 && d.gen <= h.gen);
}

/* a write set (engine/writeset.c): a payload that decodes re-encodes to
 * exactly the same bytes, and every decoded entry is within the limits */
void dxl_check_writeset_parser(const uint8_t *data, size_t size)
{
	int n = dxl_writeset_decode(data, size, NULL, 0);
	if (n < 0)
		return;
	CHECK(n > 0);
	struct dxl_ws_entry *e = calloc((size_t)n, sizeof(*e));
	CHECK(e != NULL);
	CHECK(dxl_writeset_decode(data, size, e, (uint32_t)n) == n);
	for (int i = 0; i < n; i++) {
		CHECK(e[i].len <= DXL_ENGINE_MAX_VALUE);
		CHECK(e[i].len == 0 || ((const uint8_t *)e[i].value >= data &&
					(const uint8_t *)e[i].value + e[i].len <= data + size));
	}
	uint8_t *buf = malloc(size ? size : 1);
	CHECK(buf != NULL);
	int len = dxl_writeset_encode(e, (uint32_t)n, buf, size);
	CHECK(len >= 0 && (size_t)len <= size);
	CHECK(memcmp(buf, data, (size_t)len) == 0);
	free(buf);
	free(e);
}
