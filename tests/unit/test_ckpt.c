/* test_ckpt.c — parallel-HDF5 checkpoints (io/td_ckpt.h): boxes written by
 * one decomposition and read back by another, grid-independent checksums,
 * commit / keep / abort, checkpoint.resume, errors, `ckpt info`.
 *
 * Usage (under mpiexec -n K, K >= 1):
 *   test_ckpt TMPDIR              all checks, files under TMPDIR/np<K>;
 *                                 one line per check, "N passed, M failed",
 *                                 exit status 1 if any check failed
 *   test_ckpt DIR --save STEP     save step STEP into DIR (keep 0): the crash
 *                                 test runs this with TD_TEST_CRASH_SAVE=1
 *   test_ckpt DIR --verify STEP   resume DIR (auto), read and verify every
 *                                 tensor, check the step attribute is STEP */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "td_rng.h"

static int g_pass, g_fail, g_rank, g_size;
static MPI_Comm g_comm;

/* ---- checks (collective: a check passes if it passes on every rank) ---------- */

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, g_comm);
  if (!ok && td_error_status() != TD_OK)
    fprintf(stderr, "[rank %d] pending error: %s\n%s", g_rank, td_error_message(),
            td_error_trace());
  if (g_rank == 0) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", all ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
  }
  if (all)
    g_pass++;
  else
    g_fail++;
  td_error_clear();
}

/* st must be `want` on every rank, with a message containing each of the
 * needles (NULL-terminated). */
static void check_err(td_status st, td_status want, const char *what, ...) {
  va_list ap;
  va_start(ap, what);
  int ok = st == want;
  const char *miss = NULL;
  for (const char *n = va_arg(ap, const char *); n; n = va_arg(ap, const char *))
    if (!strstr(td_error_message(), n)) {
      ok = 0;
      if (!miss) miss = n;
    }
  va_end(ap);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, g_comm);
  if (!ok)
    fprintf(stderr, "[rank %d] %s: got %s '%s', expected %s%s%s\n", g_rank, what,
            td_status_name(st), td_error_message(), td_status_name(want),
            miss ? " naming " : "", miss ? miss : "");
  if (g_rank == 0) {
    printf("%s %s -> %s: %s\n", all ? "ok  " : "FAIL", what, td_status_name(st),
           td_error_message());
    fflush(stdout);
  }
  if (all)
    g_pass++;
  else
    g_fail++;
  td_error_clear();
}

/* ---- test tensors and decompositions -------------------------------------------------- */

/* The value of element k of tensor id: exact, reproducible floats. */
static float val(int id, int64_t k) {
  uint64_t h = td_mix64((uint64_t)id * 1000003u + (uint64_t)k);
  return (float)((int64_t)(h >> 40) - (1 << 23)) / (float)(1 << 20);
}

typedef struct {
  const char *path;
  int ndim;
  int64_t shape[2];
} tensor_t;

enum { T_A, T_B, T_CATTN, T_CATTN_OPT, T_BIAS, T_ONLY0, T_SKIP, T_BIG, T_EMPTY, T_N };

static const tensor_t g_t[T_N] = {
    {"/model/a.weight", 2, {37, 24}},
    {"/model/b.weight", 2, {24, 40}},
    {"/model/h.0.attn.c_attn.weight", 2, {16, 36}},
    {"/optim/exp_avg/h.0.attn.c_attn.weight", 2, {16, 36}},
    {"/model/ln_f.bias", 1, {50, 1}},
    {"/model/only_rank0", 2, {10, 7}},
    {"/model/skip_last", 2, {20, 6}},
    {"/model/big", 2, {600, 512}},
    {"/model/empty", 2, {0, 4}},
};

static int64_t rows_of(int t) { return g_t[t].shape[0]; }
static int64_t cols_of(int t) { return g_t[t].ndim == 2 ? g_t[t].shape[1] : 1; }

/* A rank's boxes and its local buffer length. */
typedef struct {
  int n;
  td_ckpt_box b[16];
  int64_t len;
} boxset;

/* Part p of n split in `parts` balanced pieces. */
static void split(int64_t n, int parts, int p, int64_t *start, int64_t *len) {
  *start = n * p / parts;
  *len = n * (p + 1) / parts - *start;
}

/* Append a box stored contiguously after the previous ones (ld = nc). */
static void add_box(boxset *s, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  td_ckpt_box *b = &s->b[s->n++];
  b->r0 = r0;
  b->nr = nr;
  b->c0 = c0;
  b->nc = nc;
  b->src_off = s->len;
  b->src_ld = nc;
  s->len += nr * nc;
}

