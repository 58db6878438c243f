/* prepare_records.c — JSON Lines and chat conversations → a trident token
 * dataset with document boundaries and (chat) a loss mask
 * (td_prepare_records, td_prepare.h). */
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/prepare_internal.h"
#include "io/td_h5.h"
#include "io/td_json.h"
#include "io/td_prepare.h"
#include "io/td_tokenizer_h5.h"

/* The records so far: tokens, their loss mask, where documents start. */
typedef struct {
  uint32_t *tok;
  uint8_t *mask;
  int64_t n, cap;
  int64_t *doc;
  int64_t ndoc, doccap;
  int64_t lines, skipped, masked_in;
} td_records;

/* The tokenizer and the template's tokens. */
typedef struct {
  td_bpe *bpe;        /* NULL: bytes */
  int32_t bos, eos;   /* around a document; -1: none */
  int32_t hdr_start, hdr_end, eot; /* LLaMA 3's chat tokens; -1 for the plain template */
  int32_t *ids;
  size_t nids, idcap;
} td_coder;

static td_status grow(td_records *r, int64_t more) {
  if (r->n + more <= r->cap) return TD_OK;
  int64_t cap = r->cap ? r->cap : 65536;
  while (cap < r->n + more) cap *= 2;
  uint32_t *t = realloc(r->tok, (size_t)cap * sizeof *t);
  if (t) r->tok = t;
  uint8_t *m = realloc(r->mask, (size_t)cap);
  if (m) r->mask = m;
  if (!t || !m) TD_FAIL(TD_ERR_NOMEM, "prepare: out of memory for %lld tokens", (long long)cap);
  r->cap = cap;
  return TD_OK;
}

static td_status put_id(td_records *r, int32_t id, int mask) {
  TD_CHECK(grow(r, 1));
  r->tok[r->n] = (uint32_t)id;
  r->mask[r->n++] = (uint8_t)mask;
  return TD_OK;
}

/* Encode text (special tokens spelled in it stay text) and append it. */
static td_status put_text(td_records *r, td_coder *c, const char *s, size_t n, int mask) {
  if (!c->bpe) {
    TD_CHECK(grow(r, (int64_t)n));
    for (size_t k = 0; k < n; k++) {
      r->tok[r->n] = (unsigned char)s[k];
      r->mask[r->n++] = (uint8_t)mask;
    }
    return TD_OK;
  }
  c->nids = 0;
  TD_CHECK(td_bpe_encode_text(c->bpe, (const unsigned char *)s, n, 0, &c->ids, &c->nids,
                              &c->idcap));
  TD_CHECK(grow(r, (int64_t)c->nids));
  for (size_t k = 0; k < c->nids; k++) {
    r->tok[r->n] = (uint32_t)c->ids[k];
    r->mask[r->n++] = (uint8_t)mask;
  }
  return TD_OK;
}

static td_status start_doc(td_records *r) {
  if (r->ndoc == r->doccap) {
    int64_t cap = r->doccap ? 2 * r->doccap : 1024;
    int64_t *d = realloc(r->doc, (size_t)cap * sizeof *d);
    if (!d) TD_FAIL(TD_ERR_NOMEM, "prepare: out of memory for document starts");
    r->doc = d;
    r->doccap = cap;
  }
  r->doc[r->ndoc++] = r->n;
  return TD_OK;
}

