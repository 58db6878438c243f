/* cmd_prepare.c — `trident prepare --out FILE [--val-fraction F] [--buffer-mb M]
 * [--tokenizer bytes|gpt2|llama3 --vocab FILE [--merges vocab.bpe]] INPUT...`:
 * text → token dataset with the byte-level tokenizer, GPT-2's BPE (its
 * encoder.json and vocab.bpe) or LLaMA 3's (its tokenizer.model or
 * tokenizer.json). The BPEs split the input over every rank (`mpiexec -n K
 * trident prepare`); the
 * byte-level tokenizer is a copy at disk speed and runs on rank 0 (the
 * others wait and share its status). */
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/cli/td_cli.h"
#include "io/td_h5.h"
#include "io/td_prepare.h"
#include "parallel/td_mpi.h"

typedef struct {
  const char *tokenizer, *vocab, *merges;
  td_prepare_opts fmt;
} tok_args;

static td_status parse(int argc, char **argv, const char **out, double *frac, size_t *buf,
                       tok_args *t, int *nin, char ***inputs) {
  *out = NULL, *frac = 0.1, *buf = TD_PREPARE_BUFFER_DEFAULT, *nin = 0;
  t->tokenizer = "bytes", t->vocab = t->merges = NULL;
  t->fmt = (td_prepare_opts){TD_PREPARE_TEXT, NULL, 0};
  *inputs = calloc((size_t)argc + 1, sizeof(char *));
  if (!*inputs) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    int has_next = i + 1 < argc;
    if (strcmp(a, "--out") == 0 && has_next) {
      *out = argv[++i];
    } else if (strcmp(a, "--val-fraction") == 0 && has_next) {
      char *end = NULL;
      *frac = strtod(argv[++i], &end);
      if (!end || *end || *frac < 0 || *frac >= 1)
        TD_FAIL(TD_ERR_USAGE, "trident prepare: --val-fraction must be a number in [0, 1), got '%s'",
                argv[i]);
    } else if (strcmp(a, "--tokenizer") == 0 && has_next) {
      t->tokenizer = argv[++i];
      if (strcmp(t->tokenizer, "bytes") != 0 && strcmp(t->tokenizer, "gpt2") != 0 &&
          strcmp(t->tokenizer, "llama3") != 0)
        TD_FAIL(TD_ERR_USAGE, "trident prepare: --tokenizer must be bytes, gpt2 or llama3, got '%s'",
                t->tokenizer);
    } else if (strcmp(a, "--format") == 0 && has_next) {
      const char *f = argv[++i];
      if (strcmp(f, "text") == 0) t->fmt.format = TD_PREPARE_TEXT;
      else if (strcmp(f, "jsonl") == 0) t->fmt.format = TD_PREPARE_JSONL;
      else if (strcmp(f, "chat") == 0) t->fmt.format = TD_PREPARE_CHAT;
      else
        TD_FAIL(TD_ERR_USAGE, "trident prepare: --format must be text, jsonl or chat, got '%s'", f);
    } else if (strcmp(a, "--field") == 0 && has_next) {
      t->fmt.field = argv[++i];
    } else if (strcmp(a, "--skip-bad") == 0) {
      t->fmt.skip_bad = 1;
    } else if (strcmp(a, "--vocab") == 0 && has_next) {
      t->vocab = argv[++i];
    } else if (strcmp(a, "--merges") == 0 && has_next) {
      t->merges = argv[++i];
    } else if (strcmp(a, "--buffer-mb") == 0 && has_next) {
      double mb = atof(argv[++i]);
      if (mb <= 0) TD_FAIL(TD_ERR_USAGE, "trident prepare: --buffer-mb must be > 0");
      *buf = (size_t)(mb * 1048576.0);
    } else if (a[0] == '-' && a[1] != '\0') {
      TD_FAIL(TD_ERR_USAGE, "trident prepare: unknown option '%s' (usage: trident prepare --out FILE "
              "[--val-fraction F] [--tokenizer gpt2 --vocab encoder.json --merges vocab.bpe | "
              "--tokenizer llama3 --vocab tokenizer.model|tokenizer.json] INPUT...)", a);
    } else {
      (*inputs)[(*nin)++] = argv[i];
    }
  }
  if (!*out) TD_FAIL(TD_ERR_USAGE, "trident prepare: missing --out FILE");
  int gpt2 = strcmp(t->tokenizer, "gpt2") == 0, llama3 = strcmp(t->tokenizer, "llama3") == 0;
  if (gpt2 && (!t->vocab || !t->merges))
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --tokenizer gpt2 needs --vocab encoder.json and "
            "--merges vocab.bpe (GPT-2's published files)");
  if (llama3 && (!t->vocab || t->merges))
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --tokenizer llama3 needs --vocab FILE (Meta's "
            "tokenizer.model or Hugging Face's tokenizer.json) and no --merges");
  if (!gpt2 && !llama3 && (t->vocab || t->merges))
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --vocab and --merges go with --tokenizer gpt2 or "
            "llama3");
  if (*nin == 0) TD_FAIL(TD_ERR_USAGE, "trident prepare: no INPUT files, folders or - given");
  if (t->fmt.field && t->fmt.format != TD_PREPARE_JSONL)
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --field goes with --format jsonl");
  if (t->fmt.skip_bad && t->fmt.format == TD_PREPARE_TEXT)
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --skip-bad goes with --format jsonl or chat");
  return TD_OK;
}