/* Re-lay boxes of equal rows side by side: local (nr, sum nc) row-major, as a
 * tensor-parallel rank holds its interleaved column blocks. */
static void interleave(boxset *s) {
  int64_t ld = 0, off = 0;
  for (int i = 0; i < s->n; ++i) ld += s->b[i].nc;
  for (int i = 0; i < s->n; ++i) {
    s->b[i].src_off = off;
    s->b[i].src_ld = ld;
    off += s->b[i].nc;
  }
  s->len = s->n ? s->b[0].nr * ld : 0;
}

/* Decompositions: 'W' (the save), 'R' (the read-back), 'V' (a second save
 * of the same data), for rank p of S. The replica read of c_attn sets
 * *replica (every rank reads the whole tensor; only rank 0 verifies). */
static boxset decomp(int t, char mode, int p, int S, int *replica) {
  boxset s;
  memset(&s, 0, sizeof s);
  int64_t R = rows_of(t), C = cols_of(t), a, n;
  int rev = S - 1 - p;
  *replica = 0;
  switch (t) {
    case T_A:
      if (mode == 'W') split(R, S, p, &a, &n), add_box(&s, a, n, 0, C);
      if (mode == 'R') split(C, S, rev, &a, &n), add_box(&s, 0, R, a, n);
      if (mode == 'V' && p == S - 1) add_box(&s, 0, R, 0, C);
      break;
    case T_B:
      if (mode == 'W') split(C, S, p, &a, &n), add_box(&s, 0, R, a, n);
      if (mode == 'R') split(R, S, p, &a, &n), add_box(&s, a, n, 0, C);
      if (mode == 'V') split(R, S, rev, &a, &n), add_box(&s, a, n, 0, C);
      break;
    case T_CATTN:
    case T_CATTN_OPT: {
      int64_t blk = C / 3;
      if (mode == 'W' || (mode == 'R' && t == T_CATTN_OPT)) {
        int q = mode == 'R' ? (p + 1) % S : p;
        for (int k = 0; k < 3; ++k) split(blk, S, q, &a, &n), add_box(&s, 0, R, k * blk + a, n);
        /* c_attn: side by side (direct I/O); its moment: one block after
         * the other (staged I/O). */
        if (t == T_CATTN) interleave(&s);
      } else if (mode == 'R') {
        add_box(&s, 0, R, 0, C);
        *replica = 1;
      } else if (t == T_CATTN) {
        split(R, S, p, &a, &n), add_box(&s, a, n, 0, C);
      } else {
        split(C, S, p, &a, &n), add_box(&s, 0, R, a, n);
      }
      break;
    }
    case T_BIAS:
      if (mode == 'W') split(R, S, p, &a, &n), add_box(&s, a, n, 0, 1);
      if (mode == 'R') {
        /* pieces rev and 2S-1-rev of 2S, stored high piece first */
        int64_t a2, n2;
        split(R, 2 * S, 2 * S - 1 - rev, &a2, &n2);
        split(R, 2 * S, rev, &a, &n);
        add_box(&s, a2, n2, 0, 1);
        add_box(&s, a, n, 0, 1);
      }
      if (mode == 'V' && p == 0) add_box(&s, 0, R, 0, 1);
      break;
    case T_ONLY0:
      if (mode == 'W' && p == 0) add_box(&s, 0, R, 0, C);
      if (mode == 'R') { /* pieces p and p+S of 2S, in file order */
        split(R, 2 * S, p, &a, &n), add_box(&s, a, n, 0, C);
        split(R, 2 * S, p + S, &a, &n), add_box(&s, a, n, 0, C);
      }
      if (mode == 'V' && p == S - 1) add_box(&s, 0, R, 0, C);
      break;
    case T_SKIP:
      if (mode == 'W') {
        int parts = S > 1 ? S - 1 : 1;
        if (p < parts) split(R, parts, p, &a, &n), add_box(&s, a, n, 0, C);
      }
      if (mode == 'R' && p == 0) add_box(&s, 0, R, 0, C);
      if (mode == 'V') split(C, S, p, &a, &n), add_box(&s, 0, R, a, n);
      break;
    case T_BIG:
      if (mode == 'W') split(R, S, p, &a, &n), add_box(&s, a, n, 0, C);
      if (mode == 'R') {
        split(C, S, p, &a, &n);
        add_box(&s, 0, R / 2, a, n);
        add_box(&s, R / 2, R - R / 2, a, n);
      }
      if (mode == 'V') split(C, S, rev, &a, &n), add_box(&s, 0, R, a, n);
      break;
    default: /* T_EMPTY: nobody holds anything */
      break;
  }
  return s;
}

