/* cmd_generate.c — `trident generate --checkpoint FILE [--prompt TEXT]
 * [--tokens N] [--temperature T] [--top-k K] [--seed S] [--raw] [--set k=v]...`:
 * sample text from a checkpoint (bytes, or the GPT-2 tokenizer it carries in
 * /tokenizer), on any grid
 * (tensor and pipeline parallel included: --set parallel.tp=2). The model
 * comes from the checkpoint's /config. Deterministic for a given seed. The
 * text printed is valid UTF-8 (td_utf8.h: a character split over tokens is
 * held until complete, what stays invalid prints U+FFFD); --raw prints the
 * tokens' bytes as they are. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli/td_cli.h"
#include "app/train/td_checkpoint.h"
#include "app/train/td_trainer.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "io/td_utf8.h"
#include "parallel/td_mpi.h"
#include "td_rng.h"

typedef struct {
  const char *ckpt, *prompt;
  int64_t tokens, top_k;
  double temperature;
  uint64_t seed;
  int raw; /* --raw: the tokens' bytes, not sanitized to UTF-8 */
  int nset;
  char *sets[TD_MAX_SETS];
} gen_args;

static td_status parse(int argc, char **argv, gen_args *g) {
  memset(g, 0, sizeof *g);
  g->prompt = "\n";
  g->tokens = 200, g->top_k = 0, g->temperature = 1.0, g->seed = 1234;
  for (int i = 1; i < argc; ++i) {
    const char *o = argv[i];
    if (!strcmp(o, "--raw")) {
      g->raw = 1;
      continue;
    }
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!v) TD_FAIL(TD_ERR_USAGE, "trident generate: %s needs a value", o);
    ++i;
    if (!strcmp(o, "--checkpoint")) {
      g->ckpt = v;
    } else if (!strcmp(o, "--prompt")) {
      g->prompt = v;
    } else if (!strcmp(o, "--tokens")) {
      g->tokens = strtoll(v, &end, 10);
      if (*end || g->tokens < 0) TD_FAIL(TD_ERR_USAGE, "trident generate: --tokens %s: expected a count >= 0", v);
    } else if (!strcmp(o, "--top-k")) {
      g->top_k = strtoll(v, &end, 10);
      if (*end || g->top_k < 0) TD_FAIL(TD_ERR_USAGE, "trident generate: --top-k %s: expected a count >= 0 (0: all)", v);
    } else if (!strcmp(o, "--temperature")) {
      g->temperature = strtod(v, &end);
      if (*end || !(g->temperature >= 0)) TD_FAIL(TD_ERR_USAGE, "trident generate: --temperature %s: expected a number >= 0", v);
    } else if (!strcmp(o, "--seed")) {
      g->seed = strtoull(v, &end, 10);
      if (*end) TD_FAIL(TD_ERR_USAGE, "trident generate: --seed %s: expected an integer", v);
    } else if (!strcmp(o, "--set")) {
      if (g->nset == TD_MAX_SETS) TD_FAIL(TD_ERR_USAGE, "trident generate: too many --set");
      g->sets[g->nset++] = (char *)v;
    } else {
      TD_FAIL(TD_ERR_USAGE, "trident generate: unknown option '%s' (see trident generate --help)", o);
    }
  }
  if (!g->ckpt) TD_FAIL(TD_ERR_USAGE, "trident generate: missing --checkpoint FILE");
  return TD_OK;
}

/* The checkpoint's deck (rank 0), with the grid fitted to the job: tp and pp
 * from --set (default 1), dp = the rest; one sequence per micro-batch. */
