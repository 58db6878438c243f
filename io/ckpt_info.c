/* ckpt_info.c — `trident ckpt info FILE`: describe a checkpoint and verify
 * every tensor's checksum with serial HDF5 (td_ckpt.h). Reads a tensor a few
 * MiB at a time, so it needs little memory whatever the model size. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt_internal.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "io/td_yaml.h"

#define INFO_BLOCK_ELEMS ((int64_t)1 << 22) /* 16 MiB of float32 per read */

/* One dataset found under a tensor group, with its shape once inspected. */
typedef struct {
  char *path;  /* "/model/wte.weight" */
  int group;   /* index into k_groups */
  int ndim;    /* -1 until inspected (or not a float tensor) */
  int64_t dims[H5S_MAX_RANK];
} entry;

typedef struct {
  entry *v;
  int n, cap;
  int group;
  const char *prefix;
  struct problems *pr;
} entry_list;

/* The tensor groups of format 1: the parameters and AdamW's two moments,
 * one tensor each per parameter, same names and shapes. */
static const char *const k_groups[] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};
#define NGROUPS 3

/* Problems found; the first is quoted in the final error. */
typedef struct problems {
  int n;
  char first[900];
} problems;

static void problem(problems *pr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems *pr, const char *fmt, ...) {
  if (pr->n++ > 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pr->first, sizeof pr->first, fmt, ap);
  va_end(ap);
}

/* H5Literate callback: every member of a tensor group must be a dataset
 * (tensor names hold dots, never slashes); datasets are collected. */
static herr_t collect_cb(hid_t g, const char *name, const H5L_info_t *info, void *data) {
  entry_list *l = data;
  char full[600];
  snprintf(full, sizeof full, "%s/%s", l->prefix, name);
  if (info->type != H5L_TYPE_HARD) {
    problem(l->pr, "%s is a link, not a tensor", full);
    return 0;
  }
  hid_t o = H5Oopen(g, name, H5P_DEFAULT);
  if (o < 0) {
    H5Eclear2(H5E_DEFAULT);
    problem(l->pr, "%s cannot be opened", full);
    return 0;
  }
  int is_ds = H5Iget_type(o) == H5I_DATASET;
  H5Oclose(o);
  if (!is_ds) {
    problem(l->pr, "%s is a group (or other object), not a tensor (a dataset)", full);
    return 0;
  }
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    entry *nv = realloc(l->v, (size_t)nc * sizeof *nv);
    if (!nv) return -1;
    l->v = nv;
    l->cap = nc;
  }
  entry *e = &l->v[l->n];
  e->path = strdup(full);
  if (!e->path) return -1;
  e->group = l->group;
  e->ndim = -1;
  l->n++;
  return 0;
}

/* Checksum of a whole dataset, read INFO_BLOCK_ELEMS at a time along its
 * first dimension (converted to float32 by HDF5), and the number of values
 * that are not finite, or negative where nonneg, with the first one's flat
 * index (*first_bad). */
static td_status dataset_checksum(hid_t d, const char *path, const char *dname,
                                  int ndim, const hsize_t *dims, int nonneg, uint64_t *sum,
                                  int64_t *nbad, int64_t *first_bad) {
  td_status st = TD_OK;
  hid_t fs = -1, ms = -1;
  float *buf = NULL;
  *sum = 0;
  *nbad = 0;
  *first_bad = -1;
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
    for (int64_t i = 0; i < nr * row; ++i)
      if (!isfinite(buf[i]) || (nonneg && buf[i] < 0.0f)) {
        if (*nbad == 0) *first_bad = r * row + i;
        ++*nbad;
      }
  }
done:
  td_h5_close(&ms);
  td_h5_close(&fs);
  td_free(buf);
  return st;
}

/* Print one tensor's line; problems (not float, shape, storage, checksum,
 * values) are printed there and counted in pr. e->ndim/dims receive its
 * shape. Returns an error only for what is not the file's fault (memory). */
