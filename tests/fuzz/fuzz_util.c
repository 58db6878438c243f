/* fuzz_util.c — scratch files for the fuzz harnesses (fuzz_util.h). */
#include "fuzz_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static void remove_tree(const char *path, int keep_top) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      struct stat sb;
      if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode))
        remove_tree(sub, 0);
      else
        unlink(sub);
    }
    closedir(d);
  }
  if (!keep_top) rmdir(path);
}

static void cleanup(void) {
  if (g_dir[0]) remove_tree(g_dir, 0);
}

const char *td_fuzz_dir(void) {
  if (g_dir[0]) return g_dir;
  struct stat sb;
  const char *base = getenv("TD_FUZZ_SCRATCH"); /* run.sh's, removed by it */
  if (!base) base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : NULL;
  if (!base) base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/td-fuzz-XXXXXX", base);
  if (!mkdtemp(g_dir)) {
    perror("td_fuzz_dir: mkdtemp");
    abort();
  }
  atexit(cleanup);
  return g_dir;
}

void td_fuzz_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", td_fuzz_dir(), name);
}

void td_fuzz_write(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror(path);
    abort();
  }
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) {
      perror(path);
      abort();
    }
    p += w;
    n -= (size_t)w;
  }
  close(fd);
}

void td_fuzz_clear(const char *path) { remove_tree(path, 1); }
