/* An LD_PRELOAD shim that moves a process's wall clock: every reading of
 * CLOCK_REALTIME (clock_gettime, gettimeofday, time) is shifted by
 * CLOCKSHIFT_MS milliseconds (may be negative; unset: 0). The monotonic
 * clocks are left alone. The Redis suites build it with
 *   cc -shared -fPIC -o libclockshift.so clockshift.c -ldl
 * and start a redis-server under it to give one node of a cluster a clock
 * of its own: Redis's TIME, its scripts' reading and its key expiries all
 * come from the wall clock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long shift_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

/* Resolved on first use, since another library's constructor may read
 * the clock before this one's would run. Racing threads store the same
 * values. */
static void clockshift_init(void) {
    if (real_clock_gettime) {
        return;
    }
    const char *ms = getenv("CLOCKSHIFT_MS");
    shift_ns = ms ? atoll(ms) * 1000000LL : 0;
    real_gettimeofday = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + shift_ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    clockshift_init();
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        shift(ts);
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    clockshift_init();
    int rc = real_gettimeofday(tv, tz);
    if (rc == 0) {
        struct timespec ts = {tv->tv_sec, (long)tv->tv_usec * 1000};
        shift(&ts);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clockshift_init();
    real_clock_gettime(CLOCK_REALTIME, &ts);
    shift(&ts);
    if (out) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
