# Makefile -- the one build of dxl (GNU make)
#
#   make            build the library, tools, tests and benchmarks (build/)
#   make test       build and run the whole test suite
#   make test-long  the crash tests with thousands of seeded schedules
#   make test-rdma  the verbs provider under Soft-RoCE in a QEMU guest
#   make bench-rdma the fabric benchmark on verbs and tcp in that guest
#   make asan       build with ASan+UBSan (build/asan) and run the tests
#   make tsan       build with TSan (build/tsan) and run the tests
#   make test-churn-asan  the connection-churn test under ASan (part of test.sh)
#   make bench      build and run the benchmarks (results under results/)
#   make install    install binaries, library and headers (PREFIX, DESTDIR)
#   make clean
#
# Variables: CC, O (build folder), CFLAGS_EXTRA, LDFLAGS_EXTRA, TESTS (a subset of test
# names to run, e.g. TESTS="test_err test_fabric_tcp").

CC      ?= gcc
SHELL   := /bin/bash
PREFIX  ?= /usr/local
DESTDIR ?=
O       ?= build

# Module folders, bottom-up (ARCHITECTURE.md §2). A module calls only those
# before it in this list.
MODULES := common fabric log engine recovery membership replica coordinator

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
	   -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -pthread -fno-omit-frame-pointer $(WARN) \
	   -D_GNU_SOURCE -DTHREADED -Iinclude -I. $(CFLAGS_EXTRA)
ASFLAGS := -g
LDFLAGS += -pthread $(LDFLAGS_EXTRA)
LDLIBS  := -libverbs -lrdmacm -lpmem2 -lzookeeper_mt -linih -ljansson -lisal -lm