/* The inputs exist and can be read, --out's folder exists and can be
 * written: bad paths are the user's (exit 2), named, before any work. */
static td_status check_paths(const char *out, int nin, char **inputs) {
  for (int i = 0; i < nin; ++i) {
    if (!strcmp(inputs[i], "-")) continue;
    if (access(inputs[i], R_OK) != 0)
      TD_FAIL(TD_ERR_USAGE, "trident prepare: input %s: %s", inputs[i], strerror(errno));
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", out);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --out %s: the folder %s does not exist (make it "
            "first: mkdir -p %s)", out, dir, dir);
  if (access(dir, W_OK | X_OK) != 0)
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --out %s: the folder %s cannot be written: %s", out,
            dir, strerror(errno));
  if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))
    TD_FAIL(TD_ERR_USAGE, "trident prepare: --out %s is a folder; give a file name "
            "(e.g. %s/corpus.h5)", out, out);
  return TD_OK;
}

td_status td_cmd_prepare(td_app *app, int argc, char **argv) {
  const char *out = NULL;
  double frac = 0.1;
  size_t buf = 0;
  int nin = 0;
  char **inputs = NULL;
  tok_args t;
  td_bpe *bpe = NULL;
  td_status st = parse(argc, argv, &out, &frac, &buf, &t, &nin, &inputs);
  if (st == TD_OK && app->rank == 0) st = check_paths(out, nin, inputs);
  st = td_agree(app->world, st); /* rank 0 decides for all */
  td_h5_init();
  int records = t.fmt.format != TD_PREPARE_TEXT;
  if (st == TD_OK && strcmp(t.tokenizer, "bytes") != 0) { /* every rank: same argv */
    if (strcmp(t.tokenizer, "gpt2") == 0)
      st = td_agree(app->world, td_bpe_load(t.vocab, t.merges, &bpe));
    else
      st = td_agree(app->world, td_bpe_load_llama3(t.vocab, TD_BPE_LLAMA3, &bpe));
  }
  if (st == TD_OK && records) { /* JSONL and chat: rank 0 reads the lines */
    if (app->rank == 0) st = td_prepare_records(out, frac, nin, inputs, bpe, &t.fmt, stdout);
  } else if (st == TD_OK && bpe) {
    st = td_prepare_bpe(app->world, out, frac, nin, inputs, buf, bpe, stdout);
  } else if (st == TD_OK && app->rank == 0) {
    st = td_prepare(out, frac, nin, inputs, buf, stdout);
  }
  td_bpe_destroy(&bpe);
  free(inputs);
  TD_CHECK(td_agree(app->world, st));
  return TD_OK;
}
