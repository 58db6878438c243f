/* fuzz_deck.c — libFuzzer harness for the job-deck reader (app/deck/config.c,
 * io/yaml.c): YAML text plus --set overrides through td_config_load.
 *
 * Input: leading lines "--set key=value" become --set arguments and a line
 * "--ranks N" the world size checked against (default 0: not checked); the
 * rest is the deck, written to a scratch file (the reader's real path).
 * On a deck that loads, the harness also checks what callers rely on:
 * derived quantities are computed without overflow (UBSan traps on one), and
 * the resolved deck printed by td_config_to_text — what a checkpoint stores
 * as /config — loads again to the same text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/deck/td_config.h"
#include "app/model/td_estimate.h"
#include "app/model/td_registry.h"
#include "fuzz_util.h"

#define MAX_SETS 16

static void fail(const char *what, const char *text) {
  fprintf(stderr, "fuzz_deck: %s\n--- text ---\n%s\n--- error ---\n%s\n", what, text ? text : "",
          td_error_message());
  abort();
}

/* The registry of every (tp rank, pp stage) of a small model: sharding
 * arithmetic on the checked sizes. */
static void registry_all(const td_config *c) {
  int tp = (int)c->parallel_tp, pp = (int)c->parallel_pp;
  if (c->model_layers > 64 || (int64_t)tp * pp > 16) return; /* keep each run fast */
  for (int s = 0; s < pp; ++s)
    for (int r = 0; r < tp; ++r) {
      td_registry *reg = NULL;
      if (td_registry_create(c, tp, r, pp, s, &reg) != TD_OK) td_error_clear();
      td_registry_destroy(&reg);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *sets[MAX_SETS];
  int nset = 0, world = 0;
  char *p = buf;
  for (;;) {
    char *nl = memchr(p, '\n', (size_t)(buf + size - p));
    if (strncmp(p, "--set ", 6) == 0 && nset < MAX_SETS) {
      if (nl) *nl = '\0';
      sets[nset++] = p + 6;
    } else if (strncmp(p, "--ranks ", 8) == 0) {
      world = atoi(p + 8) & 0xffff;
    } else {
      break;
    }
    if (!nl) {
      p = buf + size;
      break;
    }
    p = nl + 1;
  }
  char path[512];
  td_fuzz_path(path, sizeof path, "deck.yaml");
  td_fuzz_write(path, p, (size_t)(buf + size - p));

  td_config cfg;
  if (td_config_load(path, nset, sets, world, &cfg) != TD_OK) {
    if (td_error_status() != TD_ERR_DECK && td_error_status() != TD_ERR_USAGE)
      fail("a bad deck gave an error other than TD_ERR_DECK / TD_ERR_USAGE", p);
    td_error_clear();
    free(buf);
    return 0;
  }
  /* derived quantities, as trainer, check and the pipeline compute them */
  volatile int64_t sink = td_config_micro_batch(&cfg) + td_config_accum_steps(&cfg);
  for (int s = 0; s < cfg.parallel_pp; ++s) {
    int64_t first, count;
    td_config_stage_layers(&cfg, s, &first, &count);
    sink += first + count;
  }
  (void)sink;
  volatile double flops = td_flops_per_token(&cfg);
  (void)flops;
  registry_all(&cfg);

  /* the resolved deck round-trips (a checkpoint's /config is read back) */
  char *t1 = NULL, *t2 = NULL;
  if (td_config_to_text(&cfg, 1, &t1) != TD_OK) fail("td_config_to_text failed", p);
  td_config again;
  if (td_config_load_text("resolved", t1, &again) != TD_OK)
    fail("the resolved deck does not load again", t1);
  if (td_config_to_text(&again, 1, &t2) != TD_OK) fail("td_config_to_text failed", t1);
  if (strcmp(t1, t2) != 0) {
    fprintf(stderr, "--- second ---\n%s\n", t2);
    fail("the resolved deck reads back differently", t1);
  }
  free(t1);
  free(t2);
  free(buf);
  return 0;
}
