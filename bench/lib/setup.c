/* setup.c -- what every benchmark's JSON says about the run (bench/lib/) */
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench/lib/bench_lib.h"

json_t *dxlb_setup_json(int argc, char **argv)
{
	json_t *s = json_object();
	struct utsname u;
	uname(&u);
	char host[300];
	snprintf(host, sizeof(host), "%s %s %s", u.sysname, u.release, u.machine);
	json_object_set_new(s, "kernel", json_string(host));
	json_object_set_new(s, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	time_t now = time(NULL);
	char ts[64];
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	json_object_set_new(s, "date", json_string(ts));
	json_object_set_new(s, "fabric", json_string("tcp (loopback)"));
	char cmdline[2048] = "";
	for (int i = 0; i < argc; i++) {
		size_t l = strlen(cmdline);
		snprintf(cmdline + l, sizeof(cmdline) - l, "%s%s", i ? " " : "", argv[i]);
	}
	json_object_set_new(s, "command", json_string(cmdline));
	FILE *g = popen("git rev-parse --short HEAD 2>/dev/null", "r");
	char rev[64] = "";
	if (g) {
		if (fgets(rev, sizeof(rev), g))
			rev[strcspn(rev, "\n")] = '\0';
		pclose(g);
	}
	json_object_set_new(s, "git", json_string(rev));
	return s;
}