LIB_SRCS := $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
LIB_ASM  := $(foreach m,$(MODULES),$(wildcard $(m)/*.S))
LIB_OBJS := $(LIB_SRCS:%.c=$(O)/%.o) $(LIB_ASM:%.S=$(O)/%.o)
LIB      := $(O)/libdxl.a

# Test helpers shared by every test (fixtures, peers)
TLIB_SRCS := $(wildcard tests/lib/*.c)
TLIB_OBJS := $(TLIB_SRCS:%.c=$(O)/%.o)
# One cmocka binary per test_*.c; a test_x.flags file next to it adds link
# flags (e.g. -Wl,--wrap=ibv_post_send for verbs mocks).
TEST_SRCS := $(wildcard tests/unit/*/test_*.c tests/conformance/test_*.c \
		       tests/integration/test_*.c)
TEST_BINS := $(foreach t,$(TEST_SRCS),$(O)/tests/$(basename $(notdir $(t))))

# Programs: one per tools/<name>/ (the dxl CLI, the dxl-replica daemon...)
# and one dxl-bench-<name> per bench/<name>/
TOOL_DIRS  := $(patsubst tools/%/,%,$(sort $(dir $(wildcard tools/*/*.c))))
TOOL_BINS  := $(TOOL_DIRS:%=$(O)/bin/%)
# bench/lib/ is not a benchmark: its objects are linked into every one
BENCH_DIRS := $(filter-out lib,$(patsubst bench/%/,%,$(sort $(dir $(wildcard bench/*/*.c)))))
BENCH_LIB  := $(patsubst %.c,$(O)/%.o,$(wildcard bench/lib/*.c))
BENCH_BINS := $(BENCH_DIRS:%=$(O)/bin/dxl-bench-%)
BINS       := $(TOOL_BINS) $(BENCH_BINS)

.PHONY: all test test-long test-rdma bench-rdma asan tsan bench install clean fuzz \
	test-churn-asan
all: $(LIB) $(BINS) $(TEST_BINS)

$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(O)/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ASFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

define test_rule
$(O)/tests/$(basename $(notdir $(1))): $(O)/$(1:%.c=%.o) $(TLIB_OBJS) $(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$< $(TLIB_OBJS) \
		$$(shell cat $(1:%.c=%.flags) 2>/dev/null) $(LIB) -lcmocka $$(LDLIBS)
endef
$(foreach t,$(TEST_SRCS),$(eval $(call test_rule,$(t))))

define tool_rule
$(O)/bin/$(1): $(patsubst %.c,$(O)/%.o,$(wildcard tools/$(1)/*.c)) $(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(LIB) $$(LDLIBS)
endef
$(foreach t,$(TOOL_DIRS),$(eval $(call tool_rule,$(t))))

define bench_rule
$(O)/bin/dxl-bench-$(1): $(patsubst %.c,$(O)/%.o,$(wildcard bench/$(1)/*.c)) $(BENCH_LIB) $(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(LIB) $$(LDLIBS)
endef
$(foreach b,$(BENCH_DIRS),$(eval $(call bench_rule,$(b))))

test: all
	scripts/run-tests.sh $(O)/tests $(TESTS)

# Real verbs: dxl's binaries in a Soft-RoCE QEMU guest (docs/rdma.md).
# Exit status 77 (with a "SKIPPED: rdma-guest: ..." line) = cannot run here.
# cluster.list needs ZooKeeper: DXL_TEST_ZK, else one started here (the
# guest reaches it through QEMU's 10.0.2.2), else one in the guest.
test-rdma: all
	zkd=$$(mktemp -d /tmp/dxl-zk-rdma.XXXXXX) && \
	export DXL_TEST_ZK=$${DXL_TEST_ZK:-$$(scripts/zk.sh start $$zkd)}; \
	scripts/rdma-guest.sh -q --timeout 580 --env DXL_BUILD=$(O) \
		--list tests/rdma/smoke.list --list tests/rdma/dxl.list \
		--list tests/rdma/fabric.list --list tests/rdma/cluster.list; \
	rc=$$?; scripts/zk.sh stop $$zkd >/dev/null 2>&1; rm -rf $$zkd; exit $$rc

# the fabric benchmark on verbs and tcp in one Soft-RoCE guest: verbs/tcp ratios
bench-rdma: all
	DXL_BUILD=$(O) scripts/rdma-bench.sh --timeout 600

# longer randomized schedules than CI runs (crash tests)
# 3000 log crash schedules (~9 min), a 150-step randomized fault schedule on
# a local cluster (its own throw-away ZooKeeper; ~6 min), and a 200-step
# SmallBank crash schedule (~35 min)
test-long: all
	DXL_CRASH_SEEDS=3000 DXL_TEST_TIMEOUT=3600 scripts/run-tests.sh $(O)/tests test_log_crash
	zkd=$$(mktemp -d /tmp/dxl-zk-long.XXXXXX) && \
	export DXL_TEST_ZK=$$(scripts/zk.sh start $$zkd) && \
	DXL_FAULT_STEPS=$${DXL_FAULT_STEPS:-150} DXL_TEST_FILTER=test_random_faults \
		DXL_TEST_TIMEOUT=1200 scripts/run-tests.sh $(O)/tests test_failover && \
	DXL_TXN_CRASH_STEPS=$${DXL_TXN_CRASH_STEPS:-200} DXL_TEST_TIMEOUT=4800 \
		scripts/run-tests.sh $(O)/tests test_txn_crash; \
	rc=$$?; scripts/zk.sh stop $$zkd >/dev/null 2>&1; rm -rf $$zkd; exit $$rc

# sanitizer builds add their flags through CFLAGS_EXTRA/LDFLAGS_EXTRA: a
# CFLAGS= on the sub-make's command line would drop the include paths
asan:
	$(MAKE) O=build/asan CFLAGS_EXTRA="-O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
		LDFLAGS_EXTRA="-fsanitize=address,undefined" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		DXL_TEST_SANITIZER=asan scripts/run-tests.sh build/asan/tests $(TESTS)

# the connection-churn test (tests/unit/fabric/test_conn_churn.c) under
# ASan+UBSan, built from common/ and fabric/ alone (about a minute on 2 cores
# instead of the whole tree): a freed passive QP or receive buffer used again
# shows here. scripts/test.sh runs it.
CHURN_SRCS := $(wildcard common/*.c fabric/*.c fabric/*.S) tests/lib/fabric_fixture.c \
	      tests/lib/peer.c tests/unit/fabric/test_conn_churn.c
test-churn-asan:
	@mkdir -p build/asan-churn
	$(CC) -std=gnu11 -pthread -g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE -DTHREADED \
		-Iinclude -I. -fsanitize=address,undefined -fno-sanitize-recover=undefined \
		-o build/asan-churn/test_conn_churn $(CHURN_SRCS) -lcmocka $(LDLIBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		DXL_TEST_SANITIZER=asan scripts/run-tests.sh build/asan-churn test_conn_churn

tsan:
	$(MAKE) O=build/tsan CFLAGS_EXTRA="-O1 -fsanitize=thread" LDFLAGS_EXTRA="-fsanitize=thread" all
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
		DXL_TEST_SANITIZER=tsan scripts/run-tests.sh build/tsan/tests $(TESTS)

bench: all
	scripts/run-bench.sh $(O)/bin

# libFuzzer targets for the parsers (tests/fuzz/README); FUZZ_SECONDS each
FUZZ_SECONDS ?= 20
FUZZ_TARGETS := record superblock head writeset
FUZZ_SRCS := common/err.c common/log.c common/util.c log/record.c log/region.c \
	     log/ring.c engine/writeset.c tests/lib/parser_checks.c
fuzz:
	@mkdir -p build/fuzz
	$(CC) $(CFLAGS) -o build/fuzz/gen_seeds tests/fuzz/gen_seeds.c $(FUZZ_SRCS) $(LDLIBS)
	build/fuzz/gen_seeds build/fuzz/seeds
	set -e; for t in $(FUZZ_TARGETS); do \
		clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
			-std=gnu11 -D_GNU_SOURCE -Iinclude -I. -o build/fuzz/fuzz_$$t \
			tests/fuzz/fuzz_$$t.c $(FUZZ_SRCS) -lisal -lpmem2; \
		mkdir -p build/fuzz/corpus/$$t; \
		build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 \
			-artifact_prefix=build/fuzz/crash-$$t- build/fuzz/corpus/$$t \
			build/fuzz/seeds/$$t tests/fuzz/corpus/$$t 2>&1 | tail -3; \
		test $${PIPESTATUS[0]} -eq 0 || { echo "fuzz_$$t found a crash: see build/fuzz/crash-$$t-*"; exit 1; }; \
	done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib \
		$(DESTDIR)$(PREFIX)/include/dxl
	$(if $(BINS),install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/)
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/dxl/*.h $(DESTDIR)$(PREFIX)/include/dxl/

clean:
	rm -rf build

-include $(shell find $(O) -name '*.d' 2>/dev/null)