static td_status info_tensor(hid_t f, const char *path, entry *e, FILE *out, problems *pr,
                             int64_t *elems) {
  td_status st = TD_OK;
  const char *dname = e->path;
  hid_t d = -1, sp = -1, t = -1;
  char line[400] = "";
  d = H5Dopen2(f, dname, H5P_DEFAULT);
  if (d >= 0) sp = H5Dget_space(d);
  if (d >= 0) t = H5Dget_type(d);
  int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  if (nd < 0 || t < 0) {
    const char *why = td_h5_error_text();
    fprintf(out, "  %-44s UNREADABLE (%s)\n", dname, why);
    problem(pr, "%s cannot be inspected (%s)", dname, why);
    goto done;
  }
  hsize_t dims[H5S_MAX_RANK];
  int64_t sd[H5S_MAX_RANK];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  int64_t n = 1, bytes = 0;
  int overflow = 0;
  for (int i = 0; i < nd; ++i) {
    sd[i] = (int64_t)dims[i];
    overflow |= sd[i] < 0 || __builtin_mul_overflow(n, sd[i], &n);
  }
  overflow |= __builtin_mul_overflow(n, (int64_t)4, &bytes);
  char shape[256];
  td_ckpt_shape_text(shape, sizeof shape, nd, sd);
  fprintf(out, "  %-44s %-14s ", dname, shape);
  /* Tensors are float32; another float type (float64 written by a tool) is
   * converted by HDF5 on reading, as trident's loader does, and verified
   * over the converted values. */
  H5T_class_t cls = H5Tget_class(t);
  size_t tsize = H5Tget_size(t);
  if (cls != H5T_FLOAT) {
    snprintf(line, sizeof line, "NOT FLOATING POINT (%s data)",
             cls == H5T_INTEGER ? "integer" : cls == H5T_STRING ? "string" : "non-numeric");
    goto bad;
  }
  if (overflow) {
    snprintf(line, sizeof line, "SHAPE OVERFLOWS 64 BITS");
    goto bad;
  }
  /* trident writes every element, uncompressed: a tensor stored in fewer
   * bytes than it claims is damaged (and reading it would read fill values
   * for as long as its dims say) */
  hid_t dcpl = H5Dget_create_plist(d);
  int nfilters = dcpl < 0 ? 0 : H5Pget_nfilters(dcpl);
  if (dcpl >= 0) H5Pclose(dcpl);
  hsize_t on_disk = H5Dget_storage_size(d);
  int64_t want = 0;
  if (nfilters == 0 && (__builtin_mul_overflow(n, (int64_t)tsize, &want) ||
                        on_disk < (hsize_t)want)) {
    snprintf(line, sizeof line, "TRUNCATED (%lld elements of %zu bytes, %llu bytes stored)",
             (long long)n, tsize, (unsigned long long)on_disk);
    goto bad;
  }
  (void)bytes;
  e->ndim = nd;
  for (int i = 0; i < nd; ++i) e->dims[i] = sd[i];
  *elems += n;
  htri_t ex = H5Aexists(d, "checksum");
  uint64_t stored = 0, computed = 0;
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    snprintf(line, sizeof line, "NO CHECKSUM attribute");
    goto bad;
  }
  if (td_h5_attr_read_u64(d, path, "checksum", &stored) != TD_OK) {
    td_error_clear();
    snprintf(line, sizeof line, "BAD CHECKSUM attribute (not an unsigned integer)");
    goto bad;
  }
  int nonneg = strncmp(dname, "/optim/exp_avg_sq/", 18) == 0;
  int64_t nbad = 0, first_bad = -1;
  if (dataset_checksum(d, path, dname, nd, dims, nonneg, &computed, &nbad, &first_bad) !=
      TD_OK) {
    if (td_error_status() == TD_ERR_NOMEM) {
      st = td_error_status();
      goto done;
    }
    snprintf(line, sizeof line, "UNREADABLE (%s)", td_error_message());
    td_error_clear();
    goto bad;
  }
  if (stored != computed) {
    snprintf(line, sizeof line, "CHECKSUM MISMATCH (stored 0x%016llx, computed 0x%016llx)",
             (unsigned long long)stored, (unsigned long long)computed);
    goto bad;
  }
  if (nbad > 0) {
    snprintf(line, sizeof line, "checksum ok, but %lld value(s) %s (the first at element %lld)",
             (long long)nbad, nonneg ? "NOT FINITE OR NEGATIVE" : "NOT FINITE",
             (long long)first_bad);
    goto bad;
  }
  fprintf(out, "checksum ok%s\n", tsize != 4 ? " (stored as float64 or another float type: "
                                               "converted to float32)" : "");
  goto done;
