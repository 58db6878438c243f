/* ckpt_bench.c — checkpoint save/load bandwidth with GPT-2 124M shapes
 * (~497 MB of float32), each tensor split over the ranks the way tensor
 * parallelism splits it (c_attn in 3 interleaved column blocks, c_fc by
 * columns, the projections by rows, wte by rows; the rest by rows).
 *
 * Usage: mpiexec -n K ckpt_bench DIR [LAYERS] [REPEATS]
 * Per repeat: rank 0 first times `dd if=/dev/zero of=DIR/dd.tmp bs=1M
 * count=500 conv=fsync` (then deletes it), then the save (begin -> commit,
 * fsync included, keep = 0; the previous save is deleted before timing),
 * then the read-back with checksums verified. Prints MB/s of each, so the
 * two are measured under the same load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "td_log.h"

/* CPU seconds used by this process (all threads). */
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
  char name[64];
  int ndim;
  int64_t shape[2];
  int how; /* 0 rows, 1 columns, 3 three interleaved column blocks */
} spec;

static void split(int64_t n, int parts, int p, int64_t *a, int64_t *len) {
  *a = n * p / parts;
  *len = n * (p + 1) / parts - *a;
}

/* This rank's boxes for a tensor; data stored side by side (row-major). */
static int boxes_for(const spec *t, int p, int S, td_ckpt_box *b, int64_t *len) {
  int64_t R = t->shape[0], C = t->ndim == 2 ? t->shape[1] : 1, a, n;
  if (t->how == 0) {
    split(R, S, p, &a, &n);
    b[0] = (td_ckpt_box){a, n, 0, C, 0, C};
    *len = n * C;
    return 1;
  }
  int k = t->how == 3 ? 3 : 1;
  int64_t blk = C / k;
  split(blk, S, p, &a, &n);
  for (int i = 0; i < k; ++i) b[i] = (td_ckpt_box){0, R, i * blk + a, n, i * n, k * n};
  *len = R * k * n;
  return k;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  td_h5_init();
  if (argc < 2) {
    if (rank == 0) fprintf(stderr, "usage: ckpt_bench DIR [LAYERS] [REPEATS]\n");
    MPI_Finalize();
    return 2;
  }
  const char *dir = argv[1];
  int layers = argc > 2 ? atoi(argv[2]) : 12, reps = argc > 3 ? atoi(argv[3]) : 3;
  int64_t V = 50257, T = 1024, C = 768;
  int nt = 0;
  spec *ts = calloc((size_t)(4 + 12 * layers), sizeof *ts);
#define ADD(nm, nd, r, c, h)                                           \
  do {                                                                 \
    snprintf(ts[nt].name, sizeof ts[nt].name, "/model/%s", nm);        \
    ts[nt].ndim = nd;                                                  \
    ts[nt].shape[0] = r;                                               \
    ts[nt].shape[1] = c;                                               \
    ts[nt].how = h;                                                    \
    nt++;                                                              \
  } while (0)
  ADD("wte.weight", 2, V, C, 0);
  ADD("wpe.weight", 2, T, C, 0);
  for (int l = 0; l < layers; ++l) {
    char n[64];
#define L(s) (snprintf(n, sizeof n, "h.%d.%s", l, s), n)
    ADD(L("ln_1.weight"), 1, C, 1, 0);
    ADD(L("ln_1.bias"), 1, C, 1, 0);
    ADD(L("attn.c_attn.weight"), 2, C, 3 * C, 3);
    ADD(L("attn.c_attn.bias"), 1, 3 * C, 1, 0);
    ADD(L("attn.c_proj.weight"), 2, C, C, 0);
    ADD(L("attn.c_proj.bias"), 1, C, 1, 0);
    ADD(L("ln_2.weight"), 1, C, 1, 0);
    ADD(L("ln_2.bias"), 1, C, 1, 0);
    ADD(L("mlp.c_fc.weight"), 2, C, 4 * C, 1);
    ADD(L("mlp.c_fc.bias"), 1, 4 * C, 1, 0);
    ADD(L("mlp.c_proj.weight"), 2, 4 * C, C, 0);
    ADD(L("mlp.c_proj.bias"), 1, C, 1, 0);
  }
  ADD("ln_f.weight", 1, C, 1, 0);
  ADD("ln_f.bias", 1, C, 1, 0);

  /* one buffer per tensor, filled with arbitrary values */
  float **buf = calloc((size_t)nt, sizeof *buf);
  td_ckpt_box (*bx)[3] = calloc((size_t)nt, sizeof *bx);
  int *nb = calloc((size_t)nt, sizeof *nb);
  int64_t total = 0, mine = 0;
  for (int i = 0; i < nt; ++i) {
    int64_t len;
    nb[i] = boxes_for(&ts[i], rank, size, bx[i], &len);
    buf[i] = malloc((size_t)(len > 0 ? len : 1) * sizeof(float));
    for (int64_t k = 0; k < len; ++k) buf[i][k] = (float)((k * 2654435761u) % 1000) * 1e-3f;
    total += ts[i].shape[0] * (ts[i].ndim == 2 ? ts[i].shape[1] : 1);
    mine += len;
  }
  double cs0 = td_now();
  uint64_t sink = 0;
  for (int i = 0; i < nt; ++i)
    for (int b = 0; b < nb[i]; ++b)
      sink += td_ckpt_checksum(buf[i] + bx[i][b].src_off, bx[i][b].nr * bx[i][b].nc, 0);
  double cs = td_now() - cs0;
  if (rank == 0)
    printf("%d ranks, %d tensors, %.1f MB; checksum of this rank's %.1f MB alone: %.3f s "
           "(%llx)\n",
           size, nt, (double)total * 4e-6, (double)mine * 4e-6, cs,
           (unsigned long long)(sink & 0xff));
  for (int r = 0; r < reps; ++r) {
    char fin[4096], cmd[4200];
    double dd = 0;
    if (rank == 0) {
      snprintf(cmd, sizeof cmd,
               "dd if=/dev/zero of=%s/dd.tmp bs=1M count=500 conv=fsync 2>/dev/null", dir);
      double d0 = td_now();
      if (system(cmd) != 0) fprintf(stderr, "dd failed\n");
      dd = td_now() - d0;
      snprintf(cmd, sizeof cmd, "%s/dd.tmp", dir);
      unlink(cmd);
      if (r > 0) {
        snprintf(cmd, sizeof cmd, "%s/step_%08d.h5", dir, r);
        unlink(cmd);
      }
      sync();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = td_now(), c0 = cpu_now();
    td_ckpt_writer *w = NULL;
    td_status st = td_ckpt_save_begin(MPI_COMM_WORLD, dir, r + 1, &w);
    double t1 = td_now();
    for (int i = 0; i < nt && st == TD_OK; ++i)
      st = td_ckpt_write_tensor(w, ts[i].name, ts[i].ndim, ts[i].shape, nb[i], bx[i], buf[i]);
    double t2 = td_now();
    if (st == TD_OK) st = td_ckpt_save_commit(&w, 0, fin, sizeof fin);
    double t3 = td_now(), cpu = cpu_now() - c0, cpu_max = 0;
    MPI_Reduce(&cpu, &cpu_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (st != TD_OK) {
      fprintf(stderr, "[%d] %s\n%s", rank, td_error_message(), td_error_trace());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    struct stat sb;
    stat(fin, &sb);
    double mb = (double)sb.st_size * 1e-6;
    /* read back, verified */
    td_ckpt_reader *rd = NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    double r0 = td_now();
    st = td_ckpt_open(MPI_COMM_WORLD, fin, &rd);
    for (int i = 0; i < nt && st == TD_OK; ++i)
      st = td_ckpt_read_tensor(rd, ts[i].name, ts[i].ndim, ts[i].shape, nb[i], bx[i], buf[i],
                               1, nb[i], bx[i]);
    td_ckpt_close(&rd);
    double r1 = td_now();
    if (st != TD_OK) {
      fprintf(stderr, "[%d] %s\n%s", rank, td_error_message(), td_error_trace());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
      printf("dd %.0f MB/s | save %d: %.1f MB in %.3f s = %.0f MB/s = %.2f x dd (begin "
             "%.3f, write %.3f, commit %.3f; max CPU of a rank %.3f s) | load+verify "
             "%.3f s = %.0f MB/s\n",
             524.288 / dd, r + 1, mb, t3 - t0, mb / (t3 - t0),
             (mb / (t3 - t0)) / (524.288 / dd), t1 - t0, t2 - t1, t3 - t2, cpu_max,
             r1 - r0, mb / (r1 - r0));
  }
  for (int i = 0; i < nt; ++i) free(buf[i]);
  free(buf);
  free(bx);
  free(nb);
  free(ts);
  MPI_Finalize();
  return 0;
}
