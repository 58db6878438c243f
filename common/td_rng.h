/* td_rng.h — counter-based random numbers (grid invariance, docs/architecture.md).
 *
 * A value is a pure function of (key, counter): no stream state, so any rank
 * can draw element i of a tensor without drawing elements 0..i-1. */
#ifndef TD_RNG_H
#define TD_RNG_H

#include <stdint.h>

/* splitmix64 finaliser: a bijective 64-bit mix. */
uint64_t td_mix64(uint64_t x);
/* FNV-1a hash of a string, mixed: used to key a parameter by its name. */
uint64_t td_hash_str(const char *s);
/* Key for (seed, a, b): combine several words into one key. */
uint64_t td_rng_key(uint64_t seed, uint64_t a, uint64_t b);
/* 64 random bits for (key, counter). */
uint64_t td_rng_u64(uint64_t key, uint64_t counter);
/* Uniform double in [0, 1) with 53 random bits. */
double td_rng_uniform(uint64_t key, uint64_t counter);
/* Standard normal for (key, counter), Box-Muller on two derived uniforms. */
double td_rng_normal(uint64_t key, uint64_t counter);

#endif
