/* ckpt_files.c — the file-system side of checkpoints: names, mkdir -p, fsync,
 * the atomic commit (rename + `latest`), pruning, and resolving
 * checkpoint.resume (td_ckpt.h). Plain POSIX, no MPI: the callers decide
 * which rank does what. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_internal.h"
#include "io/td_ckpt.h"
#include "io/td_fs.h"
#include "td_log.h"

/* ---- names -------------------------------------------------------------------- */

void td_ckpt_file_name(int64_t step, char *buf, size_t cap) {
  snprintf(buf, cap, "step_%08" PRId64 ".h5", step);
}

int td_ckpt_parse_name(const char *name, int tmp, int64_t *step) {
  if (strncmp(name, "step_", 5) != 0) return 0;
  const char *p = name + 5, *q = p;
  while (*q >= '0' && *q <= '9') ++q;
  if (q - p < 8 || q - p > 18) return 0;
  if (strcmp(q, tmp ? ".h5.tmp" : ".h5") != 0) return 0;
  int64_t s = 0;
  for (; p < q; ++p) s = s * 10 + (*p - '0');
  *step = s;
  return 1;
}

/* Steps of the committed (tmp = 0) or temporary (tmp = 1) files in dir, in a
 * new array (free()); *n = -1 if dir cannot be read. */
static int64_t *list_steps(const char *dir, int tmp, int *n) {
  *n = -1;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  int64_t *v = NULL;
  int cnt = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int64_t s;
    if (!td_ckpt_parse_name(e->d_name, tmp, &s)) continue;
    if (cnt == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    v[cnt++] = s;
  }
  closedir(d);
  *n = cnt;
  return v;
}

int td_ckpt_newest(const char *dir, int64_t *step) {
  int n;
  int64_t *v = list_steps(dir, 0, &n);
  int found = 0;
  for (int i = 0; i < n; ++i)
    if (!found || v[i] > *step) {
      *step = v[i];
      found = 1;
    }
  free(v);
  return found;
}

/* ---- mkdir -p, fsync ----------------------------------------------------------------- */

td_status td_mkdir_p(const char *dir, const char *what) {
  char buf[TD_CKPT_PATH_MAX];
  size_t n = strlen(dir);
  TD_REQUIRE(n > 0 && n < sizeof buf, TD_ERR_IO, "%s name is empty or too long: '%s'", what, dir);
  memcpy(buf, dir, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char save = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      TD_FAIL(TD_ERR_IO, "cannot create %s %s: %s", what, buf, strerror(errno));
    buf[i] = save;
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) TD_FAIL(TD_ERR_IO, "%s %s is not a folder", what, dir);
  return TD_OK;
}

td_status td_ckpt_mkdir_p(const char *dir) { return td_mkdir_p(dir, "checkpoint folder"); }

td_status td_ckpt_fsync_path(const char *path, int is_dir) {
  int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0));
  if (fd < 0) TD_FAIL(TD_ERR_IO, "cannot open %s to flush it: %s", path, strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  /* Some file systems refuse fsync on folders (EINVAL): nothing to flush. */
  if (rc != 0 && !(is_dir && (err == EINVAL || err == ENOTSUP)))
    TD_FAIL(TD_ERR_IO, "cannot flush %s to disk: %s", path, strerror(err));
  return TD_OK;
}

/* ---- commit ------------------------------------------------------------------------ */