/* A malformed line: the message, TD_ERR_DATA. */
static td_status bad_line(const char *path, int64_t line, int line_c, const char *func,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static td_status bad_line(const char *path, int64_t line, int line_c, const char *func,
                          const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return td_error_set(TD_ERR_DATA, __FILE__, line_c, func, "%s:%lld: %s", path, (long long)line,
                      msg);
}
#define BAD(...) return bad_line(path, line, __LINE__, __func__, __VA_ARGS__)

/* Jinja's `trim` (Python's str.strip) on ASCII white space. */
static const char *trim(const char *s, size_t *n) {
  while (*n > 0 && (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r'))) s++, (*n)--;
  while (*n > 0 && (s[*n - 1] == ' ' || (s[*n - 1] >= '\t' && s[*n - 1] <= '\r'))) (*n)--;
  return s;
}

/* One --format jsonl record: the string field `field`, one document. */
static td_status record_text(td_records *r, td_coder *c, const td_json *j, const char *field,
                             const char *path, int64_t line) {
  int root = td_json_root(j), v = td_json_get(j, root, field);
  if (td_json_kind_of(j, root) != TD_JSON_OBJECT)
    BAD("expected a JSON object per line, found %s", td_json_kind_name(td_json_kind_of(j, root)));
  if (v < 0) BAD("no field \"%s\" (--field names the text's field)", field);
  size_t n;
  const char *s = td_json_str(j, v, &n);
  if (!s) BAD("field \"%s\" is %s, expected a string", field, td_json_kind_name(td_json_kind_of(j, v)));
  TD_CHECK(start_doc(r));
  if (c->bos >= 0 && c->eos >= 0) TD_CHECK(put_id(r, c->bos, 1)); /* LLaMA 3 */
  TD_CHECK(put_text(r, c, s, n, 1));
  return put_id(r, c->eos >= 0 ? c->eos : c->bos, 1);
}

/* One --format chat record: {"messages": [{"role", "content"}, ...]}. */
static td_status record_chat(td_records *r, td_coder *c, const td_json *j, const char *path,
                             int64_t line) {
  static const char *const roles[] = {"system", "user", "assistant"};
  static const char *const plain[] = {"System", "User", "Assistant"};
  int root = td_json_root(j), msgs = td_json_get(j, root, "messages");
  if (td_json_kind_of(j, root) != TD_JSON_OBJECT)
    BAD("expected a JSON object per line, found %s", td_json_kind_name(td_json_kind_of(j, root)));
  if (msgs < 0) BAD("no field \"messages\" (a chat line is {\"messages\": [{\"role\": ..., "
                    "\"content\": ...}, ...]})");
  if (td_json_kind_of(j, msgs) != TD_JSON_ARRAY)
    BAD("field \"messages\" is %s, expected an array", td_json_kind_name(td_json_kind_of(j, msgs)));
  if (td_json_count(j, msgs) == 0) BAD("field \"messages\" is empty");
  /* check every message before writing any token */
  int k = 0;
  for (int m = td_json_first(j, msgs); m >= 0; m = td_json_next(j, m), k++) {
    if (td_json_kind_of(j, m) != TD_JSON_OBJECT)
      BAD("messages[%d] is %s, expected an object", k, td_json_kind_name(td_json_kind_of(j, m)));
    int role = td_json_get(j, m, "role"), content = td_json_get(j, m, "content");
    if (role < 0) BAD("messages[%d] has no \"role\"", k);
    if (content < 0) BAD("messages[%d] has no \"content\"", k);
    const char *rs = td_json_str(j, role, NULL);
    if (!rs) BAD("messages[%d].role is %s, expected a string", k,
                 td_json_kind_name(td_json_kind_of(j, role)));
    if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
      BAD("messages[%d].role is \"%.40s\": expected system, user or assistant", k, rs);
    if (!td_json_str(j, content, NULL))
      BAD("messages[%d].content is %s, expected a string", k,
          td_json_kind_name(td_json_kind_of(j, content)));
  }
  TD_CHECK(start_doc(r));
  int llama3 = c->hdr_start >= 0;
  if (llama3) TD_CHECK(put_id(r, c->bos, 0));
  for (int m = td_json_first(j, msgs); m >= 0; m = td_json_next(j, m)) {
    const char *rs = td_json_str(j, td_json_get(j, m, "role"), NULL);
    size_t n;
    const char *s = td_json_str(j, td_json_get(j, m, "content"), &n);
    int ri = 0;
    while (strcmp(rs, roles[ri]) != 0) ri++;
    int learn = ri == 2; /* the loss is on the assistant's content and its end */
    if (llama3) {
      /* <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|> */
      TD_CHECK(put_id(r, c->hdr_start, 0));
      TD_CHECK(put_text(r, c, rs, strlen(rs), 0));
      TD_CHECK(put_id(r, c->hdr_end, 0));
      TD_CHECK(put_text(r, c, "\n\n", 2, 0));
      s = trim(s, &n);
      TD_CHECK(put_text(r, c, s, n, learn));
      TD_CHECK(put_id(r, c->eot, learn));
    } else {
      /* the plain template: "Role:\n" content "\n\n" */
      char head[16];
      int hn = snprintf(head, sizeof head, "%s:\n", plain[ri]);
      TD_CHECK(put_text(r, c, head, (size_t)hn, 0));
      TD_CHECK(put_text(r, c, s, n, learn));
      TD_CHECK(put_text(r, c, "\n\n", 2, learn));
    }
  }
  return put_id(r, c->eos >= 0 ? c->eos : c->bos, 0);
}

/* Read one input (a file or "-") line by line. */
static td_status read_input(td_records *r, td_coder *c, const char *path, int chat,
                            const char *field, int skip_bad, FILE *log) {
  td_status st = TD_OK;
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  const char *name = f == stdin ? "<stdin>" : path;
  char *buf = NULL;
  size_t cap = 0;
  td_json *j = NULL;
  if (!f) TD_FAIL(TD_ERR_USAGE, "prepare: cannot open %s: %s", path, strerror(errno));
  int64_t line = 0;
  for (;;) {
    ssize_t got = getline(&buf, &cap, f);
    if (got < 0) {
      if (ferror(f)) TD_FAIL_GOTO(TD_ERR_IO, "%s: read failed: %s", name, strerror(errno));
      break;
    }
    line++;
    r->lines++;
    size_t n = (size_t)got, k = 0;
    while (k < n && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\r' || buf[k] == '\n')) k++;
    if (k == n) continue; /* a blank line is no record */
    int64_t before = r->n, before_doc = r->ndoc;
    st = td_json_parse(name, line, (const unsigned char *)buf, n, &j);
    if (st == TD_OK)
      st = chat ? record_chat(r, c, j, name, line) : record_text(r, c, j, field, name, line);
    td_json_destroy(&j);
    if (st == TD_ERR_DATA && skip_bad) {
      if (r->skipped++ < 5 && log) fprintf(log, "prepare: skipped: %s\n", td_error_message());
      td_error_clear();
      st = TD_OK;
      r->n = before, r->ndoc = before_doc;
      continue;
    }
    if (st != TD_OK) goto done;
  }
done:
  free(buf);
  if (f != stdin) fclose(f);
  return st;
}

/* One split (train or val) of the records, [lo, hi) of the tokens. */
static td_status write_split(hid_t f, const td_records *r, int64_t lo, int64_t hi, int val,
                             int wide, int with_mask) {
  td_status st = TD_OK;
  int64_t n = hi - lo, dims[1] = {n};
  char name[32];
  void *buf = NULL;
  snprintf(name, sizeof name, "/%stokens", val ? "val_" : "");
  if (wide) {
    TD_CHECK(td_h5_write(f, name, H5T_NATIVE_UINT32, 1, dims, r->tok + lo));
  } else {
    TD_CHECK(td_alloc(&buf, (size_t)n * sizeof(uint16_t), "prepare tokens"));
    for (int64_t k = 0; k < n; k++) ((uint16_t *)buf)[k] = (uint16_t)r->tok[lo + k];
    TD_CHECK_GOTO(td_h5_write(f, name, H5T_NATIVE_UINT16, 1, dims, buf));
  }
  if (with_mask) {
    snprintf(name, sizeof name, "/%sloss_mask", val ? "val_" : "");
    TD_CHECK_GOTO(td_h5_write(f, name, H5T_NATIVE_UINT8, 1, dims, r->mask + lo));
  }
  TD_CHECK_GOTO(td_prepare__split_documents(f, r->doc, r->ndoc, lo, hi, val));
done:
  td_free(buf);
  return st;
}

td_status td_prepare_records(const char *out_path, double val_fraction, int ninputs,
                             char **inputs, td_bpe *bpe, const td_prepare_opts *o, FILE *log) {
  td_status st = TD_OK;
  td_records r = {0};
  td_coder c = {bpe, -1, -1, -1, -1, -1, NULL, 0, 0};
  hid_t f = -1;
  char *tmp = NULL;
  int chat = o->format == TD_PREPARE_CHAT, tmp_made = 0;
  const char *field = o->field && o->field[0] ? o->field : "text";
  TD_REQUIRE(out_path && out_path[0], TD_ERR_USAGE, "prepare: no output file given (--out)");
  TD_REQUIRE(ninputs >= 1 && inputs, TD_ERR_USAGE,
             "prepare: no inputs (give JSONL files or - for stdin) for %s", out_path);
  TD_REQUIRE(val_fraction >= 0.0 && val_fraction < 1.0, TD_ERR_USAGE,
             "prepare: validation fraction %g for %s is outside [0, 1)", val_fraction, out_path);
  td_h5_init();
  /* the end token: GPT-2's <|endoftext|>, LLaMA 3's <|end_of_text|> (after
   * its <|begin_of_text|>), the bytes tokenizer's NUL byte */
  if (bpe) {
    TD_CHECK(td_bpe_doc_tokens(bpe, &c.bos, &c.eos));
    if (td_bpe_dialect_is_llama3(td_bpe_get_dialect(bpe))) {
      TD_CHECK(td_bpe_token_id(bpe, "<|start_header_id|>", &c.hdr_start));
      TD_CHECK(td_bpe_token_id(bpe, "<|end_header_id|>", &c.hdr_end));
      TD_CHECK(td_bpe_token_id(bpe, "<|eot_id|>", &c.eot));
    }
  } else {
    c.bos = 0; /* NUL ends a document (the only "end token" 256 byte values have) */
  }
  for (int i = 0; i < ninputs; i++)
    TD_CHECK_GOTO(read_input(&r, &c, inputs[i], chat, field, o->skip_bad, log));
  if (r.n < 2)
    TD_FAIL_GOTO(TD_ERR_USAGE, "prepare: the inputs (%s%s) hold no %s records", inputs[0],
                 ninputs > 1 ? ", ..." : "", chat ? "chat" : "JSONL");
  for (int64_t k = 0; k < r.n; k++) r.masked_in += r.mask[k];
  if (chat && r.masked_in == 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "prepare: %s%s: no assistant message in any conversation: the "
                 "loss would count no token", inputs[0], ninputs > 1 ? ", ..." : "");
  int64_t nval = (int64_t)floor((double)r.n * val_fraction);
  if (nval >= r.n - 1) nval = r.n - 2;
  if (nval < 0) nval = 0;
  int64_t ntrain = r.n - nval;
  int64_t vocab = bpe ? td_bpe_vocab_size(bpe) : 256;
  int wide = vocab > 65536;

  size_t tl = strlen(out_path) + 5; /* written next to it, renamed over it at the end */
  TD_CHECK_GOTO(td_alloc((void **)&tmp, tl, "prepare path"));
  snprintf(tmp, tl, "%s.tmp", out_path);
  TD_CHECK_GOTO(td_h5_create(tmp, MPI_COMM_NULL, &f));
  tmp_made = 1;
  TD_CHECK_GOTO(write_split(f, &r, 0, ntrain, 0, wide, chat));
  if (nval > 0) TD_CHECK_GOTO(write_split(f, &r, ntrain, r.n, 1, wide, chat));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "vocab_size", vocab));
  TD_CHECK_GOTO(td_h5_attr_write_str(f, "tokenizer",
                                     bpe ? td_bpe_dialect_name(td_bpe_get_dialect(bpe)) : "bytes"));
  TD_CHECK_GOTO(td_h5_attr_write_str(f, "format", chat ? "chat" : "jsonl"));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "eot_token", c.eos >= 0 ? c.eos : c.bos));
  if (c.eos >= 0) TD_CHECK_GOTO(td_h5_attr_write_i64(f, "bos_token", c.bos));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "documents", r.ndoc));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "skipped_lines", r.skipped));
  if (bpe) {
    TD_CHECK_GOTO(td_h5_attr_write_str(f, "tokenizer_sha256", td_bpe_hash(bpe)));
    td_tokenizer_files tf;
    TD_CHECK_GOTO(td_tokenizer_files_of(bpe, &tf));
    st = td_tokenizer_h5_write(f, &tf, 1);
    td_tokenizer_files_free(&tf);
    TD_CHECK_GOTO(st);
  }
  if (H5Fclose(f) < 0) {
    f = -1;
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot close: %s", tmp, td_h5_error_text());
  }
  f = -1;
  if (rename(tmp, out_path) != 0)
    TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot rename %s to it: %s", out_path, tmp, strerror(errno));
  tmp_made = 0;
  if (log) {
    fprintf(log, "prepare: %lld lines, %lld %s (%lld skipped as malformed), %lld tokens "
            "(%s tokenizer, vocab_size %lld)%s\n", (long long)r.lines, (long long)r.ndoc,
            chat ? "conversations" : "documents", (long long)r.skipped, (long long)r.n,
            bpe ? td_bpe_dialect_name(td_bpe_get_dialect(bpe)) : "bytes", (long long)vocab,
            chat ? "" : "");
    if (chat)
      fprintf(log, "prepare: the loss counts %lld of the tokens (%.1f%%: assistant content and "
              "its end)\n", (long long)r.masked_in, 100.0 * (double)r.masked_in / (double)r.n);
    fprintf(log, "prepare: wrote %s: /tokens %lld train tokens, %s%lld val tokens (val fraction "
            "%g), /documents%s\n", out_path, (long long)ntrain,
            nval > 0 ? "/val_tokens " : "no /val_tokens, ", (long long)nval, val_fraction,
            chat ? ", /loss_mask" : "");
  }
done:
  td_h5_close(&f);
  if (tmp_made) unlink(tmp);
  td_free(tmp);
  free(r.tok);
  free(r.mask);
  free(r.doc);
  free(c.ids);
  return st;
}
