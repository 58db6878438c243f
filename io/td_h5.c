/* td_h5.c — small HDF5 helpers (td_h5.h): files, attributes, whole datasets,
 * strings, and HDF5 error stacks turned into one-line messages. */
#include "io/td_h5.h"

#include <stdio.h>
#include <string.h>

/* ---- errors --------------------------------------------------------------- */

void td_h5_init(void) {
  static int done;
  if (done) return;
  done = 1;
  /* No clean-up at exit(): a job aborted (MPI_Abort exits) while a parallel
   * file is open would otherwise close it collectively there, in MPI calls
   * after the abort, and die of SIGABRT instead of the abort's exit code.
   * Files are closed by the code that opened them; MPI_Finalize ends the
   * library otherwise. */
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

#define TD_H5_ERRMAX 1024
#define TD_H5_ERRFRAMES 2 /* innermost frames shown */

typedef struct {
  char *buf;
  size_t cap;
  int frames;
} err_walk;

static herr_t err_walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
  err_walk *w = data;
  if (w->frames >= TD_H5_ERRFRAMES) return 0;
  size_t used = strlen(w->buf);
  if (used + 1 >= w->cap) return 0;
  char minor[128] = "";
  if (H5Eget_msg(e->min_num, NULL, minor, sizeof minor) < 0) minor[0] = '\0';
  const char *desc = e->desc ? e->desc : "";
  snprintf(w->buf + used, w->cap - used, "%s%s: %s%s%s%s", w->frames ? "; " : "",
           e->func_name ? e->func_name : "?", desc,
           minor[0] ? " (" : "", minor, minor[0] ? ")" : "");
  w->frames++;
  (void)n;
  return 0;
}

const char *td_h5_error_text(void) {
  static char text[TD_H5_ERRMAX];
  text[0] = '\0';
  err_walk w = {text, sizeof text, 0};
  hid_t stack = H5Eget_current_stack(); /* copies and clears the live stack */
  if (stack >= 0) {
    H5Ewalk2(stack, H5E_WALK_UPWARD, err_walk_cb, &w);
    H5Eclose_stack(stack);
  }
  if (!text[0]) snprintf(text, sizeof text, "no HDF5 error detail");
  for (char *p = text; *p; ++p)
    if (*p == '\n' || *p == '\r') *p = ' ';
  return text;
}

/* "FILE:/object" for messages, from an open location. */
static const char *loc_desc(hid_t loc, char *buf, size_t cap) {
  char fname[512] = "?", oname[512] = "?";
  if (H5Fget_name(loc, fname, sizeof fname) < 0) snprintf(fname, sizeof fname, "?");
  if (H5Iget_name(loc, oname, sizeof oname) <= 0) snprintf(oname, sizeof oname, "?");
  snprintf(buf, cap, "%s:%s", fname, oname);
  H5Eclear2(H5E_DEFAULT);
  return buf;
}

/* ---- files ----------------------------------------------------------------- */

static hid_t make_fapl_info(MPI_Comm comm, MPI_Info info, int collective_metadata) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return fapl;
  herr_t e;
  if (comm == MPI_COMM_NULL) {
    e = H5Pset_fapl_sec2(fapl);
  } else {
    e = H5Pset_fapl_mpio(fapl, comm, info);
    if (e >= 0) e = H5Pset_all_coll_metadata_ops(fapl, 1);
    if (e >= 0) e = H5Pset_coll_metadata_write(fapl, collective_metadata != 0);
  }
#if H5_VERSION_GE(1, 10, 7)
  /* Lock where the file system can; do not fail where it cannot (Lustre). */
  if (e >= 0) e = H5Pset_file_locking(fapl, 1, 1);
#endif
  if (e < 0) {
    H5Pclose(fapl);
    return -1;
  }
  return fapl;
}

static hid_t make_fapl(MPI_Comm comm) { return make_fapl_info(comm, MPI_INFO_NULL, 1); }

td_status td_h5_create(const char *path, MPI_Comm comm, hid_t *out) {
  TD_CHECK(td_h5_create_aligned(path, comm, MPI_INFO_NULL, 0, 0, 1, out));
  return TD_OK;
}