bad:
  fprintf(out, "%s\n", line);
  problem(pr, "%s %s: %s", dname, shape, line);
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

/* /config: a string dataset holding YAML (the resolved deck). Printed; a
 * missing one, or one that is not a string or not YAML, is a problem (the
 * deck's keys are checked where a deck is known: train, eval). */
static void info_config(hid_t f, const char *path, FILE *out, problems *pr) {
  char *config = NULL;
  td_yaml_node *doc = NULL;
  if (!td_h5_exists(f, "/config")) {
    fprintf(out, "config:          MISSING\n");
    problem(pr, "/config (the resolved deck) is missing");
    return;
  }
  if (td_h5_read_string(f, path, "/config", &config) != TD_OK) {
    fprintf(out, "config:          UNREADABLE (%s)\n", td_error_message());
    problem(pr, "/config is not a string dataset (%s)", td_error_message());
    td_error_clear();
    return;
  }
  fprintf(out, "config:\n  ");
  for (const char *p = config; *p; ++p) {
    fputc(*p, out);
    if (*p == '\n' && p[1]) fputs("  ", out);
  }
  if (config[0] && config[strlen(config) - 1] != '\n') fputc('\n', out);
  char name[TD_CKPT_PATH_MAX + 16];
  snprintf(name, sizeof name, "%s:/config", path);
  if (td_yaml_load(name, config, &doc) != TD_OK) {
    problem(pr, "/config is not YAML (%s)", td_error_message());
    td_error_clear();
  } else if (doc->kind != TD_YAML_MAP) {
    problem(pr, "/config is %s, not a deck (a mapping)", td_yaml_kind_name(doc->kind));
  }
  td_yaml_free(&doc);
  td_free(config);
}

/* The tensor name after its group prefix. */
static const char *base_name(const entry *e) {
  return e->path + strlen(k_groups[e->group]) + 1;
}

/* When the file holds both moment groups, every group holds the same tensor
 * names with the same shapes (one parameter, two moments). */
static void cross_check(const entry_list *l, const int *present, FILE *out, problems *pr) {
  for (int g = 0; g < NGROUPS; ++g)
    if (!present[g]) return;
  for (int i = 0; i < l->n; ++i) {
    const entry *a = &l->v[i];
    for (int g = 0; g < NGROUPS; ++g) {
      if (g == a->group) continue;
      const entry *b = NULL;
      for (int j = 0; j < l->n && !b; ++j)
        if (l->v[j].group == g && strcmp(base_name(&l->v[j]), base_name(a)) == 0) b = &l->v[j];
      char sa[256], sb[256];
      td_ckpt_shape_text(sa, sizeof sa, a->ndim < 0 ? 0 : a->ndim, a->dims);
      if (!b) {
        fprintf(out, "  %s/%s MISSING (%s has it)\n", k_groups[g], base_name(a), a->path);
        problem(pr, "tensor %s/%s is missing (%s %s has no counterpart there)", k_groups[g],
                base_name(a), a->path, sa);
        continue;
      }
      if (g < a->group || a->ndim < 0 || b->ndim < 0) continue; /* each pair once */
      int same = a->ndim == b->ndim;
      for (int k = 0; same && k < a->ndim; ++k) same = a->dims[k] == b->dims[k];
      if (!same) {
        td_ckpt_shape_text(sb, sizeof sb, b->ndim, b->dims);
        fprintf(out, "  %s %s vs %s %s: SHAPES DIFFER\n", a->path, sa, b->path, sb);
        problem(pr, "tensor %s has shape %s but %s has %s", a->path, sa, b->path, sb);
      }
    }
  }
}

