/* endian.h -- little-endian loads and stores for on-disk and on-wire formats */
#ifndef DXL_ENDIAN_H
#define DXL_ENDIAN_H

#include <stdint.h>

/*
 * Every persistent or transmitted integer in dxl is little-endian, written
 * and read byte by byte, so formats do not depend on the host's byte order
 * or on alignment. Compilers turn these into single loads/stores on x86-64.
 */

static inline void dxl_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void dxl_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void dxl_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t dxl_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t dxl_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t dxl_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif /* DXL_ENDIAN_H */