static float *make_buf(const boxset *s) {
  float *b = calloc((size_t)(s->len > 0 ? s->len : 1), sizeof(float));
  if (!b) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return b;
}

/* Fill / compare a local buffer from / with the reference values. */
static void fill(int t, const boxset *s, float *buf) {
  for (int i = 0; i < s->n; ++i) {
    const td_ckpt_box *b = &s->b[i];
    for (int64_t r = 0; r < b->nr; ++r)
      for (int64_t c = 0; c < b->nc; ++c)
        buf[b->src_off + r * b->src_ld + c] =
            val(t, (b->r0 + r) * cols_of(t) + b->c0 + c);
  }
}

static int64_t mismatches(int t, const boxset *s, const float *buf) {
  int64_t bad = 0;
  for (int i = 0; i < s->n; ++i) {
    const td_ckpt_box *b = &s->b[i];
    for (int64_t r = 0; r < b->nr; ++r)
      for (int64_t c = 0; c < b->nc; ++c)
        bad += buf[b->src_off + r * b->src_ld + c] !=
               val(t, (b->r0 + r) * cols_of(t) + b->c0 + c);
  }
  return bad;
}

/* The checksum of the whole tensor, computed serially. */
static uint64_t ref_checksum(int t) {
  int64_t n = rows_of(t) * cols_of(t);
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  for (int64_t k = 0; k < n; ++k) x[k] = val(t, k);
  uint64_t s = td_ckpt_checksum(x, n, 0);
  free(x);
  return s;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...) {
  static char buf[16][1024];
  static int k;
  char *b = buf[k++ % 16];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof buf[0], fmt, ap);
  va_end(ap);
  return b;
}

static int exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

