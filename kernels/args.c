/* args.c — the argument checks every back-end makes before an op whose
 * sizes relate to each other (attention's strides and head counts, the
 * positions of a rank's rows, RoPE's layout, the cross-entropy's vocabulary
 * shard): one wording, one place
 * (td_kernels.h). A failed check is the caller's error (TD_ERR_USAGE). */
#include "kernels/td_kernels.h"

td_status td_kernels_gqa_args(int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                              int64_t KV, int64_t HS) {
  TD_REQUIRE(B >= 0 && T >= 0 && NH >= 0 && HS > 0, TD_ERR_USAGE,
             "attention: expected B, T, NH >= 0 and HS > 0, got B=%lld T=%lld NH=%lld HS=%lld",
             (long long)B, (long long)T, (long long)NH, (long long)HS);
  TD_REQUIRE(KV > 0 && NH % KV == 0, TD_ERR_USAGE,
             "attention: the query heads (%lld) must be a multiple of the key/value heads (%lld)",
             (long long)NH, (long long)KV);
  TD_REQUIRE(ldq >= NH * HS && ldkv >= KV * HS, TD_ERR_USAGE,
             "attention: row strides ldq=%lld, ldkv=%lld below the widths NH·HS=%lld, "
             "KV·HS=%lld",
             (long long)ldq, (long long)ldkv, (long long)(NH * HS), (long long)(KV * HS));
  return TD_OK;
}

td_status td_kernels_pos_args(const char *op, const td_pos *pos, int64_t T) {
  if (!pos) return TD_OK;
  TD_REQUIRE(pos->half >= 0 && pos->half <= T && pos->p0 >= 0 && pos->p0 + pos->half <= pos->p1 &&
                 pos->p1 + (T - pos->half) <= pos->Tk,
             TD_ERR_USAGE,
             "%s: positions must satisfy 0 <= half <= T, 0 <= p0, p0 + half <= p1, "
             "p1 + T - half <= Tk, got T=%lld half=%lld p0=%lld p1=%lld Tk=%lld",
             op, (long long)T, (long long)pos->half, (long long)pos->p0, (long long)pos->p1,
             (long long)pos->Tk);
  return TD_OK;
}

td_status td_kernels_rope_args(int64_t B, int64_t T, int64_t H, int64_t HS, int64_t ld,
                               float theta) {
  TD_REQUIRE(B >= 0 && T >= 0 && H >= 0 && HS >= 0 && HS % 2 == 0, TD_ERR_USAGE,
             "rope: expected sizes >= 0 and an even head size, got B=%lld T=%lld H=%lld HS=%lld",
             (long long)B, (long long)T, (long long)H, (long long)HS);
  TD_REQUIRE(ld >= H * HS, TD_ERR_USAGE, "rope: row stride %lld < H·HS = %lld", (long long)ld,
             (long long)(H * HS));
  TD_REQUIRE(theta > 0.0f, TD_ERR_USAGE, "rope: theta must be > 0, got %g", (double)theta);
  return TD_OK;
}

td_status td_kernels_xent_args(int64_t N, int64_t Vs, int64_t Vvalid) {
  TD_REQUIRE(N >= 0, TD_ERR_USAGE, "xent: row count %lld < 0", (long long)N);
  TD_REQUIRE(Vvalid >= 0 && Vvalid <= Vs, TD_ERR_USAGE,
             "xent: Vvalid must be in [0, Vs=%lld], got %lld", (long long)Vs,
             (long long)Vvalid);
  return TD_OK;
}

td_status td_kernels_copy2d_args(int64_t rows, int64_t cols, int64_t ldd, int64_t lds) {
  TD_REQUIRE(rows >= 0 && cols >= 0 && ldd >= cols && lds >= cols, TD_ERR_USAGE,
             "copy2d: expected rows, cols >= 0 and strides >= cols, got rows=%lld cols=%lld "
             "ldd=%lld lds=%lld",
             (long long)rows, (long long)cols, (long long)ldd, (long long)lds);
  return TD_OK;
}

td_status td_kernels_moe_args(const char *op, int64_t N, int64_t E, int64_t K, int64_t C,
                              int64_t cap) {
  TD_REQUIRE(N >= 0 && C >= 0 && cap >= 0 && E >= 1 && K >= 1 && K <= E, TD_ERR_USAGE,
             "%s: expected N, C, cap >= 0 and 1 <= K <= E, got N=%lld E=%lld K=%lld C=%lld "
             "cap=%lld",
             op, (long long)N, (long long)E, (long long)K, (long long)C, (long long)cap);
  TD_REQUIRE(N * K <= INT32_MAX, TD_ERR_USAGE, "%s: N·K = %lld slots do not fit an int32", op,
             (long long)(N * K));
  return TD_OK;
}
