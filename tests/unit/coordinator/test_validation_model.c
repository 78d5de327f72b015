/* test_validation_model.c -- every interleaving of two transactions that
 * follow the coordinator's one-sided ordering rules, checked for
 * serializability (issue 12, defect 1)
 *
 * A one-sided transaction touches each record with separate RDMA
 * operations: E READs its version, L CASes its lock word and READs its
 * version, V READs its lock word and its version, C writes it back and
 * unlocks it. Each of these is atomic at the primary; between any two of
 * them another transaction may run any of its own. The order of the two
 * operations on one record in L and in V is the coordinator's
 * (coord_lock_order, coord_validate_order in coordinator/coord_internal.h,
 * the arrays lock_phase and validate_phase post by). This test runs a
 * model of the phases with those arrays, explores every interleaving of
 * two transactions step by step (each operation on the shared records is
 * one step; what a transaction computes locally is not), and gives each
 * complete execution's committed transactions to the conflict-graph
 * checker (tests/lib/history.h). With the library's order no execution may
 * be non-serializable; with the other order (the old validate_phase: the
 * version first) the model must find the anomaly -- write skew, a
 * fractured read-only read, a lost update.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/coord_internal.h"
#include "tests/lib/history.h"

#define NKEYS 3
#define NTX 2
#define MAXSTEPS 32

struct spec { /* a transaction: the keys it reads, the keys it writes */
	unsigned reads, writes; /* bit masks over the keys */
};

enum kind { E_READ, L_OP, V_OP, WRITE_BACK, UNLOCK };

struct step {
	enum kind kind;
	int key;
	enum coord_step what; /* L_OP, V_OP: the lock word or the version */
	bool last_of_phase;   /* L, V: the verdict follows (local) */
};

struct prog {
	struct step s[MAXSTEPS];
	int n;
};

struct rec {
	uint64_t version;
	uint64_t lock; /* 0 or the id of the transaction holding it */
};

struct txs { /* one transaction's progress */
	int pc;
	bool done, committed, aborted;
	uint64_t e_ver[NKEYS];
	uint64_t l_ver[NKEYS];
	bool held[NKEYS], lock_failed[NKEYS];
	uint64_t v_ver[NKEYS], v_lock[NKEYS];
};

struct state {
	struct rec r[NKEYS];
	struct txs t[NTX];
};

struct model {
	const struct spec *spec;
	struct prog p[NTX];
	long executions, both_committed, anomalies;
	char first[256];
};

static void build(struct prog *p, const struct spec *sp, const enum coord_step lorder[2],
		  const enum coord_step vorder[2])
{
	p->n = 0;
	/* E: every key read or written (a write reads its record first) */
	for (int k = 0; k < NKEYS; k++)
		if ((sp->reads | sp->writes) >> k & 1)
			p->s[p->n++] = (struct step){.kind = E_READ, .key = k};
	int first_l = p->n;
	for (int k = 0; k < NKEYS; k++)
		if (sp->writes >> k & 1)
			for (int j = 0; j < 2; j++)
				p->s[p->n++] = (struct step){.kind = L_OP, .key = k, .what = lorder[j]};
	if (p->n > first_l)
		p->s[p->n - 1].last_of_phase = true;
	int first_v = p->n;
	for (int k = 0; k < NKEYS; k++)
		if ((sp->reads & ~sp->writes) >> k & 1)
			for (int j = 0; j < 2; j++)
				p->s[p->n++] = (struct step){.kind = V_OP, .key = k, .what = vorder[j]};
	if (p->n > first_v)
		p->s[p->n - 1].last_of_phase = true;
	/* the commit point is local (the log); then C */
	for (int k = 0; k < NKEYS; k++)
		if (sp->writes >> k & 1) {
			p->s[p->n++] = (struct step){.kind = WRITE_BACK, .key = k};
			p->s[p->n++] = (struct step){.kind = UNLOCK, .key = k};
		}
}

