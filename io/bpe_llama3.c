/* bpe_llama3.c — the two files LLaMA 3's tokenizer comes in (td_bpe.h,
 * td_bpe_load_llama3): Meta's tokenizer.model (tiktoken: "BASE64 RANK"
 * lines) and Hugging Face's tokenizer.json. Both become a td_bpe_spec, from
 * which io/bpe.c builds the tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bpe_internal.h"
#include "io/td_json.h"

/* LLaMA 3.1's special tokens after the 128,000 ranks of tokenizer.model
 * (Meta's llama3 tokenizer.py: 256 of them, reserved ones filling the rest). */
#define TD_LLAMA3_NSPECIAL 256
static const char *const llama3_named[] = {
    "<|begin_of_text|>",           "<|end_of_text|>",     "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
    "<|start_header_id|>",         "<|end_header_id|>",   "<|eom_id|>",
    "<|eot_id|>",                  "<|python_tag|>"};

void td_bpe__spec_free(td_bpe_spec *sp) {
  free(sp->tok);
  free(sp->merges);
  free(sp->special);
  memset(sp, 0, sizeof *sp);
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decode standard base64 s[0..n) (padded) into o; its length, or -1. */
static long b64_decode(const unsigned char *s, size_t n, unsigned char *o) {
  if (n == 0 || n % 4 != 0) return -1;
  size_t w = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int k = 0; k < 4; k++) {
      if (s[i + k] == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
      } else if (pad || (v[k] = b64_value(s[i + k])) < 0) {
        return -1;
      }
    }
    uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    o[w++] = (unsigned char)(x >> 16);
    if (pad < 2) o[w++] = (unsigned char)(x >> 8);
    if (pad < 1) o[w++] = (unsigned char)x;
  }
  return (long)w;
}

static td_status grow(void **p, size_t *cap, size_t need, size_t size, const char *name) {
  if (need <= *cap) return TD_OK;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", name);
  *p = q;
  *cap = c;
  return TD_OK;
}

/* The built-in specials, ids base.., written into the arena at *used. */
static td_status builtin_specials(td_bpe_spec *sp, unsigned char *arena, size_t *used,
                                  int32_t base) {
  sp->special = calloc(TD_LLAMA3_NSPECIAL, sizeof *sp->special);
  if (!sp->special) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", sp->name);
  size_t nnamed = sizeof llama3_named / sizeof *llama3_named;
  for (int k = 0; k < TD_LLAMA3_NSPECIAL; k++) {
    char name[48];
    if ((size_t)k < nnamed)
      snprintf(name, sizeof name, "%s", llama3_named[k]);
    else
      snprintf(name, sizeof name, "<|reserved_special_token_%d|>", k - (int)nnamed + 3);
    size_t len = strlen(name);
    memcpy(arena + *used, name, len);
    sp->special[k] = (td_bpe_tok){arena + *used, (uint32_t)len, base + k, 0, 0};
    *used += len;
  }
  sp->nspecial = TD_LLAMA3_NSPECIAL;
  return TD_OK;
}