static td_status gen_config(td_app *app, const gen_args *g, td_config *cfg) {
  td_status st = TD_OK;
  char *text = NULL, *tmp = NULL;
  hid_t f = -1;
  if (app->rank == 0) {
    td_h5_init();
    st = td_h5_open(g->ckpt, MPI_COMM_NULL, 0, &f);
    if (st == TD_OK) st = td_h5_read_string(f, g->ckpt, "/config", &text);
    if (st != TD_OK) {
      char msg[2048];
      snprintf(msg, sizeof msg, "%s", td_error_message());
      td_error_clear();
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                        "%s: not a trident checkpoint (%s)", g->ckpt, msg);
    }
    td_h5_close(&f);
    if (st == TD_OK) {
      /* write the deck to a temporary file so --set applies with the usual checks */
      char name[] = "/tmp/trident-gen-XXXXXX";
      int fd = mkstemp(name);
      FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
      if (!out) {
        st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "cannot write a temporary file");
      } else {
        fputs(text, out);
        fclose(out);
        char *sets[TD_MAX_SETS + 13];
        int n = 0;
        static char s_dp[64], s_tp[] = "parallel.tp=1", s_pp[] = "parallel.pp=1",
                    s_mb[] = "parallel.micro_batch=1", s_gb[64], s_z[] = "parallel.zero=0",
                    s_sl[] = "parallel.stage_layers=[]", s_ps[] = "parallel.pp_schedule=1f1b",
                    s_vs[] = "parallel.virtual_stages=1",
                    s_sp[] = "parallel.sequence_parallel=false", s_cp[] = "parallel.cp=1",
                    s_ep[] = "parallel.ep=1";
        sets[n++] = s_tp, sets[n++] = s_pp, sets[n++] = s_z, sets[n++] = s_sl, sets[n++] = s_cp;
        sets[n++] = s_ep; /* generation: every rank holds every expert */
        sets[n++] = s_ps, sets[n++] = s_vs; /* the saved run's schedule needs its pipeline */
        sets[n++] = s_sp;                   /* ... and its sequence parallelism, tp > 1 */
        for (int i = 0; i < g->nset; ++i) sets[n++] = g->sets[i];
        td_config probe;
        st = td_config_load(name, n, sets, 0, &probe);
        if (st == TD_OK && probe.parallel_cp > 1)
          st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                            "trident generate: parallel.cp=%lld: generation runs without context "
                            "parallelism (its window of model.seq_len tokens fits one rank); "
                            "spread the model with parallel.tp and parallel.pp",
                            (long long)probe.parallel_cp);
        if (st == TD_OK) {
          int64_t rest = probe.parallel_cp * probe.parallel_tp * probe.parallel_pp;
          int64_t dp = app->size % rest == 0 ? app->size / rest : 1;
          snprintf(s_dp, sizeof s_dp, "parallel.dp=%lld", (long long)dp);
          snprintf(s_gb, sizeof s_gb, "training.global_batch=%lld", (long long)dp);
          sets[n++] = s_dp, sets[n++] = s_gb, sets[n++] = s_mb;
          st = td_config_load(name, n, sets, app->size, cfg);
        }
        remove(name);
      }
    }
  }
  td_free(text);
  free(tmp);
  TD_CHECK(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, app->world));
  return TD_OK;
}

/* Sample a token from logits (V) with temperature and top-k; u in [0, 1).
 * scratch: V floats for the top-k selection. */
static int32_t sample(const float *logits, float *scratch, int64_t V, double temperature,
                      int64_t top_k, double u) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  if (temperature == 0.0) return (int32_t)best;
  double thresh = -INFINITY;
  if (top_k > 0 && top_k < V) {
    /* the k-th largest logit: partial selection by repeated max (k small) */
    memcpy(scratch, logits, (size_t)V * sizeof(float));
    for (int64_t k = 0; k < top_k; ++k) {
      int64_t j = 0;
      for (int64_t i = 1; i < V; ++i)
        if (scratch[i] > scratch[j]) j = i;
      thresh = scratch[j];
      scratch[j] = -INFINITY;
    }
  }
  double sum = 0.0;
  for (int64_t i = 0; i < V; ++i)
    sum += logits[i] >= thresh ? exp(((double)logits[i] - logits[best]) / temperature) : 0.0;
  double r = u * sum, acc = 0.0;
  for (int64_t i = 0; i < V; ++i) {
    if (logits[i] < thresh) continue;
    acc += exp(((double)logits[i] - logits[best]) / temperature);
    if (acc > r) return (int32_t)i;
  }
  return (int32_t)best;
}

/* Text to stdout: as UTF-8 a terminal can show, or the bytes with --raw. */
static void emit(const gen_args *g, td_utf8 *u8, const void *s, size_t n) {
  if (g->raw)
    fwrite(s, 1, n, stdout);
  else
    td_utf8_feed(u8, s, n, stdout);
}

