/* choice.c — multiple-choice evaluation on any grid (td_choice.h). */
#include "app/train/td_choice.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/td_json.h"
#include "parallel/td_coll.h"
#include "parallel/td_mpi.h"

/* One scored sequence: an ending after its context. */
typedef struct {
  int64_t off;   /* its tokens in the set's pool */
  int32_t len;   /* ≤ T + 1 */
  int32_t nend;  /* the ending's tokens: the last nend of the sequence */
  int64_t bytes; /* the ending's bytes (acc_norm) */
} td_choice_seq;

struct td_choice_set {
  int32_t *pool;
  int64_t npool, cappool;
  td_choice_seq *seq;
  int64_t nseq, capseq;
  int64_t *first; /* (nex + 1) each example's first sequence */
  int32_t *label;
  int64_t nex, capex, caplabel;
};

static td_status bad(const char *path, int64_t line, int lc, const char *func, const char *fmt,
                     ...) __attribute__((format(printf, 5, 6)));
static td_status bad(const char *path, int64_t line, int lc, const char *func, const char *fmt,
                     ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return td_error_set(TD_ERR_DATA, __FILE__, lc, func, "%s:%lld: %s", path, (long long)line, msg);
}
#define BAD(...) return bad(path, line, __LINE__, __func__, __VA_ARGS__)

static td_status grow(void **p, int64_t *cap, int64_t need, size_t size) {
  if (need <= *cap) return TD_OK;
  int64_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * size);
  if (!q) TD_FAIL(TD_ERR_NOMEM, "out of memory for the multiple-choice examples");
  *p = q;
  *cap = c;
  return TD_OK;
}

/* text's ids (bytes, or the BPE's with special tokens as text) into *ids. */
static td_status encode(td_bpe *bpe, const char *text, size_t n, int32_t **ids, size_t *nids,
                        size_t *cap) {
  *nids = 0;
  if (bpe) return td_bpe_encode_text(bpe, (const unsigned char *)text, n, 0, ids, nids, cap);
  if (*cap < n + 1) {
    int32_t *g = realloc(*ids, (n + 1) * sizeof *g);
    if (!g) TD_FAIL(TD_ERR_NOMEM, "out of memory");
    *ids = g, *cap = n + 1;
  }
  for (size_t k = 0; k < n; k++) (*ids)[k] = (unsigned char)text[k];
  *nids = n;
  return TD_OK;
}

/* One line: {"ctx", "endings", "label"} → its sequences. */
static td_status example(td_choice_set *s, td_bpe *bpe, int32_t start, int64_t T,
                         const td_json *j, const char *path, int64_t line, int32_t **ids,
                         size_t *cap, int32_t **ctx, size_t *ccap) {
  int root = td_json_root(j);
  if (td_json_kind_of(j, root) != TD_JSON_OBJECT)
    BAD("expected a JSON object per line, found %s", td_json_kind_name(td_json_kind_of(j, root)));
  int c = td_json_get(j, root, "ctx"), e = td_json_get(j, root, "endings");
  int l = td_json_get(j, root, "label");
  size_t cn;
  const char *cs = td_json_str(j, c, &cn);
  if (!cs) BAD("field \"ctx\" %s", c < 0 ? "is missing" : "is not a string");
  if (td_json_kind_of(j, e) != TD_JSON_ARRAY)
    BAD("field \"endings\" %s", e < 0 ? "is missing" : "is not an array");
  int64_t k = td_json_count(j, e), label = -1;
  if (k < 2) BAD("field \"endings\" has %lld ending(s); a choice needs at least 2", (long long)k);
  if (l >= 0 && td_json_kind_of(j, l) == TD_JSON_STRING) { /* HellaSwag's files: "label": "3" */
    const char *ls = td_json_str(j, l, NULL);
    char *end = NULL;
    label = strtol(ls, &end, 10);
    if (!*ls || *end) label = -1;
  } else if (!td_json_int(j, l, &label)) {
    label = -1;
  }
  if (label < 0 || label >= k)
    BAD("field \"label\" must be an integer in [0, %lld) (the right ending's index)", (long long)k);
  size_t nctx = 0;
  TD_CHECK(encode(bpe, cs, cn, ctx, &nctx, ccap));
  if (start >= 0) { /* the document start first */
    if (*ccap < nctx + 1) {
      int32_t *g = realloc(*ctx, (nctx + 1) * sizeof *g);
      if (!g) TD_FAIL(TD_ERR_NOMEM, "out of memory");
      *ctx = g, *ccap = nctx + 1;
    }
    memmove(*ctx + 1, *ctx, nctx * sizeof **ctx);
    (*ctx)[0] = start;
    nctx++;
  }
  TD_CHECK(grow((void **)&s->first, &s->capex, s->nex + 2, sizeof *s->first));
  TD_CHECK(grow((void **)&s->label, &s->caplabel, s->nex + 2, sizeof *s->label));
  s->first[s->nex] = s->nseq;
  s->label[s->nex] = (int32_t)label;
  int i = 0;
  for (int v = td_json_first(j, e); v >= 0; v = td_json_next(j, v), i++) {
    size_t en;
    const char *es = td_json_str(j, v, &en);
    if (!es) BAD("endings[%d] is %s, expected a string", i, td_json_kind_name(td_json_kind_of(j, v)));
    char *spaced = malloc(en + 2);
    if (!spaced) TD_FAIL(TD_ERR_NOMEM, "out of memory");
    spaced[0] = ' ';
    memcpy(spaced + 1, es, en);
    size_t nend = 0;
    td_status st = encode(bpe, spaced, en + 1, ids, &nend, cap);
    free(spaced);
    TD_CHECK(st);
    if ((int64_t)nend > T)
      BAD("endings[%d] is %zu tokens, longer than model.seq_len (%lld)", i, nend, (long long)T);
    /* context from the front is dropped beyond T + 1 tokens */
    int64_t keep = (int64_t)nctx;
    if (keep + (int64_t)nend > T + 1) keep = T + 1 - (int64_t)nend;
    int64_t len = keep + (int64_t)nend;
    TD_CHECK(grow((void **)&s->pool, &s->cappool, s->npool + len, sizeof *s->pool));
    memcpy(s->pool + s->npool, *ctx + (nctx - (size_t)keep), (size_t)keep * sizeof(int32_t));
    memcpy(s->pool + s->npool + keep, *ids, nend * sizeof(int32_t));
    TD_CHECK(grow((void **)&s->seq, &s->capseq, s->nseq + 1, sizeof *s->seq));
    s->seq[s->nseq++] = (td_choice_seq){s->npool, (int32_t)len, (int32_t)nend, (int64_t)en + 1};
    s->npool += len;
  }
  s->nex++;
  s->first[s->nex] = s->nseq;
  return TD_OK;
}

