/* runlock.c — one training run per checkpoint folder (see td_runlock.h). */
#include "app/train/td_runlock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/td_fs.h"
#include "parallel/td_mpi.h"
#include "td_log.h"

struct td_runlock {
  char path[TD_STR_MAX + 32];
  pthread_t th;
  int thread; /* the refresh thread runs */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
};

/* The refresher: touch the lock every TD_LOCK_REFRESH_S seconds. */
static void *refresh(void *arg) {
  td_runlock *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += TD_LOCK_REFRESH_S;
    pthread_cond_timedwait(&l->cv, &l->mu, &until);
    if (!l->stop) utimensat(AT_FDCWD, l->path, NULL, 0);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static int is_step_file(const char *name, int *tmp) {
  size_t n = strlen(name);
  if (strncmp(name, "step_", 5) != 0) return 0;
  *tmp = n > 7 && strcmp(name + n - 7, ".h5.tmp") == 0;
  return *tmp || (n > 3 && strcmp(name + n - 3, ".h5") == 0);
}

/* The earlier run's checkpoints in dir: committed step files and `latest`
 * (counted), deleted if del. */
static td_status earlier_run(const char *dir, int del, int *nfiles, char *latest, size_t cap) {
  *nfiles = 0;
  latest[0] = '\0';
  char p[TD_STR_MAX + 300];
  snprintf(p, sizeof p, "%s/latest", dir);
  FILE *f = fopen(p, "r");
  if (f) {
    if (!fgets(latest, (int)cap, f)) latest[0] = '\0';
    latest[strcspn(latest, "\r\n")] = '\0';
    fclose(f);
    if (!latest[0]) snprintf(latest, cap, "(empty)");
    if (del && unlink(p) != 0) TD_FAIL(TD_ERR_IO, "%s: cannot delete: %s", p, strerror(errno));
  }
  DIR *d = opendir(dir);
  if (!d) return TD_OK;
  struct dirent *e;
  td_status st = TD_OK;
  while ((e = readdir(d)) != NULL && st == TD_OK) {
    int tmp = 0;
    if (!is_step_file(e->d_name, &tmp)) continue;
    if (!tmp) ++*nfiles;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (del && unlink(p) != 0)
      st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "%s: cannot delete: %s", p,
                        strerror(errno));
  }
  closedir(d);
  return st;
}

/* Write the lock exclusively: 1 made, 0 held by someone (holder filled). */
static td_status try_lock(const char *path, int *made, char *holder, size_t cap) {
  *made = 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    if (errno != EEXIST) TD_FAIL(TD_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    FILE *f = fopen(path, "r");
    holder[0] = '\0';
    if (f) {
      if (!fgets(holder, (int)cap, f)) holder[0] = '\0';
      holder[strcspn(holder, "\r\n")] = '\0';
      fclose(f);
    }
    return TD_OK;
  }
  char host[256] = "?", line[512];
  gethostname(host, sizeof host - 1);
  const char *job = getenv("SLURM_JOB_ID");
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  int n = snprintf(line, sizeof line, "%s %ld %s %s\n", host, (long)getpid(),
                   job && job[0] ? job : "-", when);
  ssize_t w = write(fd, line, (size_t)n);
  int werr = errno;
  close(fd);
  if (w != n) {
    unlink(path);
    TD_FAIL(TD_ERR_IO, "%s: cannot write: %s", path, strerror(werr));
  }
  *made = 1;
  return TD_OK;
}

/* Whether the holder's lock is stale: why (cap bytes) says why. */
static int stale(const char *path, const char *holder, char *why, size_t cap) {
  char host[256] = "", me[256] = "?", job[128] = "";
  long pid = 0;
  gethostname(me, sizeof me - 1);
  struct stat sb;
  double age = 0.0;
  if (stat(path, &sb) == 0) age = difftime(time(NULL), sb.st_mtime);
  if (sscanf(holder, "%255s %ld %127s", host, &pid, job) < 2) {
    snprintf(why, cap, "it does not name a host and PID");
    return 1;
  }
  const char *myjob = getenv("SLURM_JOB_ID");
  if (myjob && myjob[0] && strcmp(job, myjob) == 0) {
    snprintf(why, cap, "it is this Slurm job's (%s), from before a requeue", myjob);
    return 1;
  }
  if (strcmp(host, me) == 0 && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
    snprintf(why, cap, "PID %ld no longer runs on %s", pid, host);
    return 1;
  }
  if (age > TD_LOCK_STALE_S) {
    snprintf(why, cap, "it was not refreshed for %.0f s (a live run refreshes it every %d s)",
             age, TD_LOCK_REFRESH_S);
    return 1;
  }
  snprintf(why, cap, "refreshed %.0f s ago", age);
  return 0;
}

