/* td_sampler.h — the grid-invariant sampler of training windows.
 *
 * State: (seed, epoch, position, nwindows). Epoch e visits the windows
 * [0, nwindows) in the order of a Fisher–Yates permutation drawn from td_rng
 * keyed by (seed, e), so every epoch is reshuffled and the order is a pure
 * function of (seed, epoch). Each optimizer step takes the next global_batch
 * windows of the permutation in order; when fewer than global_batch remain in
 * the epoch, the remainder is dropped and the step starts epoch + 1 at
 * position 0. So the windows of step s depend only on (seed, nwindows,
 * global_batch, s) — never on the grid (docs/architecture.md, invariant 1).
 *
 * Slicing (done by the trainer): every rank draws the same global batch
 * b[0 .. G). Data-parallel rank r of dp takes the contiguous slice
 * [r·G/dp, (r+1)·G/dp) (G divisible by dp); its micro-batch m of size mb is
 * the consecutive slice [r·G/dp + m·mb, r·G/dp + (m+1)·mb) of that. Tensor-
 * and pipeline-parallel ranks of one data-parallel replica take the same slice.
 *
 * Not collective: each rank keeps its own copy; copies agree because they
 * start from the same seed and see the same calls. */
#ifndef TD_SAMPLER_H
#define TD_SAMPLER_H

#include <stdint.h>

#include "td_error.h"

typedef struct td_sampler td_sampler;

/* A sampler at epoch 0, position 0. nwindows >= 1. Memory: 8 bytes a
 * window. */
td_status td_sampler_create(uint64_t seed, int64_t nwindows, td_sampler **out);
/* Free; accepts NULL and sets *s = NULL. */
void td_sampler_destroy(td_sampler **s);
/* The global batch of the next step: writes global_batch window indices to
 * out and advances. global_batch must be in [1, nwindows] (TD_ERR_DATA
 * otherwise). */
td_status td_sampler_next(td_sampler *s, int64_t global_batch, int64_t *out);
/* State for checkpoints: the epoch and the position inside its permutation
 * of the next window to be taken. */
void td_sampler_state(const td_sampler *s, int64_t *epoch, int64_t *position);
/* Restore a saved state (regenerates the permutation of that epoch).
 * epoch >= 0 and position in [0, nwindows], else TD_ERR_CKPT. */
td_status td_sampler_restore(td_sampler *s, int64_t epoch, int64_t position);
uint64_t td_sampler_seed(const td_sampler *s);
int64_t td_sampler_nwindows(const td_sampler *s);

#endif