/* Write <dir>/latest = name + "\n" atomically. */
static td_status write_latest(const char *dir, const char *name) {
  char tmp[TD_CKPT_PATH_MAX], fin[TD_CKPT_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
  snprintf(fin, sizeof fin, "%s/latest", dir);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) TD_FAIL(TD_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  char line[512];
  int len = snprintf(line, sizeof line, "%s\n", name);
  ssize_t wr = write(fd, line, (size_t)len);
  int err = errno;
  if (wr == len && fsync(fd) != 0) {
    err = errno;
    wr = -1;
  }
  close(fd);
  if (wr != len) {
    unlink(tmp);
    TD_FAIL(TD_ERR_IO, "cannot write %s: %s", tmp, strerror(err));
  }
  if (rename(tmp, fin) != 0) {
    err = errno;
    unlink(tmp);
    TD_FAIL(TD_ERR_IO, "cannot rename %s to %s: %s", tmp, fin, strerror(err));
  }
  TD_CHECK(td_ckpt_fsync_path(dir, 1));
  return TD_OK;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

/* Delete <dir>/step_XXXXXXXX.h5 (tmp: .h5.tmp) of `step`; a failure is a
 * warning naming `what`. */
static void remove_step(const char *dir, int64_t step, int tmp, const char *what) {
  char name[64], p[TD_CKPT_PATH_MAX];
  td_ckpt_file_name(step, name, sizeof name);
  snprintf(p, sizeof p, "%s/%s%s", dir, name, tmp ? ".tmp" : "");
  if (unlink(p) != 0 && errno != ENOENT) td_warn("cannot delete %s %s: %s", what, p, strerror(errno));
}

/* Delete committed files older than the newest `keep` (step counted) with a
 * smaller step, and .tmp files of other steps. Failures are warnings: the
 * checkpoint is already committed. */
void td_ckpt_prune(const char *dir, int64_t step, int keep) {
  if (keep <= 0) return;
  int n;
  int64_t *v = list_steps(dir, 0, &n);
  if (n > 0) qsort(v, (size_t)n, sizeof *v, cmp_desc);
  int kept = 1; /* this step */
  for (int i = 0; i < n; ++i) {
    if (v[i] >= step) continue;
    if (kept < keep)
      kept++;
    else
      remove_step(dir, v[i], 0, "old checkpoint");
  }
  free(v);
  v = list_steps(dir, 1, &n);
  for (int i = 0; i < n; ++i)
    if (v[i] != step) remove_step(dir, v[i], 1, "unfinished checkpoint");
  free(v);
}

td_status td_ckpt_publish(const char *dir, const char *tmp, const char *final_,
                          const char *name, int *renamed) {
  *renamed = 0;
  if (rename(tmp, final_) != 0)
    TD_FAIL(TD_ERR_IO, "cannot rename %s to %s: %s", tmp, final_, strerror(errno));
  *renamed = 1;
  TD_CHECK(td_ckpt_fsync_path(dir, 1));
  TD_CHECK(write_latest(dir, name));
  return TD_OK;
}

/* ---- resolve ------------------------------------------------------------------------- */

/* Resolve <dir>/latest. need: a missing `latest` is an error (else *found = 0). */
static td_status resolve_latest(const char *dir, int need, int *found,
                                char *path, size_t cap) {
  char lp[TD_CKPT_PATH_MAX];
  snprintf(lp, sizeof lp, "%s/latest", dir);
  FILE *f = fopen(lp, "r");
  if (!f) {
    if (errno == ENOENT && !need) return TD_OK;
    TD_FAIL(TD_ERR_CKPT, "cannot read %s: %s", lp, strerror(errno));
  }
  char line[TD_CKPT_PATH_MAX] = "";
  char *got = fgets(line, sizeof line, f);
  fclose(f);
  size_t n = got ? strlen(line) : 0;
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
                   line[n - 1] == ' ' || line[n - 1] == '\t'))
    line[--n] = '\0';
  TD_REQUIRE(n > 0, TD_ERR_CKPT, "%s is empty: it should name a checkpoint file", lp);
  int w = line[0] == '/' ? snprintf(path, cap, "%s", line)
                         : snprintf(path, cap, "%s/%s", dir, line);
  TD_REQUIRE(w >= 0 && (size_t)w < cap, TD_ERR_CKPT,
             "%s: the checkpoint path is too long", lp);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    int64_t s;
    char newest[64];
    if (td_ckpt_newest(dir, &s)) {
      td_ckpt_file_name(s, newest, sizeof newest);
      TD_FAIL(TD_ERR_CKPT,
              "%s names %s, which does not exist; the newest committed "
              "checkpoint in %s is %s",
              lp, line, dir, newest);
    }
    TD_FAIL(TD_ERR_CKPT,
            "%s names %s, which does not exist; no other checkpoint is "
            "committed in %s: there is none",
            lp, line, dir);
  }
  *found = 1;
  return TD_OK;
}

td_status td_ckpt_resolve(const char *dir, const char *resume, int *found,
                          char *path, size_t cap) {
  *found = 0;
  if (cap) path[0] = '\0';
  TD_REQUIRE(resume && resume[0], TD_ERR_CKPT,
             "checkpoint.resume is empty: use auto, never or a checkpoint file");
  if (strcmp(resume, "never") == 0) return TD_OK;
  if (strcmp(resume, "auto") == 0) {
    TD_REQUIRE(dir && dir[0], TD_ERR_CKPT,
               "checkpoint.resume is auto but checkpoint.dir is empty");
    TD_CHECK(resolve_latest(dir, 0, found, path, cap));
    return TD_OK;
  }
  struct stat sb;
  if (stat(resume, &sb) != 0)
    TD_FAIL(TD_ERR_CKPT, "checkpoint.resume: %s: %s", resume, strerror(errno));
  if (S_ISDIR(sb.st_mode)) {
    TD_CHECK(resolve_latest(resume, 1, found, path, cap));
    return TD_OK;
  }
  int w = snprintf(path, cap, "%s", resume);
  TD_REQUIRE(w >= 0 && (size_t)w < cap, TD_ERR_CKPT,
             "checkpoint.resume: path too long: %s", resume);
  *found = 1;
  return TD_OK;
}