/* tokenizer.model: "BASE64 RANK\n" per token. */
static td_status parse_tiktoken(const char *name, const unsigned char *s, size_t n,
                                td_bpe_spec *sp, unsigned char *arena) {
  size_t cap = 0, used = 0;
  int64_t line = 1;
  for (size_t i = 0; i < n; line++) {
    const unsigned char *nl = memchr(s + i, '\n', n - i);
    size_t e = nl ? (size_t)(nl - s) : n;
    const unsigned char *sp_ = memchr(s + i, ' ', e - i);
    if (!nl)
      TD_FAIL(TD_ERR_DATA, "%s:%lld: the last line has no newline (a tokenizer.model line is "
              "\"BASE64 RANK\\n\"; the file may be cut short)", name, (long long)line);
    size_t k = sp_ ? (size_t)(sp_ - s) : e;
    long len = sp_ ? b64_decode(s + i, k - i, arena + used) : -1;
    if (line == 1 && len <= 0) /* the wrong kind of file */
      TD_FAIL(TD_ERR_DATA, "%s:1: not a LLaMA 3 tokenizer file: neither a Hugging Face "
              "tokenizer.json (which starts with '{') nor a tokenizer.model of \"BASE64 RANK\" "
              "lines (line 1 is \"%.*s\")", name, (int)(e - i > 40 ? 40 : e - i),
              (const char *)s + i);
    if (!sp_)
      TD_FAIL(TD_ERR_DATA, "%s:%lld: expected \"BASE64 RANK\", found %s", name, (long long)line,
              e == i ? "an empty line" : "no space");
    if (len <= 0)
      TD_FAIL(TD_ERR_DATA, "%s:%lld: the token \"%.*s\" is not base64 (A-Z a-z 0-9 + /, padded "
              "with = to a multiple of 4)", name, (long long)line, (int)(k - i > 60 ? 60 : k - i),
              (const char *)s + i);
    int64_t rank = 0;
    size_t d = k + 1;
    if (d == e) TD_FAIL(TD_ERR_DATA, "%s:%lld: no rank after the token", name, (long long)line);
    for (; d < e; d++) {
      if (s[d] < '0' || s[d] > '9' || rank > INT32_MAX / 10)
        TD_FAIL(TD_ERR_DATA, "%s:%lld: the rank \"%.*s\" is not an integer in [0, 2^31 - 1)",
                name, (long long)line, (int)(e - k - 1 > 20 ? 20 : e - k - 1),
                (const char *)s + k + 1);
      rank = rank * 10 + (s[d] - '0');
    }
    if (rank >= INT32_MAX - TD_LLAMA3_NSPECIAL)
      TD_FAIL(TD_ERR_DATA, "%s:%lld: the rank %lld is too large", name, (long long)line,
              (long long)rank);
    TD_CHECK(grow((void **)&sp->tok, &cap, sp->ntok + 1, sizeof *sp->tok, name));
    sp->tok[sp->ntok++] = (td_bpe_tok){arena + used, (uint32_t)len, (int32_t)rank, line, 0};
    used += (size_t)len;
    i = e + 1;
  }
  sp->kind = TD_BPE_FILE_TIKTOKEN;
  /* Meta's code: the specials follow the ranks (ids len(ranks) + k) */
  return builtin_specials(sp, arena, &used, (int32_t)sp->ntok);
}