td_status td_h5_create_aligned(const char *path, MPI_Comm comm, MPI_Info info,
                               size_t threshold, size_t alignment, int collective_metadata,
                               hid_t *out) {
  *out = -1;
  hid_t fapl = make_fapl_info(comm, info, collective_metadata);
  if (fapl >= 0 && alignment > 1 &&
      H5Pset_alignment(fapl, (hsize_t)threshold, (hsize_t)alignment) < 0) {
    H5Pclose(fapl);
    fapl = -1;
  }
  if (fapl < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot set up file access: %s", path,
            td_h5_error_text());
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  const char *why = f < 0 ? td_h5_error_text() : NULL;
  H5Pclose(fapl);
  if (f < 0) TD_FAIL(TD_ERR_HDF5, "%s: cannot create HDF5 file: %s", path, why);
  *out = f;
  return TD_OK;
}

td_status td_h5_open(const char *path, MPI_Comm comm, int writable, hid_t *out) {
  *out = -1;
  hid_t fapl = make_fapl(comm);
  if (fapl < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot set up file access: %s", path,
            td_h5_error_text());
  hid_t f = H5Fopen(path, writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
  const char *why = f < 0 ? td_h5_error_text() : NULL;
  H5Pclose(fapl);
  if (f < 0) TD_FAIL(TD_ERR_HDF5, "%s: cannot open HDF5 file: %s", path, why);
  *out = f;
  return TD_OK;
}

void td_h5_close(hid_t *h) {
  if (!h || *h < 0) return;
  switch (H5Iget_type(*h)) {
    case H5I_FILE: H5Fclose(*h); break;
    case H5I_GROUP: H5Gclose(*h); break;
    case H5I_DATASET: H5Dclose(*h); break;
    case H5I_DATASPACE: H5Sclose(*h); break;
    case H5I_DATATYPE: H5Tclose(*h); break;
    case H5I_ATTR: H5Aclose(*h); break;
    case H5I_GENPROP_LST: H5Pclose(*h); break;
    default: H5Oclose(*h); break;
  }
  *h = -1;
}

int td_h5_exists(hid_t loc, const char *path) {
  char buf[1024];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) return 0;
  memcpy(buf, path, n + 1);
  /* Check each prefix "a", "a/b", ... in turn. */
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char save = buf[i];
    buf[i] = '\0';
    htri_t e = (strcmp(buf, "/") == 0) ? 1 : H5Lexists(loc, buf, H5P_DEFAULT);
    buf[i] = save;
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return 0;
    }
  }
  return 1;
}

/* ---- attributes -------------------------------------------------------------- */

/* Create attribute `name` on loc with the given type and space (replacing an
 * old one) and write buf. */
static td_status attr_write(hid_t loc, const char *name, hid_t ftype,
                            hid_t mtype, hid_t space, const void *buf) {
  td_status st = TD_OK;
  char where[1100];
  hid_t a = -1;
  htri_t ex = H5Aexists(loc, name);
  if (ex < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot check attribute '%s': %s",
                 loc_desc(loc, where, sizeof where), name, td_h5_error_text());
  if (ex > 0 && H5Adelete(loc, name) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot replace attribute '%s': %s",
                 loc_desc(loc, where, sizeof where), name, td_h5_error_text());
  a = H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create attribute '%s': %s",
                 loc_desc(loc, where, sizeof where), name, td_h5_error_text());
  if (H5Awrite(a, mtype, buf) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot write attribute '%s': %s",
                 loc_desc(loc, where, sizeof where), name, td_h5_error_text());
done:
  if (a >= 0) H5Aclose(a);
  return st;
}

static td_status attr_write_vec(hid_t loc, const char *name, hid_t ftype,
                                hid_t mtype, int n, const void *v) {
  if (n < 1)
    TD_FAIL(TD_ERR_INTERNAL, "attribute '%s': vector length %d < 1", name, n);
  hsize_t dim = (hsize_t)n;
  hid_t space = H5Screate_simple(1, &dim, NULL);
  if (space < 0)
    TD_FAIL(TD_ERR_HDF5, "attribute '%s': cannot make dataspace: %s", name,
            td_h5_error_text());
  td_status st = attr_write(loc, name, ftype, mtype, space, v);
  H5Sclose(space);
  TD_CHECK(st);
  return TD_OK;
}

