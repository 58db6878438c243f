/* ckpt_info.c — `trident ckpt info FILE`: describe a checkpoint and verify
 * every tensor's checksum with serial HDF5 (td_ckpt.h). Reads a tensor a few
 * MiB at a time, so it needs little memory whatever the model size. */
#include <stdlib.h>
#include <string.h>

#include "io/ckpt_internal.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"

#define INFO_BLOCK_ELEMS ((int64_t)1 << 22) /* 16 MiB of float32 per read */

typedef struct {
  char **v;
  int n, cap;
  const char *prefix;
} name_list;

static herr_t collect_cb(hid_t g, const char *name, const H5L_info_t *info, void *data) {
  name_list *l = data;
  if (info->type != H5L_TYPE_HARD) return 0;
  hid_t o = H5Oopen(g, name, H5P_DEFAULT);
  if (o < 0) {
    H5Eclear2(H5E_DEFAULT);
    return 0;
  }
  int is_ds = H5Iget_type(o) == H5I_DATASET;
  H5Oclose(o);
  if (!is_ds) return 0;
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
    if (!nv) return -1;
    l->v = nv;
    l->cap = nc;
  }
  size_t len = strlen(l->prefix) + 1 + strlen(name) + 1;
  char *s = malloc(len);
  if (!s) return -1;
  snprintf(s, len, "%s/%s", l->prefix, name);
  l->v[l->n++] = s;
  return 0;
}

/* Checksum of a whole dataset, read INFO_BLOCK_ELEMS at a time along its
 * first dimension. */
static td_status dataset_checksum(hid_t d, const char *path, const char *dname,
                                  int ndim, const hsize_t *dims, uint64_t *sum) {
  td_status st = TD_OK;
  hid_t fs = -1, ms = -1;
  float *buf = NULL;
  *sum = 0;
  int64_t row = 1; /* elements per index of the first dimension */
  for (int i = 1; i < ndim; ++i) row *= (int64_t)dims[i];
  int64_t n0 = ndim > 0 ? (int64_t)dims[0] : 1;
  if (row == 0 || n0 == 0) return TD_OK;
  int64_t per = INFO_BLOCK_ELEMS / row;
  if (per < 1) per = 1;
  if (per > n0) per = n0;
  TD_CHECK_GOTO(td_alloc((void **)&buf, (size_t)(per * row) * sizeof(float),
                         "checkpoint info buffer"));
  fs = H5Dget_space(d);
  if (fs < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s: %s", path, dname, td_h5_error_text());
  for (int64_t r = 0; r < n0; r += per) {
    int64_t nr = n0 - r < per ? n0 - r : per;
    hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    for (int i = 0; i < ndim; ++i) count[i] = dims[i];
    hsize_t mn = (hsize_t)(nr * row);
    if (ndim > 0) {
      start[0] = (hsize_t)r;
      count[0] = (hsize_t)nr;
      if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
        TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s: %s", path, dname, td_h5_error_text());
    }
    ms = H5Screate_simple(1, &mn, NULL);
    if (ms < 0 || H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot read %s: %s", path, dname,
                   td_h5_error_text());
    td_h5_close(&ms);
    *sum += td_ckpt_checksum(buf, nr * row, r * row);
  }
done:
  td_h5_close(&ms);
  td_h5_close(&fs);
  td_free(buf);
  return st;
}

/* Print one tensor's line; *bad set on a mismatch or a missing checksum. */
static td_status info_tensor(hid_t f, const char *path, const char *dname, FILE *out,
                             int *bad, int64_t *elems) {
  td_status st = TD_OK;
  hid_t d = -1, sp = -1, t = -1;
  d = H5Dopen2(f, dname, H5P_DEFAULT);
  if (d >= 0) sp = H5Dget_space(d);
  if (d >= 0) t = H5Dget_type(d);
  int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  if (nd < 0 || t < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot inspect %s: %s", path, dname,
                 td_h5_error_text());
  hsize_t dims[H5S_MAX_RANK];
  int64_t sd[H5S_MAX_RANK];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) {
    sd[i] = (int64_t)dims[i];
    n *= sd[i];
  }
  char shape[256];
  td_ckpt_shape_text(shape, sizeof shape, nd, sd);
  fprintf(out, "  %-44s %-14s ", dname, shape);
  if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 4) {
    fprintf(out, "NOT FLOAT32\n");
    *bad = 1;
    goto done;
  }
  *elems += n;
  htri_t ex = H5Aexists(d, "checksum");
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fprintf(out, "NO CHECKSUM\n");
    *bad = 1;
    goto done;
  }
  uint64_t stored = 0, computed = 0;
  TD_CHECK_GOTO(td_h5_attr_read_u64(d, path, "checksum", &stored));
  TD_CHECK_GOTO(dataset_checksum(d, path, dname, nd, dims, &computed));
  if (stored == computed) {
    fprintf(out, "checksum ok\n");
  } else {
    fprintf(out, "CHECKSUM MISMATCH (stored 0x%016llx, computed 0x%016llx)\n",
            (unsigned long long)stored, (unsigned long long)computed);
    *bad = 1;
  }
done:
  if (t >= 0) H5Tclose(t);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  return st;
}

