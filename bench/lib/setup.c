/* setup.c -- what every benchmark's JSON says about the run (bench/lib/) */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench/lib/bench_lib.h"
#include "common/version.h"

json_t *dxlb_loadavg_json(void)
{
	double l[3] = {0, 0, 0};
	json_t *a = json_array();
	if (getloadavg(l, 3) != 3)
		return a;
	for (int i = 0; i < 3; i++)
		json_array_append_new(a, json_real(l[i]));
	return a;
}

static json_t *now_json(void)
{
	time_t now = time(NULL);
	char ts[64];
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	return json_string(ts);
}

/* the first "model name" of /proc/cpuinfo */
static json_t *cpu_model(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	json_t *m = NULL;
	while (f && !m && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10))
			continue;
		char *c = strchr(line, ':');
		if (!c)
			continue;
		c++;
		while (*c == ' ' || *c == '\t')
			c++;
		c[strcspn(c, "\n")] = 0;
		m = json_string(c);
	}
	if (f)
		fclose(f);
	return m ? m : json_null();
}

json_t *dxlb_setup_json(int argc, char **argv)
{
	json_t *s = json_object();
	struct utsname u;
	uname(&u);
	char buf[300];
	snprintf(buf, sizeof(buf), "%s %s %s", u.sysname, u.release, u.machine);
	json_object_set_new(s, "kernel", json_string(buf));
	json_object_set_new(s, "host", json_string(u.nodename));
	json_object_set_new(s, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_set_new(s, "cpu_model", cpu_model());
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0)
		json_object_set_new(s, "mem_gib",
				    json_real((double)pages * (double)psz / (1024.0 * 1024 * 1024)));
	json_object_set_new(s, "date", now_json());
	char cmdline[2048] = "";
	for (int i = 0; i < argc; i++) {
		size_t l = strlen(cmdline);
		snprintf(cmdline + l, sizeof(cmdline) - l, "%s%s", i ? " " : "", argv[i]);
	}
	json_object_set_new(s, "command", json_string(cmdline));
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		json_object_set_new(s, "binary", json_string(self));
	}
	/* the build of this binary, not of whatever tree the cwd is in */
	json_object_set_new(s, "build", json_string(dxl_build_git));
	json_object_set_new(s, "loadavg_start", dxlb_loadavg_json());
	return s;
}

void dxlb_setup_end(json_t *setup)
{
	if (!setup)
		return;
	json_object_set_new(setup, "loadavg_end", dxlb_loadavg_json());
	json_object_set_new(setup, "date_end", now_json());
}

/* the next space-separated field of *p (mountinfo escapes spaces as \040) */
static char *field(char **p)
{
	char *s = *p;
	while (*s == ' ')
		s++;
	if (!*s)
		return NULL;
	char *e = s + strcspn(s, " \n");
	if (*e)
		*e++ = 0;
	*p = e;
	return s;
}

json_t *dxlb_fs_json(const char *path)
{
	json_t *o = json_object();
	json_object_set_new(o, "path", json_string(path));
	char real[PATH_MAX];
	if (!realpath(path, real)) {
		json_object_set_new(o, "error", json_string("no such path"));
		return o;
	}
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f) {
		json_object_set_new(o, "error", json_string("no /proc/self/mountinfo"));
		return o;
	}
	char line[4096], best_mnt[PATH_MAX] = "", best_fs[64] = "", best_src[PATH_MAX] = "";
	size_t best = 0;
	while (fgets(line, sizeof(line), f)) {
		/* id parent major:minor root mountpoint options [optional...] - fstype source superopts */
		char *p = line, *fld[5];
		int k;
		for (k = 0; k < 5; k++)
			if (!(fld[k] = field(&p)))
				break;
		if (k < 5)
			continue;
		char *mnt = fld[4];
		char *dash = strstr(p, " - ");
		if (!dash && strncmp(p, "- ", 2))
			continue;
		char *q = dash ? dash + 3 : p + 2, *fstype = field(&q), *src = field(&q);
		if (!fstype)
			continue;
		size_t ml = strlen(mnt);
		bool under = !strcmp(mnt, "/") ||
			     (!strncmp(real, mnt, ml) && (real[ml] == '/' || real[ml] == 0));
		if (under && (ml >= best || !best)) {
			best = ml;
			snprintf(best_mnt, sizeof(best_mnt), "%s", mnt);
			snprintf(best_fs, sizeof(best_fs), "%s", fstype);
			snprintf(best_src, sizeof(best_src), "%s", src ? src : "");
		}
	}
	fclose(f);
	if (!best_fs[0]) {
		json_object_set_new(o, "error", json_string("no mount found"));
		return o;
	}
	json_object_set_new(o, "fstype", json_string(best_fs));
	json_object_set_new(o, "mount", json_string(best_mnt));
	json_object_set_new(o, "source", json_string(best_src));
	return o;
}
