/* enospc_preload.c — a test-only LD_PRELOAD library: the disk is full for one
 * file. Every write(), pwrite() or pwrite64() to a file whose path ends with
 * $TD_ENOSPC_FILE fails with ENOSPC; everything else goes through (also the
 * MPI library's own files named after it, such as Open MPI's shared file
 * pointer file); with TD_ENOSPC_THREADS=other, only the writes of threads
 * other than the main one. Used by tests/e2e/fault_enospc.sh where it cannot mount a
 * small file system (not root). Never part of trident. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <unistd.h>

static int full(int fd) {
  const char *match = getenv("TD_ENOSPC_FILE");
  if (!match || !*match) return 0;
  /* TD_ENOSPC_THREADS=other: only threads other than the main one (a
   * background checkpoint writer) find the disk full */
  const char *who = getenv("TD_ENOSPC_THREADS");
  if (who && strcmp(who, "other") == 0 && (pid_t)syscall(SYS_gettid) == getpid()) return 0;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  size_t lm = strlen(match);
  return (size_t)n >= lm && strcmp(path + n - lm, match) == 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
  static ssize_t (*real)(int, const void *, size_t);
  if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  if (count > 0 && full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off) {
  static ssize_t (*real)(int, const void *, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  if (count > 0 && full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t off) {
  static ssize_t (*real)(int, const void *, size_t, off64_t);
  if (!real) real = (ssize_t(*)(int, const void *, size_t, off64_t))dlsym(RTLD_NEXT, "pwrite64");
  if (count > 0 && full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, count, off);
}
