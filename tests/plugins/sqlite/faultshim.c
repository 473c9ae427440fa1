/* Test-only fault injection for SQLite's file I/O (LD_PRELOAD).
 *
 * Counts fdatasync/fsync, pwrite64/pwrite/write and pread64/pread/read calls
 * on file descriptors whose path contains $FAULTSHIM_MATCH, and fails the
 * k-th call of one kind (once, or from then on) with a chosen errno. Driven
 * from Python through ctypes (faultshim_arm and friends). With fake sync on,
 * matched syncs that are not failed return at once, which keeps long error
 * loops fast without changing any error path.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { SYNC = 0, WRITE = 1, READ = 2, KINDS = 3 };

static long counts[KINDS];
static long after_trip[KINDS];
static int armed_kind = -1;
static long armed_k;
static int armed_persistent;
static int armed_errno;
static int tripped;
static int fake_sync;

void faultshim_arm(int kind, long k, int persistent, int err) {
    memset(counts, 0, sizeof counts);
    memset(after_trip, 0, sizeof after_trip);
    armed_kind = kind;
    armed_k = k;
    armed_persistent = persistent;
    armed_errno = err;
    tripped = 0;
}

void faultshim_disarm(void) { armed_kind = -1; }
void faultshim_fake_sync(int on) { fake_sync = on; }
long faultshim_count(int kind) { return counts[kind]; }
long faultshim_after_trip(int kind) { return after_trip[kind]; }
int faultshim_tripped(void) { return tripped; }

static int matches(int fd) {
    static const char *match;
    static int looked;
    char link[64], target[4096];
    ssize_t n;
    if (!looked) { match = getenv("FAULTSHIM_MATCH"); looked = 1; }
    if (match == NULL || fd < 0) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, target, sizeof target - 1);
    if (n < 0) return 0;
    target[n] = 0;
    return strstr(target, match) != NULL;
}

/* 1: fail this call; 0: pass it on; -1: not a matched file. */
static int decide(int kind, int fd) {
    long n;
    if (!matches(fd)) return -1;
    n = ++counts[kind];
    if (tripped) after_trip[kind]++;
    if (armed_kind != kind) return 0;
    if (n == armed_k || (armed_persistent && n > armed_k)) {
        tripped = 1;
        return 1;
    }
    return 0;
}

typedef int (*sync_fn)(int);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

#define REAL(name, type) \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

int fdatasync(int fd) {
    REAL(fdatasync, sync_fn);
    int d = decide(SYNC, fd);
    if (d == 1) { errno = armed_errno; return -1; }
    if (d == 0 && fake_sync) return 0;
    return real_fdatasync(fd);
}

int fsync(int fd) {
    REAL(fsync, sync_fn);
    int d = decide(SYNC, fd);
    if (d == 1) { errno = armed_errno; return -1; }
    if (d == 0 && fake_sync) return 0;
    return real_fsync(fd);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64, pwrite_fn);
    if (decide(WRITE, fd) == 1) { errno = armed_errno; return -1; }
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite, pwrite_fn);
    if (decide(WRITE, fd) == 1) { errno = armed_errno; return -1; }
    return real_pwrite(fd, buf, count, offset);
}

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write, write_fn);
    if (decide(WRITE, fd) == 1) { errno = armed_errno; return -1; }
    return real_write(fd, buf, count);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    REAL(pread64, pread_fn);
    if (decide(READ, fd) == 1) { errno = armed_errno; return -1; }
    return real_pread64(fd, buf, count, offset);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    REAL(pread, pread_fn);
    if (decide(READ, fd) == 1) { errno = armed_errno; return -1; }
    return real_pread(fd, buf, count, offset);
}
