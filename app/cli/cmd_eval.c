/* cmd_eval.c — `trident eval DECK [--checkpoint FILE] [--json] [--set ...]
 * [--task choice FILE.jsonl [--scores OUT.jsonl]]`: the validation loss of a
 * checkpoint (default: checkpoint.dir/latest) by the protocol of
 * docs/architecture.md — the mean over the targets a chat dataset's loss
 * mask keeps — or its multiple-choice accuracy (td_choice.h), on the deck's
 * grid. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "app/cli/td_cli.h"
#include "app/train/td_checkpoint.h"
#include "app/train/td_choice.h"
#include "app/train/td_trainer.h"
#include "io/td_ckpt.h"
#include "io/td_tokenizer_h5.h"
#include "parallel/td_mpi.h"

/* --task choice: the checkpoint's tokenizer (bytes without one), the file's
 * examples scored on the grid, the accuracy printed (and each example's
 * mean losses per ending in --scores). */
static td_status choice(td_app *app, td_trainer *t, const td_config *cfg, const char *ckpt,
                        const char *file, const char *scores, int json) {
  td_status st = TD_OK;
  td_tokenizer_files tf = {0};
  td_bpe *bpe = NULL;
  td_choice_set *s = NULL;
  double *mean = NULL;
  st = td_tokenizer_h5_read(ckpt, &tf);
  if (st == TD_OK && td_tokenizer_files_present(&tf)) st = td_tokenizer_files_load(&tf, ckpt, &bpe);
  if (st == TD_OK) st = td_choice_load(file, bpe, cfg->model_seq_len, &s);
  if (st == TD_OK)
    st = td_alloc((void **)&mean, (size_t)td_choice_sequences(s) * sizeof *mean, "choice scores");
  TD_CHECK_GOTO(td_agree(app->world, st)); /* every rank read the same file */
  td_choice_result r;
  TD_CHECK_GOTO(td_trainer_choice(t, s, &r, mean));
  if (app->rank == 0 && scores) {
    FILE *f = fopen(scores, "w");
    for (int64_t e = 0; f && e < td_choice_examples(s); ++e) {
      int64_t q0;
      int k;
      td_choice_example(s, e, &q0, &k);
      fprintf(f, "{\"example\": %lld, \"mean_loss\": [", (long long)e);
      for (int i = 0; i < k; ++i) fprintf(f, "%s%.12g", i ? ", " : "", mean[q0 + i]);
      fprintf(f, "]}\n");
    }
    if (!f || fclose(f) != 0)
      st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "%s: cannot write the scores: %s",
                        scores, strerror(errno));
  }
  if (app->rank == 0 && st == TD_OK) {
    if (json)
      printf("{\"step\": %lld, \"task\": \"choice\", \"file\": \"%s\", \"examples\": %lld, "
             "\"correct\": %lld, \"acc\": %.9g, \"correct_norm\": %lld, \"acc_norm\": %.9g, "
             "\"checkpoint\": \"%s\"}\n", (long long)t->step, file, (long long)r.examples,
             (long long)r.correct, r.acc, (long long)r.correct_norm, r.acc_norm, ckpt);
    else
      printf("eval: %s (step %lld): choice %s: %lld examples, acc %.4f (%lld right), acc_norm "
             "%.4f (%lld right)\n", ckpt, (long long)t->step, file, (long long)r.examples, r.acc,
             (long long)r.correct, r.acc_norm, (long long)r.correct_norm);
  }
  st = td_agree(app->world, st);
done:
  td_free(mean);
  td_choice_destroy(&s);
  td_bpe_destroy(&bpe);
  td_tokenizer_files_free(&tf);
  return st;
}

td_status td_cmd_eval(td_app *app, int argc, char **argv) {
  td_deck_args a;
  td_status st = td_app_deck_args("eval", argc, argv, &a);
  const char *ckpt = NULL, *task = NULL, *task_file = NULL, *scores = NULL;
  int json = 0;
  for (int i = 0; st == TD_OK && i < a.nrest; ++i) {
    if (strcmp(a.rest[i], "--checkpoint") == 0 && i + 1 < a.nrest)
      ckpt = a.rest[++i];
    else if (strcmp(a.rest[i], "--json") == 0)
      json = 1;
    else if (strcmp(a.rest[i], "--task") == 0 && i + 2 < a.nrest)
      task = a.rest[++i], task_file = a.rest[++i];
    else if (strcmp(a.rest[i], "--scores") == 0 && i + 1 < a.nrest)
      scores = a.rest[++i];
    else
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident eval: unknown option '%s' (see trident eval --help)", a.rest[i]);
  }
  if (st == TD_OK && task && strcmp(task, "choice") != 0)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident eval: --task %s: the one task is choice (HellaSwag's format)", task);
  if (st == TD_OK && scores && !task)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident eval: --scores goes with --task choice FILE");
  if (st == TD_OK && !a.deck)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident eval: missing DECK (usage: trident eval DECK [--checkpoint FILE])");
  TD_CHECK(td_agree(app->world, st));
  td_config cfg;
  TD_CHECK(td_app_load_config(app, &a, &cfg));
  TD_CHECK(td_app_check_paths(app, &cfg, 0, 1, 0));
  char path[TD_STR_MAX + 64] = "";
  int found = 0;
  if (ckpt) /* a file, a checkpoint folder or a run folder */
    TD_CHECK(td_cli_checkpoint(app, "trident eval: --checkpoint", ckpt, path, sizeof path));
  if (app->rank == 0 && !ckpt) {
    st = td_ckpt_resolve(cfg.checkpoint_dir, "auto", &found, path, sizeof path);
    if (st == TD_OK && !found)
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                        "trident eval: no checkpoint in %s (train first, or give --checkpoint FILE)",
                        cfg.checkpoint_dir);
  }
  TD_CHECK(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, app->world));
  td_trainer *t = NULL;
  TD_CHECK(td_trainer_create(app, &cfg, 0, 1, &t));
  double loss = 0.0;
  int64_t n = 0;
  t->quiet = json; /* --json: one JSON line on stdout, nothing else */
  st = td_trainer_load(t, path, 0);
  if (st == TD_OK && task) {
    st = choice(app, t, &cfg, path, task_file, scores, json);
    td_trainer_destroy(&t);
    return st;
  }
  if (st == TD_OK) st = td_trainer_eval(t, &loss, &n);
  if (st == TD_OK && app->rank == 0) {
    if (json)
      printf("{\"step\": %lld, \"val_loss\": %.9g, \"val_tokens\": %lld, \"checkpoint\": \"%s\"}\n",
             (long long)t->step, loss, (long long)n, path);
    else
      printf("eval: %s (step %lld): val_loss %.6f over %lld tokens of %s\n", path,
             (long long)t->step, loss, (long long)n, cfg.data_val);
  }
  td_trainer_destroy(&t);
  return st;
}