static td_status attr_write_scalar(hid_t loc, const char *name, hid_t ftype,
                                   hid_t mtype, const void *v) {
  hid_t space = H5Screate(H5S_SCALAR);
  if (space < 0)
    TD_FAIL(TD_ERR_HDF5, "attribute '%s': cannot make dataspace: %s", name,
            td_h5_error_text());
  td_status st = attr_write(loc, name, ftype, mtype, space, v);
  H5Sclose(space);
  TD_CHECK(st);
  return TD_OK;
}

td_status td_h5_attr_write_i64(hid_t loc, const char *name, int64_t v) {
  TD_CHECK(attr_write_scalar(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v));
  return TD_OK;
}

td_status td_h5_attr_write_f64(hid_t loc, const char *name, double v) {
  TD_CHECK(attr_write_scalar(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v));
  return TD_OK;
}

td_status td_h5_attr_write_u64(hid_t loc, const char *name, uint64_t v) {
  TD_CHECK(attr_write_scalar(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v));
  return TD_OK;
}

td_status td_h5_attr_write_i64v(hid_t loc, const char *name, const int64_t *v,
                                int n) {
  TD_CHECK(attr_write_vec(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, n, v));
  return TD_OK;
}

td_status td_h5_attr_write_f64v(hid_t loc, const char *name, const double *v,
                                int n) {
  TD_CHECK(attr_write_vec(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v));
  return TD_OK;
}

/* A variable-length UTF-8 string type. */
static hid_t vlen_str_type(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return t;
  if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
    H5Tclose(t);
    return -1;
  }
  return t;
}

td_status td_h5_attr_write_str(hid_t loc, const char *name, const char *v) {
  hid_t t = vlen_str_type();
  if (t < 0)
    TD_FAIL(TD_ERR_HDF5, "attribute '%s': cannot make string type: %s", name,
            td_h5_error_text());
  td_status st = attr_write_scalar(loc, name, t, t, &v);
  H5Tclose(t);
  TD_CHECK(st);
  return TD_OK;
}

/* Open attribute `name` and check its class and element count (want_n: the
 * number of elements required). */
static td_status attr_open(hid_t loc, const char *file, const char *name,
                           int want_float_ok, int want_string, int64_t want_n,
                           hid_t *out) {
  td_status st = TD_OK;
  char oname[512] = "?";
  if (H5Iget_name(loc, oname, sizeof oname) <= 0) snprintf(oname, sizeof oname, "?");
  hid_t a = -1, t = -1, s = -1;
  htri_t ex = H5Aexists(loc, name);
  if (ex <= 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s has no attribute '%s'%s%s", file, oname,
                 name, ex < 0 ? ": " : "", ex < 0 ? td_h5_error_text() : "");
  a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s: cannot open attribute '%s': %s", file,
                 oname, name, td_h5_error_text());
  t = H5Aget_type(a);
  s = H5Aget_space(a);
  if (t < 0 || s < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s: cannot inspect attribute '%s': %s", file,
                 oname, name, td_h5_error_text());
  H5T_class_t c = H5Tget_class(t);
  if (want_string) {
    if (c != H5T_STRING)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s: attribute '%s' is not a string", file,
                   oname, name);
  } else if (!(c == H5T_INTEGER || (want_float_ok && c == H5T_FLOAT))) {
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: %s: attribute '%s' is not %s", file, oname,
                 name, want_float_ok ? "a number" : "an integer");
  }
  hssize_t npts = H5Sget_simple_extent_npoints(s);
  if (npts != want_n)
    TD_FAIL_GOTO(TD_ERR_HDF5,
                 "%s: %s: attribute '%s' has %lld element(s), expected %lld",
                 file, oname, name, (long long)npts, (long long)want_n);
  *out = a;
  a = -1;
done:
  if (s >= 0) H5Sclose(s);
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return st;
}