static void read_text(const char *p, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(p, "r");
  if (!f) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static void write_text(const char *p, const char *text) {
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* Copy src to dst, keeping only the first `keep` bytes (keep < 0: all). */
static int copy_file(const char *src, const char *dst, long keep) {
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  int ok = in && out;
  char buf[1 << 16];
  long done = 0;
  while (ok) {
    size_t want = sizeof buf;
    if (keep >= 0 && (long)want > keep - done) want = (size_t)(keep - done);
    if (want == 0) break;
    size_t n = fread(buf, 1, want, in);
    if (n == 0) break;
    ok = fwrite(buf, 1, n, out) == n;
    done += (long)n;
  }
  if (in) fclose(in);
  if (out) fclose(out);
  return ok;
}

static long file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

/* Save the first nt test tensors with decomposition `mode` as `step` into
 * dir. open_w != NULL: return the open writer instead of committing. */
static td_status save_n(const char *dir, int64_t step, char mode, int keep, int nt,
                        char *final_path, size_t cap, td_ckpt_writer **open_w) {
  td_ckpt_writer *w = NULL;
  TD_CHECK(td_ckpt_save_begin(g_comm, dir, step, &w));
  hid_t f = td_ckpt_writer_file(w);
  int64_t grid[3] = {g_size, 1, 1};
  td_status st = td_h5_attr_write_i64(f, "step", step);
  if (st == TD_OK) st = td_h5_attr_write_i64(f, "tokens_seen", step * 1000);
  if (st == TD_OK) st = td_h5_attr_write_i64v(f, "saved_grid", grid, 3);
  if (st == TD_OK) st = td_h5_write_string(f, "/config", "run: {name: test}\nmodel: {dim: 24}\n",
                                                 g_rank == 0);
  for (int t = 0; t < nt && st == TD_OK; ++t) {
    int rep;
    boxset s = decomp(t, mode, g_rank, g_size, &rep);
    float *buf = make_buf(&s);
    fill(t, &s, buf);
    st = td_ckpt_write_tensor(w, g_t[t].path, g_t[t].ndim, g_t[t].shape, s.n, s.b, buf);
    free(buf);
  }
  if (st != TD_OK) {
    td_ckpt_save_abort(&w);
    return st;
  }
  if (open_w) {
    *open_w = w;
    return TD_OK;
  }
  TD_CHECK(td_ckpt_save_commit(&w, keep, final_path, cap));
  return TD_OK;
}

/* All test tensors; the keep/abort checks save only 3 (collectives are slow
 * on an oversubscribed machine). */
static td_status save(const char *dir, int64_t step, char mode, int keep,
                      char *final_path, size_t cap, td_ckpt_writer **open_w) {
  return save_n(dir, step, mode, keep, T_N, final_path, cap, open_w);
}

/* Read every tensor with decomposition 'R' and verify; *bad = elements that
 * differ from the reference. */
static td_status read_all(const char *file, int64_t *bad, int64_t *step) {
  td_ckpt_reader *r = NULL;
  td_status st = TD_OK;
  *bad = 0;
  TD_CHECK(td_ckpt_open(g_comm, file, &r));
  st = td_h5_attr_read_i64(td_ckpt_reader_file(r), file, "step", step);
  for (int t = 0; t < T_N && st == TD_OK; ++t) {
    int rep;
    boxset s = decomp(t, 'R', g_rank, g_size, &rep);
    float *buf = make_buf(&s);
    int nv = rep && g_rank != 0 ? 0 : s.n;
    st = td_ckpt_read_tensor(r, g_t[t].path, g_t[t].ndim, g_t[t].shape, s.n, s.b, buf,
                             1, nv, s.b);
    if (st == TD_OK) *bad += mismatches(t, &s, buf);
    free(buf);
  }
  td_ckpt_close(&r);
  return st;
}

/* The stored checksum of every tensor (serial read on each rank). */
static int checksums_equal_ref(const char *file) {
  hid_t f = -1;
  int ok = td_h5_open(file, MPI_COMM_NULL, 0, &f) == TD_OK;
  for (int t = 0; t < T_N && ok; ++t) {
    hid_t d = H5Dopen2(f, g_t[t].path, H5P_DEFAULT);
    uint64_t v = 0;
    ok = d >= 0 && td_h5_attr_read_u64(d, file, "checksum", &v) == TD_OK &&
         v == ref_checksum(t);
    if (!ok && g_rank == 0)
      fprintf(stderr, "%s: %s checksum 0x%016llx, reference 0x%016llx\n", file,
              g_t[t].path, (unsigned long long)v, (unsigned long long)ref_checksum(t));
    if (d >= 0) H5Dclose(d);
  }
  td_h5_close(&f);
  return ok;
}

/* ---- the checks ------------------------------------------------------------------------------ */

static void test_roundtrip(const char *base) {
  char fin[1024] = "", text[256];
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/main", base);
  td_status st = save(dir, 1, 'W', 0, fin, sizeof fin, NULL);
  check(st == TD_OK && strcmp(fin, pathf("%s/step_00000001.h5", dir)) == 0,
        "save step 1 (rows, columns, interleaved blocks, 1-D, one writer, idle "
        "rank, empty tensor) -> %s",
        fin);
  read_text(pathf("%s/latest", dir), text, sizeof text);
  check(strcmp(text, "step_00000001.h5\n") == 0, "latest names step_00000001.h5");
  check(!exists(pathf("%s/step_00000001.h5.tmp", dir)), "no .tmp left after commit");
  int64_t bad = -1, step = -1;
  st = read_all(fin, &bad, &step);
  check(st == TD_OK && bad == 0 && step == 1,
        "read back with another decomposition (columns <-> rows, replicas, "
        "shifted blocks, 2 boxes per rank), checksums verified: %lld wrong",
        (long long)bad);
  check(checksums_equal_ref(fin), "stored checksums equal the serial checksum of "
                                  "each whole tensor");

  char dir2[1024];
  snprintf(dir2, sizeof dir2, "%s/other", base);
  char fin2[1024] = "";
  st = save(dir2, 1, 'V', 0, fin2, sizeof fin2, NULL);
  check(st == TD_OK && checksums_equal_ref(fin2),
        "a save of the same data from a different decomposition has the same "
        "checksums");
  st = read_all(fin2, &bad, &step);
  check(st == TD_OK && bad == 0, "and reads back the same data");

  /* the checksum is an order-free sum of per-element hashes */
  float x[5] = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f};
  uint64_t whole = td_ckpt_checksum(x, 5, 7);
  uint64_t parts = td_ckpt_checksum(x, 2, 7) + td_ckpt_checksum(x + 2, 3, 9);
  check(whole == parts && whole != td_ckpt_checksum(x, 5, 8) &&
            td_ckpt_checksum(x + 3, 1, 10) != td_ckpt_checksum(x + 4, 1, 10),
        "checksum: partial sums add; index and sign of zero matter");
}

static void test_keep(const char *base) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/keep", base);
  char fin[1024], text[256];
  int ok = 1;
  for (int s = 1; s <= 2; ++s) ok &= save_n(dir, s, 'W', 2, 3, fin, sizeof fin, NULL) == TD_OK;
  check(ok && exists(pathf("%s/step_00000001.h5", dir)) &&
            exists(pathf("%s/step_00000002.h5", dir)),
        "keep=2: steps 1 and 2 kept");
  /* a stale .tmp of a crashed save, and a later step from another run */
  if (g_rank == 0) {
    write_text(pathf("%s/step_00000000.h5.tmp", dir), "partial");
    ok = copy_file(pathf("%s/step_00000001.h5", dir), pathf("%s/step_00000100.h5", dir), -1);
  }
  MPI_Barrier(g_comm);
  td_ckpt_writer *w = NULL;
  td_status st = save_n(dir, 3, 'W', 2, 3, NULL, 0, &w);
  read_text(pathf("%s/latest", dir), text, sizeof text);
  check(st == TD_OK && exists(pathf("%s/step_00000001.h5", dir)) &&
            exists(pathf("%s/step_00000003.h5.tmp", dir)) &&
            strcmp(text, "step_00000002.h5\n") == 0,
        "during save of step 3: step 1 still there, latest still names step 2");
  st = td_ckpt_save_commit(&w, 2, fin, sizeof fin);
  MPI_Barrier(g_comm);
  read_text(pathf("%s/latest", dir), text, sizeof text);
  check(st == TD_OK && w == NULL && !exists(pathf("%s/step_00000001.h5", dir)) &&
            exists(pathf("%s/step_00000002.h5", dir)) &&
            exists(pathf("%s/step_00000003.h5", dir)) &&
            !exists(pathf("%s/step_00000003.h5.tmp", dir)) &&
            strcmp(text, "step_00000003.h5\n") == 0,
        "after commit of step 3: step 1 deleted, 2 and 3 kept, latest names step 3");
  check(!exists(pathf("%s/step_00000000.h5.tmp", dir)) &&
            exists(pathf("%s/step_00000100.h5", dir)),
        "commit removes stale .tmp files, leaves a larger step from another run");

  /* abort: the .tmp goes, latest stays */
  st = save_n(dir, 4, 'W', 2, 3, NULL, 0, &w);
  td_ckpt_save_abort(&w);
  MPI_Barrier(g_comm);
  read_text(pathf("%s/latest", dir), text, sizeof text);
  check(st == TD_OK && w == NULL && !exists(pathf("%s/step_00000004.h5.tmp", dir)) &&
            !exists(pathf("%s/step_00000004.h5", dir)) &&
            strcmp(text, "step_00000003.h5\n") == 0,
        "abort removes the .tmp and leaves latest alone");

  /* boxes that do not cover the tensor: every rank gets the same error, at the
   * commit (checksums and element counts are reduced once, there) */
  st = td_ckpt_save_begin(g_comm, dir, 5, &w);
  int64_t shape[2] = {8, 4};
  float buf[32];
  memset(buf, 0, sizeof buf);
  td_ckpt_box b = {0, g_rank == 0 ? 7 : 0, 0, 4, 0, 4}; /* row 7 missing */
  if (st == TD_OK) st = td_ckpt_write_tensor(w, "/model/hole", 2, shape, 1, &b, buf);
  if (st == TD_OK) st = td_ckpt_save_commit(&w, 0, fin, sizeof fin);
  check_err(st, TD_ERR_INTERNAL, "write: boxes that leave a hole", "/model/hole",
            "hold 28 elements", (const char *)NULL);
  if (w) td_ckpt_save_abort(&w);
  MPI_Barrier(g_comm);
  check(!exists(pathf("%s/step_00000005.h5.tmp", dir)) && !exists(pathf("%s/step_00000005.h5", dir)),
        "a failed commit leaves no file");
  /* a box outside the tensor on the last rank only */
  st = td_ckpt_save_begin(g_comm, dir, 5, &w);
  td_ckpt_box out = {g_rank == g_size - 1 ? 6 : 0, g_rank == g_size - 1 ? 4 : 0, 0, 4, 0, 4};
  if (st == TD_OK) st = td_ckpt_write_tensor(w, "/model/outside", 2, shape, 1, &out, buf);
  if (st == TD_OK) st = td_ckpt_save_commit(&w, 0, fin, sizeof fin);
  check_err(st, TD_ERR_INTERNAL, "write: a box outside the tensor on one rank",
            "/model/outside", "lies outside", (const char *)NULL);
  if (w) td_ckpt_save_abort(&w);
  MPI_Barrier(g_comm);
  check(!exists(pathf("%s/step_00000005.h5.tmp", dir)), "abort after an error");
}

