/* fuzz_ckpt.c — libFuzzer harness for the checkpoint readers: `trident ckpt
 * info` (io/ckpt_info.c, serial HDF5) and loading a one-rank model from the
 * file (td_trainer_load: io/ckpt.c over MPI-IO, app/train/checkpoint.c).
 *
 * Input: the bytes of a checkpoint file, written to a scratch file on tmpfs.
 * LLVMFuzzerInitialize starts MPI (one rank) and builds once the smallest
 * trainer of TINY_DECK (its model is the one of the seed checkpoints that
 * tests/fuzz/make_seeds.sh saves), with a training set so the sampler state
 * is restored too. Every input goes through td_ckpt_info, then
 * td_trainer_load with the optimizer state, and, where that fails, without.
 * Errors must be status codes; a crash, a hang or a sanitizer report is a
 * finding. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/deck/td_app.h"
#include "app/train/td_checkpoint.h"
#include "app/train/td_trainer.h"
#include "fuzz_util.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "io/td_prepare.h"

/* Keep in step with tests/fuzz/make_seeds.sh. */
#define TINY_DECK                                                                   \
  "run: {name: fuzz, seed: 7, threads: 1%s}\n"                                      \
  "model: {vocab_size: 256, seq_len: 8, layers: 1, dim: 8, heads: 2}\n"              \
  "data: {train: %s}\n"                                                             \
  "training: {global_batch: 2, steps: 1}\n"                                         \
  "checkpoint: {resume: never, verify: true}\n"

static td_app g_app;
static td_trainer *g_trainer;
static FILE *g_null;

static void die(const char *what) {
  fprintf(stderr, "fuzz_ckpt: %s: %s\n", what, td_error_message());
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) abort();
  if (MPI_Comm_dup(MPI_COMM_WORLD, &g_app.world) != MPI_SUCCESS) abort();
  MPI_Comm_set_errhandler(g_app.world, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g_app.world, &g_app.rank);
  MPI_Comm_size(g_app.world, &g_app.size);
  td_h5_init();
  g_null = fopen("/dev/null", "w");
  if (!g_null) abort();

  char text[512], data[512], deck[512], yaml[2048];
  td_fuzz_path(text, sizeof text, "train.txt");
  td_fuzz_path(data, sizeof data, "train.h5");
  td_fuzz_path(deck, sizeof deck, "tiny.yaml");
  char corpus[1024];
  for (int i = 0; i < (int)sizeof corpus; ++i) corpus[i] = (char)('a' + (i * 7) % 26);
  td_fuzz_write(text, corpus, sizeof corpus);
  char *in[1] = {text};
  if (td_prepare(data, 0.0, 1, in, 0, NULL) != TD_OK) die("cannot prepare the training set");

  /* Turn the watchdog off where this build has one (run.watchdog_s). */
  td_config cfg;
  snprintf(yaml, sizeof yaml, TINY_DECK, ", watchdog_s: 0", data);
  td_fuzz_write(deck, yaml, strlen(yaml));
  if (td_config_load(deck, 0, NULL, 1, &cfg) != TD_OK) {
    td_error_clear();
    snprintf(yaml, sizeof yaml, TINY_DECK, "", data);
    td_fuzz_write(deck, yaml, strlen(yaml));
    if (td_config_load(deck, 0, NULL, 1, &cfg) != TD_OK) die("the tiny deck does not load");
  }
  if (td_trainer_create(&g_app, &cfg, 1, 0, &g_trainer) != TD_OK) die("cannot build the trainer");
  g_trainer->quiet = 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[512];
  td_fuzz_path(path, sizeof path, "ckpt.h5");
  td_fuzz_write(path, data, size);
  if (td_ckpt_info(path, g_null) != TD_OK) td_error_clear();
  if (td_trainer_load(g_trainer, path, 1) != TD_OK) {
    td_error_clear();
    if (td_trainer_load(g_trainer, path, 0) != TD_OK) td_error_clear();
  }
  return 0;
}