td_status td_choice_load(const char *path, td_bpe *bpe, int64_t T, td_choice_set **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_choice_set *s = calloc(1, sizeof *s);
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t bcap = 0, icap = 0, ccap = 0;
  int32_t *ids = NULL, *ctx = NULL, start = -1;
  td_json *j = NULL;
  if (!s) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  if (!f) {
    free(s);
    TD_FAIL(TD_ERR_DATA, "%s: cannot open the multiple-choice file: %s", path, strerror(errno));
  }
  if (bpe) {
    int32_t eos;
    TD_CHECK_GOTO(td_bpe_doc_tokens(bpe, &start, &eos));
  }
  int64_t line = 0;
  for (;;) {
    ssize_t got = getline(&buf, &bcap, f);
    if (got < 0) break;
    line++;
    size_t k = 0;
    while (k < (size_t)got && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\r' || buf[k] == '\n')) k++;
    if (k == (size_t)got) continue;
    TD_CHECK_GOTO(td_json_parse(path, line, (const unsigned char *)buf, (size_t)got, &j));
    TD_CHECK_GOTO(example(s, bpe, start, T, j, path, line, &ids, &icap, &ctx, &ccap));
    td_json_destroy(&j);
  }
  if (ferror(f)) TD_FAIL_GOTO(TD_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  if (s->nex == 0) TD_FAIL_GOTO(TD_ERR_DATA, "%s: no examples", path);
  *out = s;
  s = NULL;
done:
  td_json_destroy(&j);
  fclose(f);
  free(buf);
  free(ids);
  free(ctx);
  td_choice_destroy(&s);
  return st;
}

void td_choice_destroy(td_choice_set **sp) {
  if (!sp || !*sp) return;
  td_choice_set *s = *sp;
  free(s->pool);
  free(s->seq);
  free(s->first);
  free(s->label);
  free(s);
  *sp = NULL;
}

int64_t td_choice_examples(const td_choice_set *s) { return s->nex; }
int64_t td_choice_sequences(const td_choice_set *s) { return s->nseq; }
void td_choice_example(const td_choice_set *s, int64_t e, int64_t *first, int *nend) {
  *first = s->first[e];
  *nend = (int)(s->first[e + 1] - s->first[e]);
}

td_status td_trainer_choice(td_trainer *t, const td_choice_set *s, td_choice_result *r,
                            double *mean) {
  td_status st = TD_OK;
  td_config *c = &t->cfg;
  td_model *m = t->model;
  int64_t T = c->model_seq_len, B = t->B, dp = t->grid->dp, S = s->nseq;
  double *sum = NULL, *part = NULL;
  memset(r, 0, sizeof *r);
  if (!t->mask_win) { /* the windows' masks and documents, for load_micro */
    size_t nw = (size_t)(c->training_global_batch / dp) * (size_t)(T + 1);
    TD_CHECK(td_alloc((void **)&t->mask_win, nw, "loss masks"));
    TD_CHECK(td_alloc((void **)&t->doc_win, nw * sizeof(int32_t), "document starts"));
    TD_CHECK(td_alloc((void **)&t->tok_doc, (size_t)(B * m->T) * sizeof(int32_t),
                      "document starts"));
  }
  TD_CHECK(td_alloc((void **)&sum, (size_t)S * sizeof *sum, "choice scores"));
  TD_CHECK_GOTO(td_alloc((void **)&part, (size_t)B * sizeof *part, "choice scores"));
  memset(sum, 0, (size_t)S * sizeof *sum);
  /* dp rank r scores sequences [r·S/dp, (r+1)·S/dp), B at a time */
  int64_t lo = t->grid->dp_rank * S / dp, hi = (t->grid->dp_rank + 1) * S / dp;
  int64_t per = (S + dp - 1) / dp, nmicro = (per + B - 1) / B; /* the same on every rank */
  for (int64_t jm = 0; jm < nmicro; ++jm) {
    int64_t first = lo + jm * B, n = hi - first;
    if (n > B) n = B;
    if (n < 0) n = 0;
    for (int64_t b = 0; b < (n > 0 ? n : 1); ++b) {
      int32_t *w = t->tok_win + b * (T + 1);
      uint8_t *mk = t->mask_win + b * (T + 1);
      memset(w, 0, (size_t)(T + 1) * sizeof *w);
      memset(mk, 0, (size_t)(T + 1));
      memset(t->doc_win + b * (T + 1), 0, (size_t)(T + 1) * sizeof(int32_t));
      if (n == 0) continue; /* a rank without sequences computes a masked row */
      const td_choice_seq *q = &s->seq[first + b];
      memcpy(w, s->pool + q->off, (size_t)q->len * sizeof *w);
      for (int32_t i = q->len - q->nend; i < q->len; ++i) mk[i] = 1; /* the ending's tokens */
    }
    td_trainer_load_micro(t, 0, n > 0 ? n : 1);
    m->valid_rows = n * m->T;
    double ls = 0.0;
    st = td_pipe_forward(t->pipe, t->tok_in, t->tok_tgt, &ls);
    m->valid_rows = B * m->T;
    TD_CHECK_GOTO(st);
    const double *rl = td_model_row_losses(m); /* the last stage's */
    for (int64_t b = 0; b < B; ++b) {
      part[b] = 0.0;
      for (int64_t i = 0; rl && b < n && i < m->T; ++i) part[b] += rl[b * m->T + i];
    }
    /* a sequence's rows are spread over cp; its loss is on the last stage */
    TD_CHECK_GOTO(td_coll_allreduce_f64(t->grid->cp_comm, part, (int)B, MPI_SUM,
                                        &t->gstats[TD_GROUP_CP]));
    TD_CHECK_GOTO(td_coll_allreduce_f64(t->grid->pp_comm, part, (int)B, MPI_SUM,
                                        &t->gstats[TD_GROUP_PP]));
    for (int64_t b = 0; b < n; ++b) sum[first + b] = part[b];
  }
  TD_CHECK_GOTO(td_coll_allreduce_f64(t->grid->dp_comm, sum, (int)S, MPI_SUM,
                                      &t->gstats[TD_GROUP_DP]));
  for (int64_t e = 0; e < s->nex; ++e) {
    int64_t f0 = s->first[e], best = -1, bestn = -1;
    double bm = 0.0, bn = 0.0;
    for (int64_t q = f0; q < s->first[e + 1]; ++q) {
      double mq = sum[q] / (double)s->seq[q].nend, nq = sum[q] / (double)s->seq[q].bytes;
      if (mean) mean[q] = mq;
      if (best < 0 || mq < bm) best = q - f0, bm = mq;
      if (bestn < 0 || nq < bn) bestn = q - f0, bn = nq;
    }
    r->correct += best == s->label[e];
    r->correct_norm += bestn == s->label[e];
  }
  r->examples = s->nex;
  r->acc = (double)r->correct / (double)r->examples;
  r->acc_norm = (double)r->correct_norm / (double)r->examples;
done:
  td_free(sum);
  td_free(part);
  return st;
}
