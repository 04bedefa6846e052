/* LD_PRELOAD shim: times every malloc_trim(3) of the processes it is loaded in and appends
 * "UNIX_SECONDS TID MS" to $STALL_TRIM_DIR/PID.log; STALL_TRIM=noop skips the real call.
 *
 *   gcc -O2 -shared -fPIC -o trim_shim.so trim_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int malloc_trim(size_t pad) {
    static int (*real)(size_t) = 0;
    if (!real) real = (int (*)(size_t))dlsym(RTLD_NEXT, "malloc_trim");
    const char *mode = getenv("STALL_TRIM");
    const char *dir = getenv("STALL_TRIM_DIR");
    double wall = seconds(CLOCK_REALTIME), start = seconds(CLOCK_MONOTONIC);
    int result = 0;
    if (!(mode && !strcmp(mode, "noop"))) result = real(pad);
    double took = seconds(CLOCK_MONOTONIC) - start;
    char path[512];
    snprintf(path, sizeof path, "%s/%d.log", dir ? dir : ".", getpid());
    FILE *log = fopen(path, "a");
    if (log) {
        fprintf(log, "%.6f %ld %.3f\n", wall, (long)syscall(SYS_gettid), took * 1e3);
        fclose(log);
    }
    return result;
}
