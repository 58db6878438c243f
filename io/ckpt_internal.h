/* ckpt_internal.h — what the checkpoint files (ckpt.c, ckpt_files.c,
 * ckpt_info.c) share; not part of the public interface (io/td_ckpt.h). */
#ifndef TD_CKPT_INTERNAL_H
#define TD_CKPT_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "td_error.h"

#define TD_CKPT_PATH_MAX 4096

/* The splitmix64 finaliser, identical to td_mix64 (common/td_rng.h), inline
 * here because the checksum calls it twice per element. */
static inline uint64_t td_ckpt_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* "(a, b)" for a shape of rank ndim; "()" for a scalar. */
void td_ckpt_shape_text(char *buf, size_t cap, int ndim, const int64_t *d);
/* "step_XXXXXXXX.h5" for step (8 digits, more if needed). */
void td_ckpt_file_name(int64_t step, char *buf, size_t cap);
/* Parse a committed ("step_<digits>.h5", tmp = 0) or temporary
 * ("step_<digits>.h5.tmp", tmp = 1) file name; returns 1 and the step if it
 * is one. */
int td_ckpt_parse_name(const char *name, int tmp, int64_t *step);
/* The largest step of a committed file in dir; 0 if there is none (or dir
 * cannot be read), 1 and *step otherwise. */
int td_ckpt_newest(const char *dir, int64_t *step);

/* Check the root attributes of an open checkpoint: `format` ==
 * "trident-checkpoint", `format_version` == 1, `step` and `tokens_seen`
 * integers >= 0, `saved_grid` 3 integers >= 1. TD_ERR_CKPT naming the file
 * and the attribute otherwise. Collective metadata reads on an MPI-IO file
 * (every rank makes the same calls). */
td_status td_ckpt_check_root(hid_t f, const char *path);

/* mkdir -p. TD_ERR_IO naming the path on failure. */
td_status td_ckpt_mkdir_p(const char *dir);
/* Open path (a file, or a folder if is_dir) and fsync it. TD_ERR_IO. */
td_status td_ckpt_fsync_path(const char *path, int is_dir);
/* Rank-0 part of a commit: rename tmp -> final, fsync dir, write `latest`
 * naming `name` atomically. *renamed says whether the rename happened. */
td_status td_ckpt_publish(const char *dir, const char *tmp, const char *final_,
                          const char *name, int *renamed);
/* Rank-0 part after a commit of `step`: if keep > 0, delete the committed
 * files of smaller steps beyond the newest `keep` (this one counted) and
 * stale .tmp files of other steps; failures are warnings. */
void td_ckpt_prune(const char *dir, int64_t step, int keep);

#endif