/* Print root attribute `name` (integer, integer vector or string), or
 * "(missing)". */
static void print_attr(hid_t f, const char *path, const char *name, FILE *out) {
  fprintf(out, "%-16s ", name);
  char s[512];
  int64_t v[8];
  if (td_h5_attr_read_i64(f, path, name, &v[0]) == TD_OK) {
    fprintf(out, "%lld\n", (long long)v[0]);
    return;
  }
  td_error_clear();
  for (int k = 2; k <= 8; ++k) {
    if (td_h5_attr_read_i64v(f, path, name, v, k) == TD_OK) {
      fprintf(out, "[");
      for (int i = 0; i < k; ++i) fprintf(out, "%s%lld", i ? ", " : "", (long long)v[i]);
      fprintf(out, "]\n");
      return;
    }
    td_error_clear();
  }
  if (td_h5_attr_read_str(f, path, name, s, sizeof s) == TD_OK) {
    fprintf(out, "%s\n", s);
    return;
  }
  td_error_clear();
  fprintf(out, "(missing)\n");
}

td_status td_ckpt_info(const char *path, FILE *out) {
  td_status st = TD_OK;
  hid_t f = -1;
  char *config = NULL;
  name_list names = {NULL, 0, 0, NULL};
  int bad = 0, nbad_names = 0;
  int64_t elems = 0;
  td_h5_init();
  if (td_h5_open(path, MPI_COMM_NULL, 0, &f) != TD_OK) {
    char msg[1536];
    snprintf(msg, sizeof msg, "%s", td_error_message());
    td_error_clear();
    TD_FAIL(TD_ERR_CKPT, "%s: not a readable HDF5 checkpoint (%s)", path, msg);
  }
  {
    /* format / format_version checked as td_ckpt_open does. */
    char fmt[128] = "";
    int64_t ver = -1;
    if (H5Aexists(f, "format") <= 0 ||
        td_h5_attr_read_str(f, path, "format", fmt, sizeof fmt) != TD_OK ||
        strcmp(fmt, TD_CKPT_FORMAT) != 0) {
      H5Eclear2(H5E_DEFAULT);
      td_error_clear();
      TD_FAIL_GOTO(TD_ERR_CKPT,
                   "%s: not a trident checkpoint (root attribute 'format' is "
                   "\"%s\", expected \"%s\")",
                   path, fmt, TD_CKPT_FORMAT);
    }
    if (td_h5_attr_read_i64(f, path, "format_version", &ver) != TD_OK ||
        ver != TD_CKPT_FORMAT_VERSION) {
      td_error_clear();
      TD_FAIL_GOTO(TD_ERR_CKPT,
                   "%s: checkpoint format_version is %lld; this trident reads "
                   "version %d",
                   path, (long long)ver, TD_CKPT_FORMAT_VERSION);
    }
    fprintf(out, "%-16s %s\n%-16s %s, version %lld\n", "file", path, "format", fmt,
            (long long)ver);
  }
  print_attr(f, path, "step", out);
  print_attr(f, path, "tokens_seen", out);
  print_attr(f, path, "saved_grid", out);
  print_attr(f, path, "trident_version", out);
  if (td_h5_exists(f, "/config") && td_h5_read_string(f, path, "/config", &config) == TD_OK) {
    fprintf(out, "config:\n  ");
    for (const char *p = config; *p; ++p) {
      fputc(*p, out);
      if (*p == '\n' && p[1]) fputs("  ", out);
    }
    if (config[0] && config[strlen(config) - 1] != '\n') fputc('\n', out);
  } else {
    td_error_clear();
    fprintf(out, "config:          (missing)\n");
  }
  const char *groups[] = {"/model", "/optim"};
  for (int g = 0; g < 2; ++g) {
    if (!td_h5_exists(f, groups[g])) continue;
    hid_t grp = H5Gopen2(f, groups[g], H5P_DEFAULT);
    if (grp < 0)
      TD_FAIL_GOTO(TD_ERR_CKPT, "%s: %s is not a group: %s", path, groups[g],
                   td_h5_error_text());
    names.prefix = groups[g];
    herr_t e = H5Lvisit(grp, H5_INDEX_NAME, H5_ITER_INC, collect_cb, &names);
    H5Gclose(grp);
    if (e < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot list %s: %s", path, groups[g],
                   td_h5_error_text());
  }
  fprintf(out, "tensors:         %d\n", names.n);
  for (int i = 0; i < names.n; ++i) {
    int b = 0;
    TD_CHECK_GOTO(info_tensor(f, path, names.v[i], out, &b, &elems));
    nbad_names += b;
  }
  bad = nbad_names > 0;
  fprintf(out, "%d tensors, %lld elements (%.1f MB): %s\n", names.n, (long long)elems,
          (double)elems * 4.0 / 1e6,
          bad ? "CHECKSUM ERRORS" : names.n ? "all checksums ok" : "no tensors");
  if (bad)
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: %d tensor(s) failed verification", path,
                 nbad_names);
done:
  for (int i = 0; i < names.n; ++i) free(names.v[i]);
  free(names.v);
  td_free(config);
  td_h5_close(&f);
  return st;
}
