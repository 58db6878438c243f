/* rope.cu — rotary position embedding (LLaMA; Hugging Face's rotate-half
 * layout), in place, forward and inverse, on the CUDA back-end. As in
 * kernels/cpu/rope.c, the angles a = p·theta^(−2i/HS) of the positions
 * p < Tk of the sequence are formed and their cosines and sines evaluated in
 * double, then rounded to float, into a (Tk, HS/2) table made once per
 * (Tk, HS, theta) and kept in the back-end's state (every call of a run asks
 * for the same one); the rotation kernel reads the line of each row's
 * position. */
#include "kernels/cuda/cuda_internal.cuh"

/* cs[t, i] = (float)cos(a), sn[t, i] = (float)sin(a), a = t·theta^(−2i/(2·hh))
 * in double, the expression of rope.c; hh = HS/2, cs, sn (T, hh). One thread
 * per (t, i). */
static __global__ void rope_table_kernel(float *__restrict__ cs, float *__restrict__ sn,
                                         int64_t T, int64_t hh, float theta) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * hh) return;
  int64_t t = idx / hh, i = idx % hh;
  double ang = (double)t * pow((double)theta, -2.0 * (double)i / (double)(2 * hh));
  cs[idx] = (float)cos(ang);
  sn[idx] = (float)sin(ang);
}

/* In every head of every row, for i < hh with c = cs[t, i], s = sg·sn[t, i]
 * and (a, b) = (x_i, x_{i+hh}): (a·c − b·s, b·c + a·s); sg = −1 for the
 * inverse. x: rows (= B·T) rows of stride ld floats, each starting with H
 * heads of 2·hh floats, row r at position t = td_pos_at(pos, r mod T);
 * cs, sn (Tk, hh). One thread per (row, head, i), i fastest. */
static __global__ void rope_kernel(float *__restrict__ x, const float *__restrict__ cs,
                                   const float *__restrict__ sn, int64_t rows, int64_t T,
                                   td_pos pos, int64_t H, int64_t hh, int64_t ld, float sg) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= rows * H * hh) return;
  int64_t i = idx % hh, rh = idx / hh;
  int64_t h = rh % H, r = rh / H, t = td_pos_tok_dev(pos, T, r);
  float *xp = x + r * ld + h * (2 * hh) + i, *yp = xp + hh;
  float c = cs[t * hh + i], si = sg * sn[t * hh + i];
  float a = *xp, b = *yp;
  *xp = a * c - b * si;
  *yp = b * c + a * si;
}

/* x: B·T rows of stride ld floats, each starting with H heads of HS floats;
 * row b·T + t is position td_pos_at(pos, t) of Tk = td_pos_len(pos, T). In
 * place. */
td_status td_cuda_rope(td_kernels *k, float *x, int64_t B, int64_t T, int64_t H, int64_t HS,
                       int64_t ld, float theta, int inverse, const td_pos *pos) {
  TD_CHECK(td_kernels_rope_args(B, T, H, HS, ld, theta));
  TD_CHECK(td_kernels_pos_args("rope", pos, T));
  int64_t hh = HS / 2, rows = B * T;
  if (rows == 0 || H == 0 || hh == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  int64_t Tk = p.Tk;
  unsigned nb_table, nb;
  TD_CHECK(td_cuda_blocks(Tk * hh, TD_CUDA_THREADS, "rope table", &nb_table));
  TD_CHECK(td_cuda_blocks(rows * H * hh, TD_CUDA_THREADS, "rope", &nb));
  td_cuda_state *s = td_cuda_st(k);
  cudaStream_t st = s->stream;
  if (!s->rope || s->rope_T != Tk || s->rope_half != hh || s->rope_theta != theta) {
    size_t bytes = (size_t)(2 * Tk * hh) * sizeof(float);
    if (s->rope) { /* queued rotations may read it: retired, not freed (td_cuda_retire) */
      TD_CHECK(td_cuda_retire(s, s->rope));
      s->rope = NULL;
    }
    float *table = NULL;
    TD_CUDA_CHECK(cudaMalloc((void **)&table, bytes));
    s->rope = table;
    s->bytes_now += bytes;
    if (s->bytes_now > s->bytes_peak) s->bytes_peak = s->bytes_now;
    s->rope_T = Tk, s->rope_half = hh, s->rope_theta = theta;
    rope_table_kernel<<<nb_table, TD_CUDA_THREADS, 0, st>>>(s->rope, s->rope + Tk * hh, Tk, hh,
                                                             theta);
    TD_CUDA_LAUNCHED("rope_table");
  }
  const float *cs = s->rope, *sn = s->rope + Tk * hh;
  rope_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(x, cs, sn, rows, T, p, H, hh, ld,
                                              inverse ? -1.0f : 1.0f);
  TD_CUDA_LAUNCHED("rope");
  return TD_OK;
}
