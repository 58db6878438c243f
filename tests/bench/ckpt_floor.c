/* ckpt_floor.c — the fixed cost of a checkpoint save at this rank count:
 * the median time of an empty save (td_ckpt_save_begin + td_ckpt_save_commit
 * with no tensor: create the file with MPI-IO, root attributes, close, fsync,
 * rename, `latest`) and of one 8-byte MPI_Allreduce. With more ranks than
 * cores every synchronisation waits for a scheduler time slice, and an empty
 * parallel HDF5 file alone can cost more than writing the data; this prints
 * what that floor is, beside the save benchmark (tests/bench/ckpt_bench.sh).
 *
 * Usage: mpiexec -n K ckpt_floor DIR [REPEATS]
 * Prints: "empty save <ms> ms, allreduce <us> us" (medians, rank 0). */
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#include "io/td_ckpt.h"
#include "io/td_h5.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  td_h5_init();
  if (argc < 2) {
    if (rank == 0) fprintf(stderr, "usage: ckpt_floor DIR [REPEATS]\n");
    MPI_Finalize();
    return 2;
  }
  const char *dir = argv[1];
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  if (reps < 1 || reps > 1000) reps = 5;
  double *save = calloc((size_t)reps, sizeof *save);
  double red[200];
  int nred = (int)(sizeof red / sizeof red[0]);
  td_status st = save ? td_ckpt_setup(MPI_COMM_WORLD) : TD_ERR_NOMEM;
  for (int r = 0; r < reps && st == TD_OK; ++r) {
    td_ckpt_writer *w = NULL;
    char path[4096];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    st = td_ckpt_save_begin(MPI_COMM_WORLD, dir, r + 1, &w);
    if (st == TD_OK) st = td_ckpt_save_commit(&w, 1, path, sizeof path);
    save[r] = MPI_Wtime() - t0;
  }
  long long x = 1, y = 0;
  for (int i = 0; i < nred && st == TD_OK; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(&x, &y, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    red[i] = MPI_Wtime() - t0;
  }
  if (st != TD_OK) {
    fprintf(stderr, "ckpt_floor: rank %d: %s\n", rank, td_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0)
    printf("empty save %.1f ms, allreduce %.0f us\n", 1e3 * median(save, reps),
           1e6 * median(red, nred));
  free(save);
  MPI_Finalize();
  return 0;
}