/* A tokenizer.json error at value v. */
static td_status jerr(const char *name, const td_json *j, int v, int line, const char *func,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static td_status jerr(const char *name, const td_json *j, int v, int line, const char *func,
                      const char *fmt, ...) {
  char msg[300];
  int64_t l, c;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  td_json_where(j, v, &l, &c);
  return td_error_set(TD_ERR_DATA, __FILE__, line, func, "%s:%lld:%lld: %s", name, (long long)l,
                      (long long)c, msg);
}
#define JFAIL(v, ...)                                                   \
  do {                                                                  \
    st = jerr(name, j, (v), __LINE__, __func__, __VA_ARGS__);           \
    goto done;                                                          \
  } while (0)

/* One byte-alphabet string of tokenizer.json into the arena. */
static long alphabet(const int16_t *tbl, const char *s, size_t n, unsigned char *o, uint32_t *bad) {
  return td_bpe__alphabet_decode(tbl, (const unsigned char *)s, n, o, bad);
}

static td_status parse_hf(const char *name, const unsigned char *s, size_t n, td_bpe_spec *sp,
                          unsigned char *arena) {
  td_status st = TD_OK;
  td_json *j = NULL;
  int16_t tbl[TD_BPE_ALPHABET_END];
  size_t used = 0, nm = 0, ns = 0;
  char shown[128];
  int32_t *vid = NULL; /* vocab index of each id, -1 none */
  int64_t maxid = -1;
  td_bpe__alphabet(tbl);
  TD_CHECK(td_json_parse(name, 1, s, n, &j));
  int root = td_json_root(j);
  if (td_json_kind_of(j, root) != TD_JSON_OBJECT)
    JFAIL(root, "expected an object (a Hugging Face tokenizer.json), found %s",
          td_json_kind_name(td_json_kind_of(j, root)));
  int model = td_json_get(j, root, "model");
  if (model < 0 || td_json_kind_of(j, model) != TD_JSON_OBJECT)
    JFAIL(root, "no \"model\" object: not a Hugging Face tokenizer.json (GPT-2's encoder.json "
                "goes with --tokenizer gpt2)");
  int type = td_json_get(j, model, "type");
  if (type >= 0 && (!td_json_str(j, type, NULL) || strcmp(td_json_str(j, type, NULL), "BPE") != 0))
    JFAIL(type, "model.type must be \"BPE\" (LLaMA 3's byte-level BPE)");
  int vocab = td_json_get(j, model, "vocab"), merges = td_json_get(j, model, "merges");
  if (vocab < 0 || td_json_kind_of(j, vocab) != TD_JSON_OBJECT)
    JFAIL(model, "model.vocab must be an object of tokens to ids");
  if (merges < 0 || td_json_kind_of(j, merges) != TD_JSON_ARRAY)
    JFAIL(model, "model.merges must be an array");
  sp->ntok = (size_t)td_json_count(j, vocab);
  if (!(sp->tok = calloc(sp->ntok + 1, sizeof *sp->tok))) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  size_t k = 0;
  for (int c = td_json_first(j, vocab); c >= 0; c = td_json_next(j, c), k++) {
    size_t kn;
    const char *key = td_json_key(j, c, &kn);
    uint32_t bad = 0;
    long len = alphabet(tbl, key, kn, arena + used, &bad);
    if (len < 0)
      JFAIL(c, "the token \"%s\" has U+%04X, which is not in the byte alphabet (U+0021..U+007E, "
               "U+00A1..U+00AC, U+00AE..U+0143)",
            td_bpe__show((const unsigned char *)key, kn, shown, sizeof shown), bad);
    int64_t id;
    if (!td_json_int(j, c, &id) || id < 0 || id >= INT32_MAX - 1)
      JFAIL(c, "the id of \"%s\" must be an integer in [0, 2^31 - 2)",
            td_bpe__show((const unsigned char *)key, kn, shown, sizeof shown));
    int64_t l, col;
    td_json_where(j, c, &l, &col);
    sp->tok[k] = (td_bpe_tok){arena + used, (uint32_t)len, (int32_t)id, l, col};
    used += (size_t)len;
    if (id > maxid) maxid = id;
  }
  /* merges: "a b" or ["a", "b"] */
  sp->nmerges = (size_t)td_json_count(j, merges);
  if (!(sp->merges = calloc(sp->nmerges + 1, sizeof *sp->merges)))
    TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int c = td_json_first(j, merges); c >= 0; c = td_json_next(j, c), nm++) {
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0, len;
    const char *str = td_json_str(j, c, &len);
    if (str) {
      const char *space = memchr(str, ' ', len);
      if (space && !memchr(space + 1, ' ', len - (size_t)(space + 1 - str)))
        a = str, na = (size_t)(space - str), b = space + 1, nb = len - na - 1;
    } else if (td_json_kind_of(j, c) == TD_JSON_ARRAY && td_json_count(j, c) == 2) {
      a = td_json_str(j, td_json_first(j, c), &na);
      b = td_json_str(j, td_json_next(j, td_json_first(j, c)), &nb);
    }
    if (!a || !b || !na || !nb)
      JFAIL(c, "merge %zu must be \"A B\" (two tokens, one space) or [\"A\", \"B\"]", nm);
    uint32_t bad = 0;
    long la = alphabet(tbl, a, na, arena + used, &bad);
    long lb = la < 0 ? -1 : alphabet(tbl, b, nb, arena + used + la, &bad);
    if (la < 0 || lb < 0)
      JFAIL(c, "merge %zu has U+%04X, which is not in the byte alphabet", nm, bad);
    int64_t l, col;
    td_json_where(j, c, &l, &col);
    sp->merges[nm] = (td_bpe_merge){arena + used, arena + used + la, (uint32_t)la, (uint32_t)lb,
                                    l, col};
    used += (size_t)(la + lb);
  }
  /* added_tokens: the special tokens (an id also in model.vocab must be the
   * same token there, which then is special only) */
  int added = td_json_get(j, root, "added_tokens");
  if (added >= 0 && td_json_kind_of(j, added) != TD_JSON_ARRAY)
    JFAIL(added, "added_tokens must be an array");
  if (!(vid = malloc((size_t)(maxid + 2) * sizeof *vid))) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  memset(vid, 0xFF, (size_t)(maxid + 2) * sizeof *vid);
  for (size_t t = 0; t < sp->ntok; t++)
    if (vid[sp->tok[t].id] < 0) vid[sp->tok[t].id] = (int32_t)t;
  if (!(sp->special = calloc((size_t)td_json_count(j, added) + 1, sizeof *sp->special)))
    TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int c = td_json_first(j, added); c >= 0; c = td_json_next(j, c)) {
    int id_v = td_json_get(j, c, "id"), content = td_json_get(j, c, "content");
    int64_t id;
    size_t len;
    const char *text = td_json_str(j, content, &len);
    if (td_json_kind_of(j, c) != TD_JSON_OBJECT || !td_json_int(j, id_v, &id) || id < 0 ||
        id >= INT32_MAX - 1 || !text || len == 0)
      JFAIL(c, "an added token must be an object with an integer \"id\" in [0, 2^31 - 2) and "
               "a non-empty string \"content\"");
    if (id <= maxid && vid[id] >= 0) {
      size_t at = (size_t)vid[id];
      if (sp->tok[at].len != len || memcmp(sp->tok[at].bytes, text, len) != 0)
        JFAIL(c, "the added token %lld \"%s\" is another token in model.vocab", (long long)id,
              td_bpe__show((const unsigned char *)text, len, shown, sizeof shown));
      vid[id] = -1; /* special only: out of the ordinary tokens */
      if (at != --sp->ntok) {
        sp->tok[at] = sp->tok[sp->ntok];
        if (vid[sp->tok[at].id] == (int32_t)sp->ntok) vid[sp->tok[at].id] = (int32_t)at;
      }
    }
    memcpy(arena + used, text, len);
    int64_t l, col;
    td_json_where(j, c, &l, &col);
    sp->special[ns++] = (td_bpe_tok){arena + used, (uint32_t)len, (int32_t)id, l, col};
    used += len;
  }
  sp->nspecial = ns;
  sp->kind = TD_BPE_FILE_HF_JSON;
done:
  free(vid);
  td_json_destroy(&j);
  return st;
}

td_status td_bpe__llama3_parse(const char *name, const unsigned char *s, size_t n,
                               td_bpe_spec *sp, unsigned char **arena) {
  td_status st = TD_OK;
  memset(sp, 0, sizeof *sp);
  sp->name = name;
  /* decoded bytes never outgrow their spelling; room for the built-in specials */
  *arena = malloc(n + (size_t)TD_LLAMA3_NSPECIAL * 48 + 1);
  if (!*arena) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", name);
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
  if (n == 0) TD_FAIL_GOTO(TD_ERR_DATA, "%s: the tokenizer file is empty", name);
  if (i < n && s[i] == '{')
    st = parse_hf(name, s, n, sp, *arena);
  else
    st = parse_tiktoken(name, s, n, sp, *arena);
done:
  if (st != TD_OK) {
    td_bpe__spec_free(sp);
    free(*arena);
    *arena = NULL;
  }
  return st;
}
