/* A disk whose flush takes as long as asked (bench/slowdisk.py builds and preloads this into the
 * benchmark's private mariadbd with --flush-delay-ms).
 *
 * Every fsync() and fdatasync() returns only after the real call and ORBIT_BENCH_FLUSH_DELAY_US
 * more microseconds, the way a disk without a write cache or a network volume answers a flush.
 * The data is flushed exactly as before; only the caller waits longer. InnoDB's group commit
 * still merges the commits that wait for one flush, as it would on such a disk. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static long delay_ns = -1;

static void wait_as_the_disk(void) {
    if (delay_ns < 0) { /* read once; a benign race: every thread computes the same value */
        const char *us = getenv("ORBIT_BENCH_FLUSH_DELAY_US");
        delay_ns = us ? atol(us) * 1000L : 0;
    }
    if (delay_ns > 0) {
        struct timespec left = {delay_ns / 1000000000L, delay_ns % 1000000000L};
        while (nanosleep(&left, &left) != 0) {
        }
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int r = real(fd);
    wait_as_the_disk();
    return r;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int r = real(fd);
    wait_as_the_disk();
    return r;
}
