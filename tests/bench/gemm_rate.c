/* gemm_rate.c — the CPU back-end's matmul rate on a GPT-2 model's own shapes,
 * for tests/bench/cpu_vs_torch.sh (trident's "utilisation" = model FLOP/s over
 * this rate). Not a test.
 *
 *   gemm_rate [--layers L] [--dim C] [--vocab V] [--tokens M] [--threads n]
 *             [--reps r]
 *
 * The products are the ones app/model.c issues, with the same transposes:
 * per layer the four linear layers (C→3C, C→C, C→4C, 4C→C), each as
 *   forward  Y (M,out)  = X (M,in) · W (in,out)
 *   dW       (in,out)  += Xᵀ · dY
 *   dX       (M,in)     = dY · Wᵀ
 * and the tied LM head (C→V):
 *   logits (M,V) = X · wteᵀ,  dwte (V,C) += dlᵀ · X,  dX (M,C) = dl · wte.
 * One warm-up round, then `reps` rounds; each product's time is the median of
 * its rounds (robust on a shared host). The rate is FLOP-weighted over the
 * model: Σ flops / Σ time with the layer products counted L times.
 * Prints one JSON line: {"gflops", "gflops_best", "layer_gflops",
 * "head_gflops", "matmul", "threads", ...}. Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/td_kernels.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

/* One product of a linear layer: which = 0 forward, 1 dW, 2 dX.
 * head: W is wte (V,C) with out = V, in = C, as the model uses it. */
static td_status product(td_kernels *k, int head, int which, int64_t M, int64_t in,
                         int64_t out, const float *X, const float *W, float *Y, float *dW,
                         float *dX) {
  if (!head) {
    if (which == 0) return k->gemm(k, 0, 0, M, out, in, X, TD_F32, W, TD_F32, 0.0f, Y, TD_F32);
    if (which == 1) return k->gemm(k, 1, 0, in, out, M, X, TD_F32, Y, TD_F32, 1.0f, dW, TD_F32);
    return k->gemm(k, 0, 1, M, in, out, Y, TD_F32, W, TD_F32, 0.0f, dX, TD_F32);
  }
  if (which == 0) return k->gemm(k, 0, 1, M, out, in, X, TD_F32, W, TD_F32, 0.0f, Y, TD_F32);
  if (which == 1) return k->gemm(k, 1, 0, out, in, M, Y, TD_F32, X, TD_F32, 1.0f, dW, TD_F32);
  return k->gemm(k, 0, 0, M, in, out, Y, TD_F32, W, TD_F32, 0.0f, dX, TD_F32);
}

static void fill(float *p, int64_t n, int64_t salt) {
  for (int64_t i = 0; i < n; i++) p[i] = 1e-2f * (float)(((i + salt) * 7919) % 97 - 48);
}

static int64_t arg_i(int argc, char **argv, const char *name, int64_t def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return strtoll(argv[i + 1], NULL, 10);
  return def;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: gemm_rate [--layers L] [--dim C] [--vocab V] [--tokens M] "
             "[--threads n] [--reps r]\n");
      return 0;
    }
  int64_t L = arg_i(argc, argv, "--layers", 6), C = arg_i(argc, argv, "--dim", 384);
  int64_t V = arg_i(argc, argv, "--vocab", 256), M = arg_i(argc, argv, "--tokens", 1024);
  int threads = (int)arg_i(argc, argv, "--threads", 2), reps = (int)arg_i(argc, argv, "--reps", 5);
  if (L < 0 || C <= 0 || V <= 0 || M <= 0 || threads <= 0 || reps <= 0) {
    fprintf(stderr, "gemm_rate: sizes, threads and reps must be positive\n");
    return 1;
  }
  td_kernels *k = NULL;
  if (td_kernels_cpu_create(threads, &k) != TD_OK) {
    fprintf(stderr, "gemm_rate: %s\n", td_error_message());
    return 1;
  }
  /* Shapes (in, out); the last one is the head. */
  const int64_t shp[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}};
  int64_t maxw = V * C > 4 * C * C ? V * C : 4 * C * C;
  int64_t maxy = M * (V > 4 * C ? V : 4 * C);
  float *X = NULL, *W = NULL, *Y = NULL, *dW = NULL, *dX = NULL;
  td_status st = TD_OK;
  if ((st = k->alloc(k, (void **)&X, (size_t)(M * 4 * C) * 4, "X")) != TD_OK ||
      (st = k->alloc(k, (void **)&dX, (size_t)(M * 4 * C) * 4, "dX")) != TD_OK ||
      (st = k->alloc(k, (void **)&W, (size_t)maxw * 4, "W")) != TD_OK ||
      (st = k->alloc(k, (void **)&dW, (size_t)maxw * 4, "dW")) != TD_OK ||
      (st = k->alloc(k, (void **)&Y, (size_t)maxy * 4, "Y")) != TD_OK) {
    fprintf(stderr, "gemm_rate: %s\n", td_error_message());
    return 1;
  }
  fill(X, M * 4 * C, 1);
  fill(W, maxw, 2);
  fill(Y, maxy, 3);

  double *t = calloc((size_t)(15 * reps), sizeof(double));
  double med[15], best[15];
  if (!t) return 1;
  for (int r = -1; r < reps; r++)
    for (int s = 0; s < 5; s++)
      for (int w = 0; w < 3; w++) {
        double t0 = now_s();
        st = product(k, s == 4, w, M, shp[s][0], shp[s][1], X, W, Y, dW, dX);
        if (st == TD_OK) st = k->sync(k);
        if (st != TD_OK) {
          fprintf(stderr, "gemm_rate: %s\n", td_error_message());
          return 1;
        }
        if (r >= 0) t[(s * 3 + w) * reps + r] = now_s() - t0;
      }
  for (int i = 0; i < 15; i++) {
    best[i] = minimum(t + i * reps, reps);
    med[i] = median(t + i * reps, reps);
  }
  double fl_layer = 0, tl_med = 0, tl_best = 0, fl_head, th_med = 0, th_best = 0;
  for (int s = 0; s < 4; s++) {
    fl_layer += 6.0 * (double)M * (double)shp[s][0] * (double)shp[s][1];
    for (int w = 0; w < 3; w++) tl_med += med[s * 3 + w], tl_best += best[s * 3 + w];
  }
  fl_head = 6.0 * (double)M * (double)C * (double)V;
  for (int w = 0; w < 3; w++) th_med += med[12 + w], th_best += best[12 + w];
  double fl = (double)L * fl_layer + fl_head;
  double gf = fl / ((double)L * tl_med + th_med) * 1e-9;
  double gf_best = fl / ((double)L * tl_best + th_best) * 1e-9;
  printf("{\"gflops\": %.2f, \"gflops_best\": %.2f, \"layer_gflops\": %.2f, "
         "\"head_gflops\": %.2f, \"matmul\": \"%s\", \"threads\": %d, \"layers\": %lld, "
         "\"dim\": %lld, \"vocab\": %lld, \"tokens\": %lld, \"reps\": %d, "
         "\"model_matmul_gflop\": %.4f, \"products_ms\": [",
         gf, gf_best, fl_layer / tl_med * 1e-9, fl_head / th_med * 1e-9, k->matmul_name,
         threads, (long long)L, (long long)C, (long long)V, (long long)M, reps, fl * 1e-9);
  for (int i = 0; i < 15; i++) printf("%s%.3f", i ? ", " : "", med[i] * 1e3);
  printf("]}\n");
  free(t);
  k->free(k, X), k->free(k, dX), k->free(k, W), k->free(k, dW), k->free(k, Y);
  td_kernels_destroy(&k);
  return 0;
}
