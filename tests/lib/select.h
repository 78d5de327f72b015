/* select.h -- run a subset of a cmocka group chosen by name patterns */
#ifndef DXLT_SELECT_H
#define DXLT_SELECT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/*
 * dxlt_select_tests -- copy to out (n entries of room) the tests of all[n]
 * whose names match filter: one or more fnmatch(3) patterns separated by
 * commas ("test_ops,test_conflict,test_serial*"). NULL or "" selects all.
 * Returns how many were copied, in their order in all.
 */
size_t dxlt_select_tests(const struct CMUnitTest *all, size_t n,
			 struct CMUnitTest *out, const char *filter);

#endif