static void test_resolve(const char *base) {
  char p[1024];
  int found = -1;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/main", base);
  td_status st = td_ckpt_resolve(dir, "never", &found, p, sizeof p);
  check(st == TD_OK && found == 0, "resolve never -> not found");
  st = td_ckpt_resolve(dir, "auto", &found, p, sizeof p);
  check(st == TD_OK && found == 1 && strcmp(p, pathf("%s/step_00000001.h5", dir)) == 0,
        "resolve auto -> %s", p);
  st = td_ckpt_resolve(pathf("%s/nothing_here", base), "auto", &found, p, sizeof p);
  check(st == TD_OK && found == 0, "resolve auto with no latest -> not found");
  st = td_ckpt_resolve(dir, pathf("%s/step_00000001.h5", dir), &found, p, sizeof p);
  check(st == TD_OK && found == 1, "resolve a file path");
  st = td_ckpt_resolve(dir, pathf("%s/step_00000042.h5", dir), &found, p, sizeof p);
  check_err(st, TD_ERR_CKPT, "resolve a missing file", "step_00000042.h5",
            (const char *)NULL);

  char d1[1024], d2[1024];
  snprintf(d1, sizeof d1, "%s/dangling", base);
  snprintf(d2, sizeof d2, "%s/dangling0", base);
  if (g_rank == 0) {
    mkdir(d1, 0777);
    mkdir(d2, 0777);
    write_text(pathf("%s/step_00000004.h5", d1), "x");
    write_text(pathf("%s/step_00000002.h5", d1), "x");
    write_text(pathf("%s/step_00000009.h5.tmp", d1), "x");
    write_text(pathf("%s/latest", d1), "step_00000007.h5\n");
    write_text(pathf("%s/latest", d2), "step_00000007.h5\n");
  }
  MPI_Barrier(g_comm);
  st = td_ckpt_resolve(d1, "auto", &found, p, sizeof p);
  check_err(st, TD_ERR_CKPT, "latest names a missing file",
            pathf("%s/latest names step_00000007.h5, which does not exist", d1),
            pathf("the newest committed checkpoint in %s is step_00000004.h5", d1),
            (const char *)NULL);
  st = td_ckpt_resolve(d2, "auto", &found, p, sizeof p);
  check_err(st, TD_ERR_CKPT, "latest names a missing file, none committed",
            "step_00000007.h5, which does not exist", "there is none",
            (const char *)NULL);
}

