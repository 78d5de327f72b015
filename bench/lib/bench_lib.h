/* bench_lib.h -- code every benchmark links (the .c files of bench/lib) */
#ifndef DXL_BENCH_LIB_H
#define DXL_BENCH_LIB_H

#include <jansson.h>

/* dxlb_setup_json -- kernel, cpus, date, fabric, command line and git
 * revision of this run, for a result file's "setup" */
json_t *dxlb_setup_json(int argc, char **argv);

#endif /* DXL_BENCH_LIB_H */