static td_status attr_read_num(hid_t loc, const char *file, const char *name,
                               hid_t mtype, int float_ok, int n, void *v) {
  hid_t a = -1;
  TD_CHECK(attr_open(loc, file, name, float_ok, 0, n, &a));
  herr_t e = H5Aread(a, mtype, v);
  const char *why = e < 0 ? td_h5_error_text() : NULL;
  H5Aclose(a);
  if (e < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot read attribute '%s': %s", file, name, why);
  return TD_OK;
}

td_status td_h5_attr_read_i64(hid_t loc, const char *file, const char *name,
                              int64_t *v) {
  TD_CHECK(attr_read_num(loc, file, name, H5T_NATIVE_INT64, 0, 1, v));
  return TD_OK;
}

td_status td_h5_attr_read_u64(hid_t loc, const char *file, const char *name,
                              uint64_t *v) {
  TD_CHECK(attr_read_num(loc, file, name, H5T_NATIVE_UINT64, 0, 1, v));
  return TD_OK;
}

td_status td_h5_attr_read_f64(hid_t loc, const char *file, const char *name,
                              double *v) {
  TD_CHECK(attr_read_num(loc, file, name, H5T_NATIVE_DOUBLE, 1, 1, v));
  return TD_OK;
}

td_status td_h5_attr_read_i64v(hid_t loc, const char *file, const char *name,
                               int64_t *v, int n) {
  TD_CHECK(attr_read_num(loc, file, name, H5T_NATIVE_INT64, 0, n, v));
  return TD_OK;
}

td_status td_h5_attr_read_f64v(hid_t loc, const char *file, const char *name,
                               double *v, int n) {
  TD_CHECK(attr_read_num(loc, file, name, H5T_NATIVE_DOUBLE, 1, n, v));
  return TD_OK;
}

/* Read a scalar string held by an attribute (is_attr) or dataset into a new
 * buffer (td_alloc). */
static td_status read_string_obj(hid_t obj, int is_attr, const char *what,
                                 char **out) {
  td_status st = TD_OK;
  hid_t t = -1, mt = -1, s = -1;
  char *vl = NULL;
  *out = NULL;
  t = is_attr ? H5Aget_type(obj) : H5Dget_type(obj);
  s = is_attr ? H5Aget_space(obj) : H5Dget_space(obj);
  if (t < 0 || s < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot inspect: %s", what, td_h5_error_text());
  if (H5Tget_class(t) != H5T_STRING)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: not a string", what);
  if (H5Sget_simple_extent_npoints(s) != 1)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: not a single string", what);
  htri_t var = H5Tis_variable_str(t);
  if (var > 0) {
    mt = vlen_str_type();
    herr_t e = mt < 0 ? -1
               : is_attr ? H5Aread(obj, mt, &vl)
                         : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &vl);
    if (e < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot read: %s", what, td_h5_error_text());
    size_t n = vl ? strlen(vl) : 0;
    TD_CHECK_GOTO(td_alloc((void **)out, n + 1, what));
    if (n) memcpy(*out, vl, n);
  } else {
    size_t n = H5Tget_size(t);
    /* the size comes from the file: a damaged type must not size a buffer
     * beyond what is stored, nor beyond the file (a damaged layout claims
     * storage the file does not have) */
    hsize_t stored = is_attr ? H5Aget_storage_size(obj) : H5Dget_storage_size(obj);
    hsize_t fsize = 0;
    hid_t fid = H5Iget_file_id(obj);
    if (fid >= 0) {
      if (H5Fget_filesize(fid, &fsize) < 0) fsize = 0;
      H5Fclose(fid);
    }
    if (n == 0 || (hsize_t)n > stored || (fsize > 0 && (hsize_t)n > fsize))
      TD_FAIL_GOTO(TD_ERR_HDF5,
                   "%s: a string of %zu bytes with %llu bytes stored in a file of %llu bytes "
                   "(damaged?)", what, n, (unsigned long long)stored, (unsigned long long)fsize);
    mt = H5Tcopy(t);
    if (mt < 0 || H5Tset_size(mt, n + 1) < 0 ||
        H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot make string type: %s", what,
                   td_h5_error_text());
    TD_CHECK_GOTO(td_alloc((void **)out, n + 1, what));
    herr_t e = is_attr ? H5Aread(obj, mt, *out)
                       : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out);
    if (e < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot read: %s", what, td_h5_error_text());
    (*out)[n] = '\0';
  }
done:
  if (vl) H5free_memory(vl);
  if (mt >= 0) H5Tclose(mt);
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (st != TD_OK && *out) {
    td_free(*out);
    *out = NULL;
  }
  return st;
}

td_status td_h5_attr_read_str(hid_t loc, const char *file, const char *name,
                              char *buf, size_t cap) {
  td_status st = TD_OK;
  hid_t a = -1;
  char *s = NULL;
  char what[700];
  char oname[256] = "?";
  if (H5Iget_name(loc, oname, sizeof oname) <= 0) snprintf(oname, sizeof oname, "?");
  snprintf(what, sizeof what, "%s: %s: attribute '%s'", file, oname, name);
  TD_CHECK_GOTO(attr_open(loc, file, name, 0, 1, 1, &a));
  TD_CHECK_GOTO(read_string_obj(a, 1, what, &s));
  size_t n = strlen(s);
  if (cap == 0 || n >= cap)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s is %zu bytes long, longer than %zu", what, n,
                 cap ? cap - 1 : 0);
  memcpy(buf, s, n + 1);
done:
  td_free(s);
  if (a >= 0) H5Aclose(a);
  return st;
}

/* ---- datasets ------------------------------------------------------------------ */

static hid_t lcpl_intermediate(void) {
  hid_t p = H5Pcreate(H5P_LINK_CREATE);
  if (p >= 0 && H5Pset_create_intermediate_group(p, 1) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

static const char *file_name(hid_t loc, char *buf, size_t cap) {
  if (H5Fget_name(loc, buf, cap) < 0) {
    H5Eclear2(H5E_DEFAULT);
    snprintf(buf, cap, "?");
  }
  return buf;
}

/* Create dataset `path` (intermediate groups too) of file type ftype over
 * `space` and write `data` (memory type memtype) to all of it; a rank that is
 * not the `writer` takes part with nothing selected. */
static td_status create_and_write(hid_t file, const char *path, hid_t ftype, hid_t memtype,
                                  hid_t space, int writer, const void *data) {
  td_status st = TD_OK;
  char fname[512];
  hid_t lcpl = lcpl_intermediate(), d = -1;
  if (lcpl < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: cannot set up: %s",
                 file_name(file, fname, sizeof fname), path, td_h5_error_text());
  d = H5Dcreate2(file, path, ftype, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  if (d < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create dataset %s: %s",
                 file_name(file, fname, sizeof fname), path, td_h5_error_text());
  if (!writer && H5Sselect_none(space) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: %s",
                 file_name(file, fname, sizeof fname), path, td_h5_error_text());
  if (H5Dwrite(d, memtype, space, space, H5P_DEFAULT, data) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot write dataset %s: %s",
                 file_name(file, fname, sizeof fname), path, td_h5_error_text());
done:
  if (d >= 0) H5Dclose(d);
  if (lcpl >= 0) H5Pclose(lcpl);
  return st;
}

td_status td_h5_write(hid_t file, const char *path, hid_t memtype, int ndim,
                      const int64_t *dims, const void *data) {
  td_status st = TD_OK;
  hid_t space = -1, ftype = -1;
  char fname[512];
  if (ndim < 0 || ndim > H5S_MAX_RANK)
    TD_FAIL_GOTO(TD_ERR_INTERNAL, "%s: dataset %s: bad rank %d",
                 file_name(file, fname, sizeof fname), path, ndim);
  hsize_t hd[H5S_MAX_RANK];
  for (int i = 0; i < ndim; ++i) {
    if (dims[i] < 0)
      TD_FAIL_GOTO(TD_ERR_INTERNAL, "%s: dataset %s: negative dimension",
                   file_name(file, fname, sizeof fname), path);
    hd[i] = (hsize_t)dims[i];
  }
  space = ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, hd, NULL);
  /* Store as the memory type, in little-endian order (what h5py expects). */
  ftype = H5Tcopy(memtype);
  if (space < 0 || ftype < 0 ||
      (H5Tget_size(ftype) > 1 && H5Tset_order(ftype, H5T_ORDER_LE) < 0))
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: cannot set up: %s",
                 file_name(file, fname, sizeof fname), path, td_h5_error_text());
  st = create_and_write(file, path, ftype, memtype, space, 1, data);
done:
  if (ftype >= 0) H5Tclose(ftype);
  if (space >= 0) H5Sclose(space);
  return st;
}

static const char *class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    default: return "other";
  }
}