static void test_errors(const char *base) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/main", base);
  char good[1024];
  snprintf(good, sizeof good, "%s/step_00000001.h5", dir);
  char fmt[1024], ver[1024];
  snprintf(fmt, sizeof fmt, "%s/bad_format.h5", base);
  snprintf(ver, sizeof ver, "%s/bad_version.h5", base);
  char cor[1024], tru[1024];
  snprintf(cor, sizeof cor, "%s/corrupt.h5", base);
  snprintf(tru, sizeof tru, "%s/truncated.h5", base);
  char txt[1024], zero[1024];
  snprintf(txt, sizeof txt, "%s/text.h5", base);
  snprintf(zero, sizeof zero, "%s/empty.h5", base);
  if (g_rank == 0) {
    hid_t f = -1;
    copy_file(good, fmt, -1);
    copy_file(good, ver, -1);
    copy_file(good, cor, -1);
    copy_file(good, tru, file_size(good) / 2);
    copy_file(good, zero, 0);
    write_text(txt, "run: {name: not hdf5}\n");
    if (td_h5_open(fmt, MPI_COMM_NULL, 1, &f) == TD_OK)
      td_h5_attr_write_str(f, "format", "someone-elses-format");
    td_h5_close(&f);
    if (td_h5_open(ver, MPI_COMM_NULL, 1, &f) == TD_OK)
      td_h5_attr_write_i64(f, "format_version", 2);
    td_h5_close(&f);
    /* rewrite one element of /model/a.weight */
    if (td_h5_open(cor, MPI_COMM_NULL, 1, &f) == TD_OK) {
      hid_t d = H5Dopen2(f, "/model/a.weight", H5P_DEFAULT);
      hid_t fs = H5Dget_space(d);
      hsize_t start[2] = {5, 3}, cnt[2] = {1, 1}, one = 1;
      hid_t ms = H5Screate_simple(1, &one, NULL);
      float v = val(T_A, 5 * 24 + 3) + 1.0f;
      H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
      H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &v);
      H5Sclose(ms);
      H5Sclose(fs);
      H5Dclose(d);
    }
    td_h5_close(&f);
    td_error_clear();
  }
  MPI_Barrier(g_comm);

  td_ckpt_reader *r = NULL;
  td_status st = td_ckpt_open(g_comm, fmt, &r);
  check_err(st, TD_ERR_CKPT, "open: wrong format attribute", fmt, "not a trident checkpoint",
            "someone-elses-format", (const char *)NULL);
  td_ckpt_close(&r);
  st = td_ckpt_open(g_comm, ver, &r);
  check_err(st, TD_ERR_CKPT, "open: format_version 2", ver, "format_version is 2",
            (const char *)NULL);
  td_ckpt_close(&r);
  st = td_ckpt_open(g_comm, tru, &r);
  check_err(st, TD_ERR_CKPT, "open: truncated file", tru, (const char *)NULL);
  td_ckpt_close(&r);
  st = td_ckpt_open(g_comm, zero, &r);
  check_err(st, TD_ERR_CKPT, "open: empty file", zero, (const char *)NULL);
  td_ckpt_close(&r);
  st = td_ckpt_open(g_comm, txt, &r);
  check_err(st, TD_ERR_CKPT, "open: not an HDF5 file", txt, (const char *)NULL);
  td_ckpt_close(&r);
  st = td_ckpt_open(g_comm, pathf("%s/missing.h5", base), &r);
  check_err(st, TD_ERR_CKPT, "open: missing file", "missing.h5", (const char *)NULL);
  td_ckpt_close(&r);

  st = td_ckpt_open(g_comm, good, &r);
  check(st == TD_OK && r && strcmp(td_ckpt_reader_path(r), good) == 0, "open a good file");
  float buf[37 * 25];
  int64_t s1[2] = {37, 25}, s2[2] = {37, 24}, s3[1] = {37 * 24};
  td_ckpt_box b = {0, g_rank == 0 ? 37 : 0, 0, 24, 0, 24};
  st = td_ckpt_read_tensor(r, "/model/nope.weight", 2, s2, 1, &b, buf, 1, 1, &b);
  check_err(st, TD_ERR_CKPT, "read: missing tensor", good,
            "tensor /model/nope.weight is missing", (const char *)NULL);
  st = td_ckpt_read_tensor(r, "/model/a.weight", 2, s1, 1, &b, buf, 1, 1, &b);
  check_err(st, TD_ERR_CKPT, "read: wrong shape", good,
            "tensor /model/a.weight has shape (37, 24), expected (37, 25)",
            (const char *)NULL);
  td_ckpt_box b1 = {0, g_rank == 0 ? 37 * 24 : 0, 0, 1, 0, 1};
  st = td_ckpt_read_tensor(r, "/model/a.weight", 1, s3, 1, &b1, buf, 1, 1, &b1);
  check_err(st, TD_ERR_CKPT, "read: wrong rank", "has shape (37, 24), expected (888)",
            (const char *)NULL);
  /* verify boxes that do not cover the tensor */
  st = td_ckpt_read_tensor(r, "/model/a.weight", 2, s2, 1, &b, buf, 1, 0, &b);
  check_err(st, TD_ERR_INTERNAL, "read: verify boxes that cover nothing",
            "verify boxes hold 0 elements", (const char *)NULL);
  st = td_ckpt_read_tensor(r, "/model/a.weight", 2, s2, 1, &b, buf, 1, 1, &b);
  check(st == TD_OK, "the reader is still usable after errors");
  td_ckpt_close(&r);
  check(r == NULL, "close sets the reader to NULL");

  st = td_ckpt_open(g_comm, cor, &r);
  if (st == TD_OK)
    st = td_ckpt_read_tensor(r, "/model/a.weight", 2, s2, 1, &b, buf, 1, 1, &b);
  check_err(st, TD_ERR_CKPT, "read: one element rewritten", cor, "/model/a.weight",
            "CHECKSUM MISMATCH", (const char *)NULL);
  /* without verify the damaged tensor reads, and the others verify */
  if (r) st = td_ckpt_read_tensor(r, "/model/a.weight", 2, s2, 1, &b, buf, 0, 0, NULL);
  int64_t s4[2] = {24, 40};
  float *bb = malloc(24 * 40 * sizeof *bb);
  td_ckpt_box b4 = {0, g_rank == 0 ? 24 : 0, 0, 40, 0, 40};
  if (r && st == TD_OK)
    st = td_ckpt_read_tensor(r, "/model/b.weight", 2, s4, 1, &b4, bb, 1, 1, &b4);
  free(bb);
  check(r && st == TD_OK, "damaged file: reading without verify works, other tensors verify");
  td_ckpt_close(&r);

  /* ckpt info (serial, rank 0) */
  int ok = 1;
  if (g_rank == 0) {
    char *out = NULL;
    size_t len = 0;
    FILE *ms = open_memstream(&out, &len);
    st = td_ckpt_info(good, ms);
    fclose(ms);
    if (g_size == 1) printf("---- td_ckpt_info %s\n%s----\n", good, out);
    ok = st == TD_OK && strstr(out, "step             1\n") &&
         strstr(out, "tokens_seen      1000\n") && strstr(out, "saved_grid       [") &&
         strstr(out, "trident_version") && strstr(out, "  run: {name: test}\n") &&
         strstr(out, "/model/a.weight") && strstr(out, "(37, 24)") &&
         strstr(out, "/optim/exp_avg/h.0.attn.c_attn.weight") &&
         strstr(out, "(50)") && strstr(out, "9 tensors") && strstr(out, "all checksums ok") &&
         !strstr(out, "MISMATCH");
    if (!ok) printf("%s", out);
    free(out);
    td_error_clear();
  }
  check(ok, "ckpt info: attributes, config, every tensor with shape, checksums ok");
  ok = 1;
  if (g_rank == 0) {
    char *out = NULL;
    size_t len = 0;
    FILE *ms = open_memstream(&out, &len);
    st = td_ckpt_info(cor, ms);
    fclose(ms);
    const char *line = strstr(out, "/model/a.weight");
    ok = st == TD_ERR_CKPT && line && strstr(line, "CHECKSUM MISMATCH (stored 0x") &&
         strstr(out, "/model/b.weight") && strstr(strstr(out, "/model/b.weight"), "checksum ok") &&
         strstr(td_error_message(), cor);
    if (!ok) printf("%s\n%s\n", out, td_error_message());
    free(out);
    td_error_clear();
    ms = open_memstream(&out, &len);
    st = td_ckpt_info(fmt, ms);
    fclose(ms);
    ok = ok && st == TD_ERR_CKPT && strstr(td_error_message(), "not a trident checkpoint");
    free(out);
    td_error_clear();
    ms = open_memstream(&out, &len);
    st = td_ckpt_info(tru, ms);
    fclose(ms);
    ok = ok && st == TD_ERR_CKPT && strstr(td_error_message(), tru);
    free(out);
    td_error_clear();
  }
  check(ok, "ckpt info: damaged, foreign and truncated files -> TD_ERR_CKPT");
}

