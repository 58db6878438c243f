/* attention_rate.c — the CPU back-end's two attentions side by side on one
 * shape: the materialised kernels (gqa_fwd/gqa_bwd) and the fused ones
 * (flash_fwd/flash_bwd), forward and backward seconds (the best of
 * `reps` after one warm-up) and their ratios, one JSON line. A development
 * helper of tests/bench/attention_bench.sh, which measures training.
 *   attention_rate T [tokens=8192] [heads=6] [head_size=64] [reps=3] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/td_kernels.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: attention_rate T [tokens] [heads] [head_size] [reps]\n");
    return 2;
  }
  int64_t T = atoll(argv[1]), tokens = argc > 2 ? atoll(argv[2]) : 8192;
  int64_t NH = argc > 3 ? atoll(argv[3]) : 6, HS = argc > 4 ? atoll(argv[4]) : 64;
  int reps = argc > 5 ? atoi(argv[5]) : 3;
  int64_t B = tokens / T > 0 ? tokens / T : 1, C = NH * HS;
  td_kernels *k = NULL;
  if (T <= 0 || NH <= 0 || HS <= 0 || td_kernels_cpu_create(0, &k) != TD_OK) return 2;
  size_t n = (size_t)(B * T * 3 * C), no = (size_t)(B * T * C), nl = (size_t)(B * NH * T);
  size_t na = (size_t)(B * NH * T) * (size_t)T;
  float *qkv = malloc(n * 4), *dqkv = malloc(n * 4), *out = malloc(no * 4), *dout = malloc(no * 4);
  float *lse = malloc(nl * 4), *D = malloc(nl * 4), *att = malloc(na * 4), *scr = malloc(na * 4);
  if (!qkv || !dqkv || !out || !dout || !lse || !D || !att || !scr) return 2;
  srand(1);
  for (size_t i = 0; i < n; i++) qkv[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (size_t i = 0; i < no; i++) dout[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  double best[4] = {1e30, 1e30, 1e30, 1e30};
  for (int r = 0; r <= reps; r++) {
    double t[5];
    t[0] = now();
    td_status s = k->gqa_fwd(k, out, att, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH,
                             HS, NULL);
    t[1] = now();
    s |= k->gqa_bwd(k, dqkv, dqkv + C, dqkv + 2 * C, scr, dout, qkv, qkv + C, qkv + 2 * C, att,
                    3 * C, 3 * C, B, T, NH, NH, HS, NULL);
    t[2] = now();
    s |= k->flash_fwd(k, out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, HS, NULL,
                      NULL, TD_DTYPE_F32);
    t[3] = now();
    s |= k->flash_bwd(k, dqkv, dqkv + C, dqkv + 2 * C, D, dout, out, lse, qkv,
                      qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, HS, NULL, NULL,
                      TD_DTYPE_F32);
    t[4] = now();
    if (s != TD_OK) {
      fprintf(stderr, "attention_rate: %s\n", td_error_message());
      return 1;
    }
    for (int i = 0; r > 0 && i < 4; i++) best[i] = t[i + 1] - t[i] < best[i] ? t[i + 1] - t[i] : best[i];
  }
  printf("{\"T\": %lld, \"B\": %lld, \"heads\": %lld, \"head_size\": %lld, "
         "\"materialized_fwd_s\": %.4f, \"materialized_bwd_s\": %.4f, \"fused_fwd_s\": %.4f, "
         "\"fused_bwd_s\": %.4f, \"fwd_ratio\": %.2f, \"bwd_ratio\": %.2f}\n",
         (long long)T, (long long)B, (long long)NH, (long long)HS, best[0], best[1], best[2],
         best[3], best[0] / best[2], best[1] / best[3]);
  td_kernels_destroy(&k);
  return 0;
}