/* The holder's PID when it runs on this host (0 otherwise). */
static long local_pid(const char *holder) {
  char host[256] = "", me[256] = "?";
  long pid = 0;
  gethostname(me, sizeof me - 1);
  if (sscanf(holder, "%255s %ld", host, &pid) != 2 || strcmp(host, me) != 0) return 0;
  return pid;
}

static td_status claim0(const td_config *c, td_runlock **out) {
  const char *dir = c->checkpoint_dir;
  if (td_mkdir_p(dir, "checkpoint folder") != TD_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", td_error_message());
    td_error_clear();
    TD_FAIL(TD_ERR_DECK, "%s: checkpoint.dir = %s: %s", c->deck_path, dir, msg);
  }
  if (access(dir, W_OK | X_OK) != 0)
    TD_FAIL(TD_ERR_DECK, "%s: checkpoint.dir = %s cannot be written (%s): the checkpoints would "
            "be lost; choose a writable folder (checkpoint.dir or run.out_dir)", c->deck_path,
            dir, strerror(errno));
  td_runlock *l = calloc(1, sizeof *l);
  if (!l) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  snprintf(l->path, sizeof l->path, "%s/trident.lock", dir);
  char holder[512] = "", why[256] = "";
  int made = 0;
  td_status st = try_lock(l->path, &made, holder, sizeof holder);
  if (st == TD_OK && !made && !stale(l->path, holder, why, sizeof why) && local_pid(holder) > 0) {
    /* a job that just ended may still be taking its ranks down (Open MPI
     * sends SIGTERM, then SIGKILL seconds later, after mpiexec returned) */
    long pid = local_pid(holder);
    for (int i = 0; i < TD_LOCK_WAIT_S * 10 && kill((pid_t)pid, 0) == 0; ++i) {
      struct timespec ts = {0, 100000000};
      nanosleep(&ts, NULL);
    }
  }
  if (st == TD_OK && !made) {
    if (stale(l->path, holder, why, sizeof why)) {
      td_warn("%s: taking over a stale lock (%s: %s)", l->path, holder, why);
      unlink(l->path);
      st = try_lock(l->path, &made, holder, sizeof holder);
    }
    if (st == TD_OK && !made)
      st = td_error_set(TD_ERR_DECK, __FILE__, __LINE__, __func__,
                        "%s: checkpoint.dir = %s is in use by another run (host, PID, Slurm job, "
                        "start: %s; %s): wait for it to end, or train into another folder "
                        "(run.name or run.out_dir); a lock not refreshed for %d s is stale and "
                        "taken over", c->deck_path, dir, holder, why, TD_LOCK_STALE_S);
  }
  if (st != TD_OK) {
    free(l);
    return st;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->thread = pthread_create(&l->th, NULL, refresh, l) == 0;
  *out = l;
  if (strcmp(c->checkpoint_resume, "never") == 0) {
    int n = 0;
    char latest[300];
    st = earlier_run(dir, 0, &n, latest, sizeof latest);
    if (st == TD_OK && (n > 0 || latest[0])) {
      if (c->checkpoint_overwrite) {
        st = earlier_run(dir, 1, &n, latest, sizeof latest);
        if (st == TD_OK)
          td_log("trident: checkpoint.overwrite: deleted %d checkpoint%s of an earlier run in %s\n",
                 n, n == 1 ? "" : "s", dir);
      } else {
        st = td_error_set(TD_ERR_DECK, __FILE__, __LINE__, __func__,
                          "%s: checkpoint.resume = never, but %s holds %d checkpoint%s of an "
                          "earlier run (latest: %s); nothing was changed. Resume it "
                          "(checkpoint.resume: auto), train into another folder (run.name or "
                          "run.out_dir), or set checkpoint.overwrite: true to delete them and "
                          "start afresh", c->deck_path, dir, n, n == 1 ? "" : "s",
                          latest[0] ? latest : "none");
      }
    }
  }
  return st;
}

td_status td_runlock_claim(td_app *app, const td_config *c, td_runlock **out) {
  *out = NULL;
  td_status st = TD_OK;
  if (app->rank == 0) st = claim0(c, out);
  st = td_agree(app->world, st);
  if (st != TD_OK) td_runlock_release(out);
  return st;
}

void td_runlock_release(td_runlock **lp) {
  td_runlock *l = lp ? *lp : NULL;
  if (!l) return;
  if (l->thread) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->th, NULL);
  }
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  unlink(l->path);
  free(l);
  *lp = NULL;
}