/* ---- modes for the crash test ------------------------------------------------------------ */

static int run_save(const char *dir, int64_t step) {
  char fin[1024];
  td_status st = save(dir, step, 'W', 0, fin, sizeof fin, NULL);
  if (st != TD_OK) {
    fprintf(stderr, "[rank %d] save failed: %s\n%s", g_rank, td_error_message(),
            td_error_trace());
    return 1;
  }
  if (g_rank == 0) printf("saved %s\n", fin);
  return 0;
}

static int run_verify(const char *dir, int64_t want_step) {
  char p[1024];
  int found = 0;
  int64_t bad = -1, step = -1;
  td_status st = td_ckpt_resolve(dir, "auto", &found, p, sizeof p);
  if (st == TD_OK && !found) st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__, "%s: no latest", dir);
  if (st == TD_OK) st = read_all(p, &bad, &step);
  int ok = st == TD_OK && bad == 0 && step == want_step;
  if (!ok)
    fprintf(stderr, "[rank %d] verify %s: %s (bad %lld, step %lld)\n", g_rank, p,
            st == TD_OK ? "wrong data" : td_error_message(), (long long)bad,
            (long long)step);
  else if (g_rank == 0)
    printf("verified %s: step %lld, every tensor matches its checksum\n", p,
           (long long)step);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g_comm, &g_rank);
  MPI_Comm_size(g_comm, &g_size);
  td_h5_init();
  if (argc < 2) {
    if (g_rank == 0) fprintf(stderr, "usage: test_ckpt TMPDIR [--save|--verify STEP]\n");
    MPI_Finalize();
    return 2;
  }
  int rc;
  if (argc == 4 && strcmp(argv[2], "--save") == 0) {
    rc = run_save(argv[1], atoll(argv[3]));
  } else if (argc == 4 && strcmp(argv[2], "--verify") == 0) {
    rc = run_verify(argv[1], atoll(argv[3]));
  } else {
    static char base[1024];
    snprintf(base, sizeof base, "%s/np%d", argv[1], g_size);
    if (g_rank == 0) {
      char cmd[2200];
      snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", base, base);
      if (system(cmd) != 0) fprintf(stderr, "cannot prepare %s\n", base);
    }
    MPI_Barrier(g_comm);
    test_roundtrip(base);
    test_keep(base);
    test_resolve(base);
    test_errors(base);
    if (g_rank == 0) printf("%d passed, %d failed\n", g_pass, g_fail);
    rc = g_fail > 0;
  }
  MPI_Comm_free(&g_comm);
  MPI_Finalize();
  return rc;
}