static void release(struct state *st, int i)
{
	for (int k = 0; k < NKEYS; k++)
		if (st->t[i].held[k]) {
			st->r[k].lock = 0;
			st->t[i].held[k] = false;
		}
	st->t[i].aborted = st->t[i].done = true;
}

/* the local verdicts after a phase's last operation */
static void verdict(const struct model *m, struct state *st, int i, enum kind phase)
{
	struct txs *x = &st->t[i];
	const struct spec *sp = &m->spec[i];
	bool ok = true;
	for (int k = 0; k < NKEYS; k++) {
		if (phase == L_OP && (sp->writes >> k & 1))
			ok = ok && !x->lock_failed[k] && x->l_ver[k] == x->e_ver[k];
		if (phase == V_OP && ((sp->reads & ~sp->writes) >> k & 1))
			ok = ok && coord_validates(x->e_ver[k], x->v_ver[k], x->v_lock[k]);
	}
	if (!ok) {
		release(st, i);
		return;
	}
	/* V passed (or L passed and nothing is validated): the log, then C */
	bool has_v = (sp->reads & ~sp->writes) != 0;
	if (phase == V_OP || !has_v)
		x->committed = true;
}

/* run transaction i's next step on st */
static void step(const struct model *m, struct state *st, int i)
{
	struct txs *x = &st->t[i];
	const struct step *s = &m->p[i].s[x->pc++];
	uint64_t me = (uint64_t)i + 1;
	struct rec *r = &st->r[s->key];
	switch (s->kind) {
	case E_READ:
		x->e_ver[s->key] = r->version;
		break;
	case L_OP:
		if (s->what == COORD_STEP_LOCK) {
			if (r->lock == 0) {
				r->lock = me;
				x->held[s->key] = true;
			} else {
				x->lock_failed[s->key] = true;
			}
		} else {
			x->l_ver[s->key] = r->version;
		}
		break;
	case V_OP:
		if (s->what == COORD_STEP_LOCK)
			x->v_lock[s->key] = r->lock;
		else
			x->v_ver[s->key] = r->version;
		break;
	case WRITE_BACK:
		r->version = x->l_ver[s->key] + 2;
		break;
	case UNLOCK:
		r->lock = 0;
		x->held[s->key] = false;
		break;
	}
	if (s->last_of_phase)
		verdict(m, st, i, s->kind);
	if (!x->done && x->pc == m->p[i].n)
		x->done = true;
}

static void leaf(struct model *m, const struct state *st)
{
	m->executions++;
	struct dxlt_history *h = dxlt_history_new();
	assert_non_null(h);
	int ncommit = 0;
	for (int i = 0; i < NTX; i++) {
		if (!st->t[i].committed)
			continue;
		ncommit++;
		for (int k = 0; k < NKEYS; k++) {
			if (m->spec[i].reads >> k & 1)
				dxlt_history_read(h, (uint64_t)i + 1, 1, (uint64_t)k, st->t[i].e_ver[k]);
			if (m->spec[i].writes >> k & 1)
				dxlt_history_write(h, (uint64_t)i + 1, 1, (uint64_t)k,
						   st->t[i].l_ver[k] + 2);
		}
	}
	if (ncommit == NTX)
		m->both_committed++;
	char why[256];
	int ret = dxlt_history_check(h, why, sizeof(why), NULL, NULL);
	if (ret != 0) {
		/* 1: a cycle; -1: two committed writers of one version (a lost
		 * update) */
		if (!m->anomalies)
			snprintf(m->first, sizeof(m->first), "%s", why);
		m->anomalies++;
	}
	dxlt_history_free(h);
}

static void explore(struct model *m, const struct state *st)
{
	bool any = false;
	for (int i = 0; i < NTX; i++) {
		if (st->t[i].done)
			continue;
		any = true;
		struct state next = *st;
		step(m, &next, i);
		explore(m, &next);
	}
	if (!any)
		leaf(m, st);
}