static void dims_text(char *buf, size_t cap, int ndim, const int64_t *dims) {
  size_t u = 0;
  u += (size_t)snprintf(buf + u, cap - u, "(");
  for (int i = 0; i < ndim && u < cap; ++i)
    u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "",
                          (long long)dims[i]);
  if (u < cap) snprintf(buf + u, cap - u, ")");
}

static td_status open_dataset(hid_t file, const char *fname, const char *path,
                              hid_t *out) {
  if (!td_h5_exists(file, path))
    TD_FAIL(TD_ERR_HDF5, "%s: no dataset %s", fname, path);
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  if (d < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot open dataset %s: %s", fname, path,
            td_h5_error_text());
  *out = d;
  return TD_OK;
}

td_status td_h5_shape(hid_t file, const char *fname, const char *path,
                      int *ndim, int64_t *dims, int cap) {
  td_status st = TD_OK;
  hid_t d = -1, s = -1;
  TD_CHECK_GOTO(open_dataset(file, fname, path, &d));
  s = H5Dget_space(d);
  int r = s < 0 ? -1 : H5Sget_simple_extent_ndims(s);
  if (r < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: cannot get shape: %s", fname,
                 path, td_h5_error_text());
  hsize_t hd[H5S_MAX_RANK];
  H5Sget_simple_extent_dims(s, hd, NULL);
  *ndim = r;
  for (int i = 0; i < r && i < cap; ++i) dims[i] = (int64_t)hd[i];
done:
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  return st;
}

