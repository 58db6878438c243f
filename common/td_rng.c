/* td_rng.c — counter-based random numbers: splitmix64 over (key, counter). */
#include "td_rng.h"

#include <math.h>

uint64_t td_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t td_hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return td_mix64(h);
}

uint64_t td_rng_key(uint64_t seed, uint64_t a, uint64_t b) {
  return td_mix64(td_mix64(td_mix64(seed) ^ a) ^ b);
}

uint64_t td_rng_u64(uint64_t key, uint64_t counter) {
  return td_mix64(key ^ td_mix64(counter));
}

double td_rng_uniform(uint64_t key, uint64_t counter) {
  return (double)(td_rng_u64(key, counter) >> 11) * 0x1.0p-53;
}

double td_rng_normal(uint64_t key, uint64_t counter) {
  /* Two independent uniforms from two derived counters; u1 in (0, 1]. */
  double u1 = 1.0 - td_rng_uniform(key, 2 * counter);
  double u2 = td_rng_uniform(key, 2 * counter + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