static struct model run(const char *name, const struct spec spec[NTX],
			const enum coord_step lorder[2], const enum coord_step vorder[2])
{
	struct model m;
	memset(&m, 0, sizeof(m));
	m.spec = spec;
	for (int i = 0; i < NTX; i++)
		build(&m.p[i], &spec[i], lorder, vorder);
	struct state st;
	memset(&st, 0, sizeof(st));
	explore(&m, &st);
	printf("  %-44s %7ld executions, %6ld with both committed, %5ld anomalies%s%s\n", name,
	       m.executions, m.both_committed, m.anomalies, m.anomalies ? ": " : "", m.first);
	return m;
}

static const enum coord_step LOCK_FIRST[2] = {COORD_STEP_LOCK, COORD_STEP_VERSION};
static const enum coord_step VERSION_FIRST[2] = {COORD_STEP_VERSION, COORD_STEP_LOCK};

#define X 1u
#define Y 2u

/* T1 reads x, writes y; T2 reads y, writes x */
static const struct spec WRITE_SKEW[NTX] = {{.reads = X, .writes = Y}, {.reads = Y, .writes = X}};
/* T1 reads x and y (read-only); T2 writes both */
static const struct spec FRACTURED[NTX] = {{.reads = X | Y}, {.writes = X | Y}};
/* both read x and write it */
static const struct spec LOST_UPDATE[NTX] = {{.reads = X, .writes = X}, {.reads = X, .writes = X}};
/* T1 reads x and writes y, T2 reads x and y and writes x */
static const struct spec MIXED[NTX] = {{.reads = X, .writes = Y}, {.reads = X | Y, .writes = X}};

static const struct {
	const char *name;
	const struct spec *spec;
} CASES[] = {
	{"write skew (r x w y | r y w x)", WRITE_SKEW},
	{"read-only reader of a two-key write", FRACTURED},
	{"lost update (r x w x | r x w x)", LOST_UPDATE},
	{"mixed (r x w y | r x r y w x)", MIXED},
};

/* the library's rules: every interleaving serializable, and the model lets
 * transactions commit (it is not vacuous) */
static void test_library_order_is_serializable(void **state)
{
	(void)state;
	for (unsigned c = 0; c < sizeof(CASES) / sizeof(CASES[0]); c++) {
		struct model m = run(CASES[c].name, CASES[c].spec, coord_lock_order,
				     coord_validate_order);
		if (m.anomalies)
			fail_msg("%s: %ld of %ld interleavings are not serializable with the library's order (first: %s)",
				 CASES[c].name, m.anomalies, m.executions, m.first);
		assert_true(m.executions >= 50);
		assert_true(m.both_committed > 0);
	}
}

/* V reading the version before the lock word (validate_phase before the
 * fix): the model finds write skew and a fractured read */
static void test_version_first_validation_is_not(void **state)
{
	(void)state;
	struct model a = run("V version first: write skew", WRITE_SKEW, LOCK_FIRST, VERSION_FIRST);
	assert_true(a.anomalies > 0);
	assert_non_null(strstr(a.first, "rw"));
	struct model b = run("V version first: read-only reader", FRACTURED, LOCK_FIRST,
			     VERSION_FIRST);
	assert_true(b.anomalies > 0);
	/* the lock phase's own order does not matter there */
	struct model c = run("V version first: lost update", LOST_UPDATE, LOCK_FIRST, VERSION_FIRST);
	assert_int_equal(c.anomalies, 0);
}

/* L reading the version before its CAS: a lost update */
static void test_version_first_lock_is_not(void **state)
{
	(void)state;
	struct model m = run("L version first: lost update", LOST_UPDATE, VERSION_FIRST, LOCK_FIRST);
	assert_true(m.anomalies > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_library_order_is_serializable),
		cmocka_unit_test(test_version_first_validation_is_not),
		cmocka_unit_test(test_version_first_lock_is_not),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