td_status td_h5_read(hid_t file, const char *fname, const char *path,
                     hid_t memtype, int ndim, const int64_t *dims, void *data) {
  td_status st = TD_OK;
  hid_t d = -1, s = -1, t = -1;
  TD_CHECK_GOTO(open_dataset(file, fname, path, &d));
  s = H5Dget_space(d);
  t = H5Dget_type(d);
  int r = s < 0 ? -1 : H5Sget_simple_extent_ndims(s);
  if (r < 0 || t < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: cannot inspect: %s", fname, path,
                 td_h5_error_text());
  hsize_t hd[H5S_MAX_RANK];
  int64_t found[H5S_MAX_RANK];
  H5Sget_simple_extent_dims(s, hd, NULL);
  int same = (r == ndim);
  for (int i = 0; i < r; ++i) {
    found[i] = (int64_t)hd[i];
    if (same && found[i] != dims[i]) same = 0;
  }
  if (!same) {
    char want[256], got[256];
    dims_text(want, sizeof want, ndim, dims);
    dims_text(got, sizeof got, r, found);
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: expected shape %s, found %s",
                 fname, path, want, got);
  }
  H5T_class_t fc = H5Tget_class(t), mc = H5Tget_class(memtype);
  if (fc != mc)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: expected %s data, found %s",
                 fname, path, class_name(mc), class_name(fc));
  if (H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot read dataset %s: %s", fname, path,
                 td_h5_error_text());
done:
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  return st;
}

td_status td_h5_write_string(hid_t file, const char *path, const char *text, int writer) {
  td_status st = TD_OK;
  char fname[512];
  size_t n = strlen(text);
  hid_t t = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR);
  if (t < 0 || space < 0 || H5Tset_size(t, n + 1) < 0 ||
      H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: dataset %s: cannot set up: %s",
                 file_name(file, fname, sizeof fname), path, td_h5_error_text());
  st = create_and_write(file, path, t, t, space, writer, text);
done:
  if (space >= 0) H5Sclose(space);
  if (t >= 0) H5Tclose(t);
  return st;
}

td_status td_h5_read_string(hid_t file, const char *fname, const char *path,
                            char **out) {
  td_status st = TD_OK;
  hid_t d = -1;
  char what[700];
  *out = NULL;
  snprintf(what, sizeof what, "%s: dataset %s", fname, path);
  TD_CHECK_GOTO(open_dataset(file, fname, path, &d));
  TD_CHECK_GOTO(read_string_obj(d, 0, what, out));
done:
  if (d >= 0) H5Dclose(d);
  return st;
}
