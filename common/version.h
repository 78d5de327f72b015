/* version.h -- the build's identity, for programs (tools and benchmarks) */
#ifndef DXL_VERSION_H
#define DXL_VERSION_H

/*
 * dxl_build_git -- `git describe --always --dirty --abbrev=12` of the
 * source tree when this program was built ("unknown" outside a git
 * checkout). Defined in the generated $(O)/gen/version.c, which the
 * Makefile rewrites only when the description changes and links into every
 * program of tools/ and bench/ (not into libdxl.a or the tests, so a
 * change of it relinks a dozen programs, not the test suite). Benchmarks
 * record it with every result: the numbers belong to these binaries.
 */
extern const char dxl_build_git[];

#endif /* DXL_VERSION_H */
