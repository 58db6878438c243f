/* sampler.c — per-epoch Fisher–Yates permutations of the windows, drawn from
 * the counter-based generator (td_sampler.h). */
#include "io/td_sampler.h"

#include "td_rng.h"

/* Domain word that separates the sampler's keys from other td_rng users. */
#define TD_SAMPLER_DOMAIN 0x73616d706c657231ull /* "sampler1" */

struct td_sampler {
  uint64_t seed;
  int64_t nwindows;
  int64_t epoch;
  int64_t position;
  int64_t *perm; /* (nwindows) the order of `epoch` */
};

/* perm = the permutation of epoch: Fisher–Yates from the last slot down, slot
 * i swapped with j = floor(u·(i+1)) for u = 64 random bits of counter i (the
 * 128-bit multiply keeps the bias below (i+1)/2^64). */
static void shuffle(td_sampler *s) {
  uint64_t key = td_rng_key(s->seed, TD_SAMPLER_DOMAIN, (uint64_t)s->epoch);
  int64_t n = s->nwindows;
  for (int64_t i = 0; i < n; ++i) s->perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t r = td_rng_u64(key, (uint64_t)i);
    int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
    int64_t t = s->perm[i];
    s->perm[i] = s->perm[j];
    s->perm[j] = t;
  }
}

td_status td_sampler_create(uint64_t seed, int64_t nwindows, td_sampler **out) {
  *out = NULL;
  TD_REQUIRE(nwindows >= 1, TD_ERR_DATA,
             "the dataset has no whole window to sample (nwindows = %lld)",
             (long long)nwindows);
  td_sampler *s = NULL;
  TD_CHECK(td_alloc((void **)&s, sizeof *s, "sampler"));
  td_status st = td_alloc((void **)&s->perm, (size_t)nwindows * sizeof(int64_t),
                          "sampler permutation");
  if (st != TD_OK) {
    td_free(s);
    td_error_push(__FILE__, __LINE__, __func__);
    return st;
  }
  s->seed = seed;
  s->nwindows = nwindows;
  s->epoch = 0;
  s->position = 0;
  shuffle(s);
  *out = s;
  return TD_OK;
}

void td_sampler_destroy(td_sampler **ps) {
  if (!ps || !*ps) return;
  td_free((*ps)->perm);
  td_free(*ps);
  *ps = NULL;
}

td_status td_sampler_next(td_sampler *s, int64_t global_batch, int64_t *out) {
  TD_REQUIRE(global_batch >= 1 && global_batch <= s->nwindows, TD_ERR_DATA,
             "global batch of %lld windows, but the dataset has %lld windows",
             (long long)global_batch, (long long)s->nwindows);
  if (s->nwindows - s->position < global_batch) {
    s->epoch++;
    s->position = 0;
    shuffle(s);
  }
  for (int64_t k = 0; k < global_batch; ++k) out[k] = s->perm[s->position + k];
  s->position += global_batch;
  return TD_OK;
}

void td_sampler_state(const td_sampler *s, int64_t *epoch, int64_t *position) {
  *epoch = s->epoch;
  *position = s->position;
}

td_status td_sampler_restore(td_sampler *s, int64_t epoch, int64_t position) {
  TD_REQUIRE(epoch >= 0 && position >= 0 && position <= s->nwindows,
             TD_ERR_CKPT,
             "sampler state epoch %lld, position %lld does not fit a dataset "
             "of %lld windows",
             (long long)epoch, (long long)position, (long long)s->nwindows);
  if (epoch != s->epoch) {
    s->epoch = epoch;
    shuffle(s);
  }
  s->position = position;
  return TD_OK;
}

uint64_t td_sampler_seed(const td_sampler *s) { return s->seed; }
int64_t td_sampler_nwindows(const td_sampler *s) { return s->nwindows; }