td_status td_cmd_generate(td_app *app, int argc, char **argv) {
  gen_args g;
  td_status st = parse(argc, argv, &g);
  TD_CHECK(td_agree(app->world, st));
  char ckpt_path[4300];
  TD_CHECK(td_cli_checkpoint(app, "trident generate: --checkpoint", g.ckpt, ckpt_path,
                             sizeof ckpt_path));
  g.ckpt = ckpt_path;
  td_config cfg;
  TD_CHECK(gen_config(app, &g, &cfg));
  td_trainer *t = NULL;
  int32_t *ctx = NULL, *in = NULL, *pids = NULL, *doc = NULL;
  float *logits = NULL, *scratch = NULL;
  td_tokenizer_files tf = {0};
  td_bpe *bpe = NULL;
  size_t npids = 0, pcap = 0;
  TD_CHECK(td_trainer_create(app, &cfg, 0, 0, &t));
  t->quiet = 1;
  TD_CHECK_GOTO(td_trainer_load(t, g.ckpt, 0));
  /* a checkpoint trained on GPT-2 or LLaMA 3 tokens carries its tokenizer:
   * speak its text (a LLaMA 3 prompt starts with <|begin_of_text|>, as
   * Hugging Face's tokenizer adds it) */
  int32_t bos = -1, eos = -1;
  st = td_tokenizer_h5_read(g.ckpt, &tf);
  if (st == TD_OK && td_tokenizer_files_present(&tf)) st = td_tokenizer_files_load(&tf, g.ckpt, &bpe);
  if (st == TD_OK && bpe) st = td_bpe_doc_tokens(bpe, &bos, &eos);
  if (st == TD_OK && bpe && eos >= 0 && (pids = malloc(sizeof *pids))) {
    pids[npids++] = bos;
    pcap = 1;
  }
  if (st == TD_OK && bpe)
    st = td_bpe_encode(bpe, (const unsigned char *)g.prompt, strlen(g.prompt), &pids, &npids,
                       &pcap);
  TD_CHECK_GOTO(td_agree(app->world, st));
  int64_t T = cfg.model_seq_len, V = cfg.model_vocab_size;
  int64_t plen = bpe ? (int64_t)npids : (int64_t)strlen(g.prompt), total = plen + g.tokens;
  TD_CHECK_GOTO(td_alloc((void **)&ctx, (size_t)(total + 1) * sizeof(int32_t), "context"));
  TD_CHECK_GOTO(td_alloc((void **)&in, (size_t)T * sizeof(int32_t), "input"));
  /* data.attend: document: the context is one document, starting at row 0 */
  TD_CHECK_GOTO(td_alloc((void **)&doc, (size_t)T * sizeof(int32_t), "document starts"));
  memset(doc, 0, (size_t)T * sizeof(int32_t));
  td_model_set_doc(t->model, doc);
  TD_CHECK_GOTO(td_alloc((void **)&logits, (size_t)(V + 64) * t->grid->tp * sizeof(float), "logits"));
  TD_CHECK_GOTO(td_alloc((void **)&scratch, (size_t)V * sizeof(float), "top-k selection"));
  for (int64_t i = 0; i < plen && st == TD_OK; ++i) {
    int32_t b = bpe ? pids[i] : (unsigned char)g.prompt[i];
    if (b >= V)
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident generate: the prompt's %s %d at %lld is outside the "
                        "model's vocabulary of %lld", bpe ? "token" : "byte", b, (long long)i,
                        (long long)V);
    ctx[i] = b;
  }
  TD_CHECK_GOTO(td_agree(app->world, st)); /* every rank checked the same prompt */
  if (plen == 0) ctx[plen++] = bpe ? bos : '\n'; /* GPT-2: <|endoftext|> */
  td_utf8 u8;
  td_utf8_init(&u8);
  if (app->rank == 0) {
    emit(&g, &u8, g.prompt, strlen(g.prompt));
    fflush(stdout);
  }
  uint64_t key = td_rng_key(g.seed, td_hash_str("generate"), 0);
  int last = t->grid->pp - 1;
  for (int64_t n = plen; n < plen + g.tokens; ++n) {
    int64_t start = n > T ? n - T : 0, len = n - start;
    memset(in, 0, (size_t)T * sizeof(int32_t));
    memcpy(in, ctx + start, (size_t)len * sizeof(int32_t));
    double unused = 0.0;
    td_model_want_logits(t->model, len - 1); /* the fused head computes only its chunk */
    TD_CHECK_GOTO(td_pipe_forward(t->pipe, in, NULL, &unused));
    int32_t tok = 0;
    if (t->grid->pp_rank == last) {
      TD_CHECK_GOTO(td_model_logits_at(t->model, td_model_head_slot(t->model), len - 1, logits));
      tok = sample(logits, scratch, V, g.temperature, g.top_k, td_rng_uniform(key, (uint64_t)n));
    }
    int rc = MPI_Bcast(&tok, 1, MPI_INT32_T, last, t->grid->pp_comm);
    if (rc != MPI_SUCCESS) {
      st = td_mpi_fail(rc, "MPI_Bcast (sampled token)", __FILE__, __LINE__, __func__);
      goto done;
    }
    ctx[n] = tok;
    if (app->rank == 0 && bpe) {
      char *text = NULL;
      size_t tlen = 0;
      if (td_bpe_decode(bpe, &tok, 1, &text, &tlen) == TD_OK) /* padding ids print nothing */
        emit(&g, &u8, text, tlen);
      else
        td_error_clear();
      free(text);
      fflush(stdout);
    } else if (app->rank == 0) {
      unsigned char ch = (unsigned char)tok;
      emit(&g, &u8, &ch, 1);
      fflush(stdout);
    }
  }
  if (app->rank == 0) {
    if (!g.raw) td_utf8_flush(&u8, stdout);
    printf("\n");
  }
done:
  td_bpe_destroy(&bpe);
  td_tokenizer_files_free(&tf);
  td_free(doc);
  free(pids);
  td_free(ctx);
  td_free(in);
  td_free(logits);
  td_free(scratch);
  td_trainer_destroy(&t);
  return st;
}