td_status td_ckpt_check_file(const char *path) {
  hid_t f = -1;
  td_h5_init();
  if (td_h5_open(path, MPI_COMM_NULL, 0, &f) != TD_OK) {
    td_error_clear();
    TD_FAIL(TD_ERR_CKPT, "%s: an HDF5 file that cannot be opened (truncated or damaged?)", path);
  }
  td_status st = td_ckpt_check_root(f, path);
  td_h5_close(&f);
  return st;
}

td_status td_ckpt_info(const char *path, FILE *out) {
  td_status st = TD_OK;
  hid_t f = -1;
  problems pr = {0, ""};
  entry_list list = {NULL, 0, 0, 0, NULL, &pr};
  int64_t elems = 0;
  int present[NGROUPS] = {0, 0, 0};
  td_h5_init();
  if (td_h5_open(path, MPI_COMM_NULL, 0, &f) != TD_OK) {
    char msg[1536];
    snprintf(msg, sizeof msg, "%s", td_error_message());
    td_error_clear();
    TD_FAIL(TD_ERR_CKPT, "%s: not a readable HDF5 checkpoint (%s)", path, msg);
  }
  /* format, format_version, step, tokens_seen, saved_grid: as td_ckpt_open */
  TD_CHECK_GOTO(td_ckpt_check_root(f, path));
  fprintf(out, "%-16s %s\n%-16s %s, version %d\n", "file", path, "format", TD_CKPT_FORMAT,
          TD_CKPT_FORMAT_VERSION);
  print_attr(f, path, "step", out);
  print_attr(f, path, "tokens_seen", out);
  print_attr(f, path, "saved_grid", out);
  print_attr(f, path, "trident_version", out);
  info_config(f, path, out, &pr);
  for (int g = 0; g < NGROUPS; ++g) {
    if (!td_h5_exists(f, k_groups[g])) {
      if (g == 0) problem(&pr, "/model (the parameters) is missing");
      continue;
    }
    hid_t grp = H5Gopen2(f, k_groups[g], H5P_DEFAULT);
    if (grp < 0) {
      problem(&pr, "%s is not a group (%s)", k_groups[g], td_h5_error_text());
      continue;
    }
    present[g] = 1;
    list.group = g;
    list.prefix = k_groups[g];
    herr_t e = H5Literate(grp, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_cb, &list);
    H5Gclose(grp);
    if (e < 0) {
      problem(&pr, "%s cannot be listed (%s)", k_groups[g], td_h5_error_text());
      continue;
    }
  }
  fprintf(out, "tensors:         %d\n", list.n);
  for (int i = 0; i < list.n; ++i) TD_CHECK_GOTO(info_tensor(f, path, &list.v[i], out, &pr, &elems));
  cross_check(&list, present, out, &pr);
  fprintf(out, "%d tensors, %lld elements (%.1f MB): %s\n", list.n, (long long)elems,
          (double)elems * 4.0 / 1e6,
          pr.n ? "ERRORS" : list.n ? "all checksums ok" : "no tensors");
  if (pr.n)
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: %d problem(s), the first: %s", path, pr.n, pr.first);
done:
  for (int i = 0; i < list.n; ++i) free(list.v[i].path);
  free(list.v);
  td_h5_close(&f);
  return st;
}
