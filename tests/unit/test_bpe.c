/* test_bpe.c — the GPT-2 tokenizer (io/td_bpe.h).
 *
 * Usage:
 *   test_bpe
 *       the offline checks, on small vocabularies written to a temporary
 *       folder ($TMPDIR or /tmp): the BPE of long and short pieces against a
 *       plain reference, both dialects, pre-token boundaries, the invalid-UTF-8
 *       rule, round trips, and malformed encoder.json / vocab.bpe files, each
 *       of which must fail with a message naming the file and the place;
 *   test_bpe [--dialect gpt2|gpt3-encoder] [--hash HEX] [--quiet]
 *            ENCODER_JSON VOCAB_BPE CORPUS EXPECTED_IDS
 *       the offline checks, then CORPUS encoded and compared with the ids of
 *       a reference tokenizer (EXPECTED_IDS: one id per line; "-" skips the
 *       comparison): the first difference is printed with its byte offset,
 *       its pre-token and both id sequences. Then decode(encode(x)) == x
 *       (x with the invalid-UTF-8 rule applied), td_bpe_hash against HEX,
 *       and the encode speed, cold (fresh cache) and warm. --classes FILE
 *       also compares the regex classes (\s, \p{L}, \p{N}) of every code
 *       point with the reference's ("first last class" hex ranges, from
 *       oracle.js --classes or gpt2_encoder.py --classes).
 *   test_bpe --dialect llama3|llama3-js [--hash HEX] [--classes FILE]
 *            TOKENIZER_FILE CORPUS EXPECTED_IDS
 *       the same for LLaMA 3's tokenizer from its one file (tokenizer.model
 *       or tokenizer.json; reference ids from tests/tokenizer/llama3.js).
 * One line per check, then "N passed, M failed"; exit status 1 if any
 * check failed, 2 on a usage error. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <utf8proc.h>

#include "io/td_bpe.h"

static int g_pass, g_fail, g_quiet;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  if (!ok || !g_quiet) {
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
  }
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    if (td_error_status() != TD_OK)
      printf("     pending error: %s\n%s", td_error_message(), td_error_trace());
  }
  fflush(stdout);
  td_error_clear();
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* s shown with C escapes for messages */
static const char *esc(const unsigned char *s, size_t n, char *buf, size_t cap) {
  size_t w = 0;
  for (size_t i = 0; i < n && w + 8 < cap; i++) {
    if (s[i] == '\n') w += (size_t)snprintf(buf + w, cap - w, "\\n");
    else if (s[i] == '\t') w += (size_t)snprintf(buf + w, cap - w, "\\t");
    else if (s[i] < 0x20 || s[i] == 0x7F || s[i] == '"' || s[i] == '\\')
      w += (size_t)snprintf(buf + w, cap - w, "\\x%02X", s[i]);
    else buf[w++] = (char)s[i];
  }
  buf[w] = '\0';
  return buf;
}

static int write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (len == cap) buf = realloc(buf, cap *= 2);
    size_t got = fread(buf + len, 1, cap - len, f);
    if (!got) break;
    len += got;
  }
  fclose(f);
  *n = len;
  return buf;
}

/* ---- a small vocabulary, and a plain reference BPE over it ----------------------- */

/* encoder.py's bytes_to_unicode: the code point of each byte */
static int byte_cp(int b) {
  static int tab[256], ready;
  if (!ready) {
    int extra = 0;
    for (int x = 0; x < 256; x++) {
      int self = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
      tab[x] = self ? x : 256 + extra++;
    }
    ready = 1;
  }
  return tab[b];
}

/* a token's bytes spelled in the alphabet, UTF-8 */
static size_t spell(const unsigned char *t, size_t n, char *o) {
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    int c = byte_cp(t[i]);
    if (c < 0x80) {
      o[w++] = (char)c;
    } else {
      o[w++] = (char)(0xC0 | c >> 6);
      o[w++] = (char)(0x80 | (c & 0x3F));
    }
  }
  o[w] = '\0';
  return w;
}

#define MAXTOK 512
typedef struct {
  int n;                      /* tokens */
  unsigned char tok[MAXTOK][16];
  int len[MAXTOK];
  int nm;                     /* merges */
  int ml[MAXTOK], mr[MAXTOK]; /* token indices of each merge */
} vocab;

static int vocab_find(const vocab *v, const unsigned char *s, int n) {
  for (int i = 0; i < v->n; i++)
    if (v->len[i] == n && memcmp(v->tok[i], s, (size_t)n) == 0) return i;
  return -1;
}

static int vocab_add(vocab *v, const unsigned char *s, int n) {
  int i = vocab_find(v, s, n);
  if (i >= 0) return i;
  memcpy(v->tok[v->n], s, (size_t)n);
  v->len[v->n] = n;
  return v->n++;
}

/* rank and result of each pair of token indices (-1: not a merge) */
static int g_rank[MAXTOK][MAXTOK], g_merged[MAXTOK][MAXTOK];

static int vocab_merge_idx(vocab *v, int l, int r) {
  unsigned char z[16];
  memcpy(z, v->tok[l], (size_t)v->len[l]);
  memcpy(z + v->len[l], v->tok[r], (size_t)v->len[r]);
  int m = vocab_add(v, z, v->len[l] + v->len[r]);
  v->ml[v->nm] = l;
  v->mr[v->nm] = r;
  g_rank[l][r] = v->nm++;
  g_merged[l][r] = m;
  return m;
}

static void vocab_merge(vocab *v, const char *l, const char *r) {
  vocab_merge_idx(v, vocab_add(v, (const unsigned char *)l, (int)strlen(l)),
                  vocab_add(v, (const unsigned char *)r, (int)strlen(r)));
}

/* Write v as encoder.json (keys alternately raw UTF-8 and \u-escaped) and
 * vocab.bpe; token i has id i, "<|endoftext|>" the last id. */
static int vocab_write(const vocab *v, const char *enc, const char *mer) {
  size_t cap = 1 << 20, w = 0;
  char *j = malloc(cap), sp[64];
  w += (size_t)snprintf(j + w, cap - w, "{");
  for (int i = 0; i < v->n; i++) {
    w += (size_t)snprintf(j + w, cap - w, "%s\"", i ? ", " : "");
    for (int k = 0; k < v->len[i]; k++) {
      int c = byte_cp(v->tok[i][k]);
      if (c == '"' || c == '\\') w += (size_t)snprintf(j + w, cap - w, "\\%c", c);
      else if (c >= 0x80 && (i + k) % 2 == 0) w += (size_t)snprintf(j + w, cap - w, "\\u%04x", c);
      else w += spell(&v->tok[i][k], 1, j + w);
    }
    w += (size_t)snprintf(j + w, cap - w, "\": %d", i);
  }
  w += (size_t)snprintf(j + w, cap - w, ", \"<|endoftext|>\": %d}", v->n);
  int ok = write_file(enc, j, w);
  w = (size_t)snprintf(j, cap, "#version: 0.2\n");
  for (int m = 0; m < v->nm; m++) {
    spell(v->tok[v->ml[m]], (size_t)v->len[v->ml[m]], sp);
    w += (size_t)snprintf(j + w, cap - w, "%s ", sp);
    spell(v->tok[v->mr[m]], (size_t)v->len[v->mr[m]], sp);
    w += (size_t)snprintf(j + w, cap - w, "%s\n", sp);
  }
  ok = ok && write_file(mer, j, w);
  free(j);
  return ok;
}

/* encoder.py's bpe() on one piece: the lowest-ranked pair, all its
 * occurrences left to right, again. */
static int ref_bpe(const vocab *v, const unsigned char *p, int m, int *ids) {
  int n = m;
  for (int i = 0; i < m; i++) ids[i] = vocab_find(v, p + i, 1);
  for (;;) {
    int best = -1, l = -1, r = -1;
    for (int i = 0; i + 1 < n; i++) {
      int k = g_rank[ids[i]][ids[i + 1]];
      if (k >= 0 && (best < 0 || k < best)) best = k, l = ids[i], r = ids[i + 1];
    }
    if (best < 0) break;
    int w = 0;
    for (int i = 0; i < n;) {
      if (i + 1 < n && ids[i] == l && ids[i + 1] == r) {
        ids[w++] = g_merged[l][r];
        i += 2;
      } else {
        ids[w++] = ids[i++];
      }
    }
    n = w;
  }
  return n;
}

static unsigned g_seed = 12345;
static unsigned rnd(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return g_seed >> 8;
}

static char g_dir[4096];

static void path_in(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

/* encode and compare with want[0..nw) */
static int encodes_to(td_bpe *b, const char *text, size_t n, const int *want, size_t nw) {
  int32_t *ids = NULL;
  size_t nids = 0, cap = 0;
  int ok = td_bpe_encode(b, (const unsigned char *)text, n, &ids, &nids, &cap) == TD_OK &&
           nids == nw;
  for (size_t i = 0; ok && i < nw; i++) ok = ids[i] == want[i];
  free(ids);
  return ok;
}

static void offline_bpe(void) {
  static vocab v;
  memset(&v, 0, sizeof v);
  memset(g_rank, 0xFF, sizeof g_rank);
  /* GPT-2's order: the bytes that stand for themselves, then the others */
  for (int pass = 0; pass < 2; pass++)
    for (int y = 0; y < 256; y++)
      if ((byte_cp(y) < 256) == (pass == 0)) {
        unsigned char c = (unsigned char)y;
        vocab_add(&v, &c, 1);
      }
  /* random well-ordered merges over a..d: every part exists before it is used */
  const char *letters = "abcd";
  int cand[MAXTOK], ncand = 0;
  for (const char *q = letters; *q; q++) cand[ncand++] = vocab_find(&v, (const unsigned char *)q, 1);
  while (v.nm < 120) {
    int l = cand[rnd() % (unsigned)ncand], r = cand[rnd() % (unsigned)ncand];
    unsigned char z[16];
    if (v.len[l] + v.len[r] > 8) continue;
    memcpy(z, v.tok[l], (size_t)v.len[l]);
    memcpy(z + v.len[l], v.tok[r], (size_t)v.len[r]);
    if (vocab_find(&v, z, v.len[l] + v.len[r]) >= 0) continue;
    cand[ncand++] = vocab_merge_idx(&v, l, r);
  }
  /* GPT-2's comma pairs: ("\"", ",\"") shares its JavaScript key with ("\",", "\"") */
  vocab_merge(&v, " ", "t");
  vocab_merge(&v, "h", "e");
  vocab_merge(&v, " t", "he");
  vocab_merge(&v, "\"", ",");
  vocab_merge(&v, ",", "\"");
  vocab_merge(&v, "\"", ",\"");
  char enc[4200], mer[4200];
  path_in(enc, sizeof enc, "small_encoder.json");
  path_in(mer, sizeof mer, "small_vocab.bpe");
  check(vocab_write(&v, enc, mer), "write a small vocabulary (%d tokens, %d merges) to %s", v.n,
        v.nm, g_dir);

  td_bpe *b = NULL, *js = NULL;
  check(td_bpe_load(enc, mer, &b) == TD_OK, "load the small vocabulary (gpt2)");
  check(td_bpe_load_dialect(enc, mer, TD_BPE_GPT3_ENCODER, &js) == TD_OK,
        "load the small vocabulary (gpt3-encoder)");
  if (!b || !js) return;
  check(td_bpe_vocab_size(b) == v.n + 1, "vocab_size %lld == %d", (long long)td_bpe_vocab_size(b),
        v.n + 1);
  int32_t eot = -1;
  td_status st = td_bpe_token_id(b, "<|endoftext|>", &eot);
  check(st == TD_OK && eot == v.n, "td_bpe_token_id(<|endoftext|>) = %d", eot);
  check(td_bpe_token_id(b, "\xC4\xA0the", &eot) == TD_OK && eot == vocab_find(&v, (const unsigned char *)" the", 4),
        "td_bpe_token_id(\"\\u0120the\") is the token \" the\"");
  check(td_bpe_token_id(b, "nope", &eot) == TD_ERR_USAGE && strstr(td_error_message(), "nope"),
        "td_bpe_token_id of a missing key fails naming it");

  /* the SHA-256 against sha256sum, when there is one */
  char cmd[9000], line[128] = "";
  snprintf(cmd, sizeof cmd, "cat '%s' '%s' | sha256sum 2>/dev/null", enc, mer);
  FILE *p = popen(cmd, "r");
  if (p && fgets(line, sizeof line, p) && strlen(line) >= 64) {
    line[64] = '\0';
    check(strcmp(line, td_bpe_hash(b)) == 0, "td_bpe_hash %s == sha256sum %s", td_bpe_hash(b), line);
  } else {
    printf("skip td_bpe_hash: no sha256sum\n");
  }
  if (p) pclose(p);

  /* random pieces of letters (one pre-token each): rescanning and priority
   * queue BPE (above TD_BPE_HEAP_MIN bytes) against the plain reference */
  int bad = 0, npieces = 0, maxlen = 0;
  for (int t = 0; t < 3000 && bad < 3; t++) {
    char s[520];
    int m = t < 2000 ? 1 + (int)(rnd() % 40) : 1 + (int)(rnd() % 500);
    int alpha = 1 + (int)(rnd() % 4);
    for (int i = 0; i < m; i++) s[i] = letters[rnd() % (unsigned)alpha];
    int want[1024];
    int nw = ref_bpe(&v, (const unsigned char *)s, m, want);
    td_bpe *which = t % 2 ? b : js; /* no commas: the dialects agree */
    if (!encodes_to(which, s, (size_t)m, want, (size_t)nw)) {
      char sh[1200];
      printf("     piece \"%s\" (%d bytes)\n", esc((unsigned char *)s, (size_t)m, sh, sizeof sh), m);
      bad++;
    }
    npieces++;
    if (m > maxlen) maxlen = m;
  }
  check(bad == 0, "%d random pieces up to %d bytes: BPE == the plain reference", npieces, maxlen);

  int the[1] = {vocab_find(&v, (const unsigned char *)" the", 4)};
  check(encodes_to(b, " the", 4, the, 1), "\" the\" -> one token");
  int q2[2] = {vocab_find(&v, (const unsigned char *)"\",", 2), vocab_find(&v, (const unsigned char *)"\"", 1)};
  int q1[1] = {vocab_find(&v, (const unsigned char *)"\",\"", 3)};
  check(encodes_to(b, "\",\"", 3, q2, 2), "gpt2: \"\\\",\\\"\" -> two tokens (\"\\\",\" \"\\\"\")");
  check(encodes_to(js, "\",\"", 3, q1, 1),
        "gpt3-encoder: \"\\\",\\\"\" -> one token (its rank is looked up by the key \"\\\",,\\\"\")");

  /* pre-token boundaries (gpt2 / gpt3-encoder differ on U+0085 and U+FEFF) */
  static const struct {
    const char *text, *cuts; /* cuts: '|' before each pre-token but the first */
    int dialect;             /* -1 both */
  } pre[] = {
      {"Hello world", "Hello| world", -1},
      {"  \n\n   x", "  \n\n  | x", -1},
      {"a  b", "a| | b", -1},
      {"x\t\ty", "x|\t|\t|y", -1},
      {"end  ", "end|  ", -1},
      {"it's I'M we'll they've you're I'd 'twas", "it|'s| I|'|M| we|'ll| they|'ve| you|'re| I|'d| '|twas", -1},
      {"''s", "''|s", -1},
      {"1,000,000 3.14 12345", "1|,|000|,|000| 3|.|14| 12345", -1},
      {"!!!?? ...", "!!!??| ...", -1},
      {"na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87", "na\xC3\xAFve| \xE4\xB8\xAD\xE6\x96\x87", -1},
      {"e\xCC\x81", "e|\xCC\x81", -1}, /* the combining mark is Mn: not \p{L} */
      {"\xC2\xA0x", "\xC2\xA0|x", -1},
      {" \xC2\xA0x", " |\xC2\xA0|x", -1},
      {"a\xE2\x80\x83\xE3\x80\x80z", "a|\xE2\x80\x83|\xE3\x80\x80|z", -1},
      {"\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!", -1},
      {"a\xC2\x85\xC2\x85z", "a|\xC2\x85|\xC2\x85|z", TD_BPE_GPT2},
      {"a\xC2\x85\xC2\x85z", "a|\xC2\x85\xC2\x85|z", TD_BPE_GPT3_ENCODER},
      {"\xEF\xBB\xBF\n\nx", "\xEF\xBB\xBF|\n|\n|x", TD_BPE_GPT2},
      {"\xEF\xBB\xBF\n\nx", "\xEF\xBB\xBF\n|\n|x", TD_BPE_GPT3_ENCODER},
      {" ", " ", -1},
      {"x ", "x| ", -1},
  };
  for (size_t k = 0; k < sizeof pre / sizeof *pre; k++) {
    for (int d = 0; d < 2; d++) {
      if (pre[k].dialect >= 0 && pre[k].dialect != d) continue;
      td_bpe *tb = d == TD_BPE_GPT2 ? b : js;
      const unsigned char *s = (const unsigned char *)pre[k].text;
      size_t n = strlen(pre[k].text), w = 0;
      char got[256], s1[512], s2[512];
      for (size_t i = 0; i < n;) {
        size_t e = td_bpe_pretoken_end(tb, s, n, i);
        if (i) got[w++] = '|';
        memcpy(got + w, s + i, e - i);
        w += e - i;
        i = e;
      }
      got[w] = '\0';
      check(strcmp(got, pre[k].cuts) == 0, "%s: \"%s\" -> \"%s\"", td_bpe_dialect_name((td_bpe_dialect)d),
            esc(s, n, s1, sizeof s1), esc((unsigned char *)got, w, s2, sizeof s2));
    }
  }

  /* the invalid-UTF-8 rule: one U+FFFD per maximal subpart */
  static const struct {
    const char *in;
    size_t n;
    int nrep;
  } bad8[] = {
      {"\x80", 1, 1},             {"a\xE2\x82" "b", 4, 1},  {"\xFF", 1, 1},
      {"\xC0\xAF", 2, 2},         {"\xED\xA0\x80", 3, 3},   {"\xF4\x90\x80\x80", 4, 4},
      {"\xF0\x80\x80\x80", 4, 4}, {"\xF0\x9F\x98", 3, 1},   {"\xE0\x80\x80", 3, 3},
      {"\xC2", 1, 1},             {"\xE2\x82\xE2\x82\xAC", 5, 1},
      {"\xF1\x80\x80\xE1\x80\xC2", 6, 3}, {"ok \xE2\x82\xAC", 6, 0},
  };
  for (size_t k = 0; k < sizeof bad8 / sizeof *bad8; k++) {
    unsigned char *o = NULL;
    size_t on = 0, nr = 0;
    char s1[64];
    st = td_bpe_sanitize_utf8((const unsigned char *)bad8[k].in, bad8[k].n, &o, &on, &nr);
    check(st == TD_OK && (int)nr == bad8[k].nrep, "sanitize \"%s\": %zu replacement(s), want %d",
          esc((const unsigned char *)bad8[k].in, bad8[k].n, s1, sizeof s1), nr, bad8[k].nrep);
    free(o);
  }

  /* round trips of random bytes: decode(encode(x)) == sanitize(x) */
  int rt_bad = 0;
  for (int t = 0; t < 300; t++) {
    unsigned char s[300];
    size_t m = rnd() % sizeof s;
    for (size_t i = 0; i < m; i++) {
      unsigned r = rnd() % 8;
      s[i] = r < 4 ? (unsigned char)"ab, \n'\"s"[rnd() % 8] : (unsigned char)(rnd() & 0xFF);
    }
    unsigned char *clean = NULL;
    size_t nclean = 0;
    int32_t *ids = NULL;
    size_t nids = 0, cap = 0, nout = 0;
    char *out = NULL;
    int ok = td_bpe_sanitize_utf8(s, m, &clean, &nclean, NULL) == TD_OK &&
             td_bpe_encode(t % 2 ? b : js, s, m, &ids, &nids, &cap) == TD_OK &&
             td_bpe_decode(b, ids, nids, &out, &nout) == TD_OK && nout == nclean &&
             memcmp(out, clean, nclean) == 0;
    rt_bad += !ok;
    free(clean);
    free(ids);
    free(out);
  }
  check(rt_bad == 0, "300 random byte strings: decode(encode(x)) == sanitize(x)");

  int32_t badids[3] = {0, (int32_t)v.n + 1, 1};
  char *out = NULL;
  size_t nout = 0;
  check(td_bpe_decode(b, badids, 3, &out, &nout) == TD_ERR_USAGE &&
            strstr(td_error_message(), "id ") && strstr(td_error_message(), "index 1"),
        "decode of an id out of range fails naming it: %s", td_error_message());
  td_bpe_destroy(&b);
  td_bpe_destroy(&js);
  td_bpe_destroy(&b); /* NULL is fine */
}

/* ---- malformed files --------------------------------------------------------------- */

static void offline_malformed(void) {
  /* a minimal valid pair of files: all 256 bytes, one merge */
  size_t cap = 1 << 16, w = 0;
  char *good = malloc(cap), sp[8];
  w += (size_t)snprintf(good + w, cap - w, "{");
  for (int x = 0; x < 256; x++) {
    unsigned char c = (unsigned char)x;
    spell(&c, 1, sp);
    if (sp[0] == '"' || sp[0] == '\\') w += (size_t)snprintf(good + w, cap - w, "\"\\%s\": %d, ", sp, x);
    else w += (size_t)snprintf(good + w, cap - w, "\"%s\": %d, ", sp, x);
  }
  /* keep "ab" last, so that a suffix can be swapped in */
  size_t head = w;
  w += (size_t)snprintf(good + w, cap - w, "\"ab\": 256}\n");
  char enc[4200], mer[4200], bad[4200];
  path_in(enc, sizeof enc, "good_encoder.json");
  path_in(mer, sizeof mer, "good_vocab.bpe");
  path_in(bad, sizeof bad, "bad_file");
  const char *merges = "#version: 0.2\na b\n";
  write_file(enc, good, w);
  write_file(mer, merges, strlen(merges));
  td_bpe *b = NULL;
  check(td_bpe_load(enc, mer, &b) == TD_OK, "a minimal valid encoder.json + vocab.bpe loads");
  td_bpe_destroy(&b);

  /* encoder.json: the tail after the 256 byte tokens, or a whole file (head = 0) */
  static const struct {
    int whole;
    const char *tail, *where, *what;
  } ej[] = {
      {0, "\"ab\": 256,}", ":1:", "expected a string key"},
      {0, "\"ab\" 256}", ":1:", "expected ':'"},
      {0, "\"ab\": 1.5}", ":1:", "integers"},
      {0, "\"ab\": -3}", ":1:", "negative"},
      {0, "\"ab\": 99999999999}", ":1:", "too large"},
      {0, "\"ab\": 256,\n\"ab\": 257}", ":2:1", "duplicate key"},
      {0, "\"ab\": 256,\n  \"cd\": 5}", ":2:3", "id 5"},
      {0, "\"a\\ud800b\": 256}", ":1:", "surrogate"},
      {0, "\"a\\udc00\": 256}", ":1:", "lone low surrogate"},
      {0, "\"\\ud83d\\ude00\": 256}", ":1:", "U+1F600"},
      {0, "\"\\u4e2d\": 256}", ":1:", "U+4E2D"},
      {0, "\"a\\xb\": 256}", ":1:", "unknown escape"},
      {0, "\"a\tb\": 256}", ":1:", "control byte"},
      {0, "\"ab\": 256} x", ":1:", "after the end"},
      {0, "\"ab\": 256", ":1:", "expected ',' or '}'"},
      {0, "\"ab", ":1:", "not closed"},
      {0, "\"ab\": true}", ":1:", "expected an integer id"},
      {0, "\"\": 256}", ":1:", "empty key"},
      {1, "[1, 2]", ":1:1 (byte 0)", "expected '{'"},
      {1, "\xEF\xBB\xBF{}", ":1:1", "byte order mark"},
      {1, "{\n\n}", ":3:1", "empty"},
      {1, "{\"a\": 0}", ": no token for byte 0x00", "every single byte"},
  };
  for (size_t k = 0; k < sizeof ej / sizeof *ej; k++) {
    char *f = malloc(cap);
    size_t n = ej[k].whole ? 0 : head;
    memcpy(f, good, n);
    memcpy(f + n, ej[k].tail, strlen(ej[k].tail));
    n += strlen(ej[k].tail);
    write_file(bad, f, n);
    free(f);
    td_status st = td_bpe_load(bad, mer, &b);
    char want[4300], s1[128];
    snprintf(want, sizeof want, "%s%s", bad, ej[k].where);
    const char *msg = td_error_message();
    check(st == TD_ERR_DATA && strstr(msg, want) && strstr(msg, ej[k].what) && !b,
          "encoder.json ...%s -> %s", esc((const unsigned char *)ej[k].tail, strlen(ej[k].tail), s1, sizeof s1),
          msg[0] ? msg : td_status_name(st));
  }

  static const struct {
    const char *text, *where, *what;
  } mb[] = {
      {"a b\n", ":1:", "#version"},
      {"#version: 0.2", ":1:", "no newline"},
      {"#version: 0.2\na b\nab", ":3:", "no newline"},
      {"#version: 0.2\na b\nab\n", ":3:", "two symbols"},
      {"#version: 0.2\na  b\n", ":2:", "two symbols"},
      {"#version: 0.2\na b c\n", ":2:", "two symbols"},
      {"#version: 0.2\n\n", ":2:", "two symbols"},
      {"#version: 0.2\na b\nb a\n", ":3:", "not in encoder.json"},
      {"#version: 0.2\nab zz\n", ":2:", "\"zz\" is not a key"},
      {"#version: 0.2\na \xE4\xB8\xAD\n", ":2:", "U+4E2D"},
      {"#version: 0.2\na \xFF\n", ":2:", "invalid UTF-8"},
  };
  for (size_t k = 0; k < sizeof mb / sizeof *mb; k++) {
    write_file(bad, mb[k].text, strlen(mb[k].text));
    td_status st = td_bpe_load(enc, bad, &b);
    char want[4300], s1[128];
    snprintf(want, sizeof want, "%s%s", bad, mb[k].where);
    const char *msg = td_error_message();
    check(st == TD_ERR_DATA && strstr(msg, want) && strstr(msg, mb[k].what) && !b,
          "vocab.bpe \"%s\" -> %s", esc((const unsigned char *)mb[k].text, strlen(mb[k].text), s1, sizeof s1),
          msg[0] ? msg : td_status_name(st));
  }
  /* CRLF line ends are what str.split() accepts */
  write_file(bad, "#version: 0.2\r\na b\r\n", 20);
  check(td_bpe_load(enc, bad, &b) == TD_OK, "vocab.bpe with CRLF line ends loads");
  td_bpe_destroy(&b);

  char missing[4300];
  path_in(missing, sizeof missing, "no_such_file.json");
  td_status st = td_bpe_load(missing, mer, &b);
  check(st == TD_ERR_IO && strstr(td_error_message(), missing), "a missing file -> %s",
        td_error_message());
  unlink(enc);
  unlink(mer);
  unlink(bad);
  free(good);
}

/* ---- LLaMA 3's files, pre-tokenizer and special tokens --------------------------- */

static const char *b64(const unsigned char *s, size_t n, char *o) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t w = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t x = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                 (i + 2 < n ? s[i + 2] : 0);
    o[w++] = a[x >> 18 & 63];
    o[w++] = a[x >> 12 & 63];
    o[w++] = i + 1 < n ? a[x >> 6 & 63] : '=';
    o[w++] = i + 2 < n ? a[x & 63] : '=';
  }
  o[w] = '\0';
  return o;
}

/* pieces of text under b's pre-tokenizer, joined by '|' */
static const char *pieces(const td_bpe *b, const char *text, char *o, size_t cap) {
  size_t n = strlen(text), w = 0;
  for (size_t i = 0; i < n;) {
    size_t e = td_bpe_pretoken_end(b, (const unsigned char *)text, n, i);
    if (i && w + 1 < cap) o[w++] = '|';
    for (size_t k = i; k < e && w + 1 < cap; k++) o[w++] = text[k];
    i = e;
  }
  o[w] = '\0';
  return o;
}

static int expect_fail(td_status st, const char *where, const char *what) {
  const char *m = td_error_message();
  int ok = st == TD_ERR_DATA && m && strstr(m, where) && strstr(m, what);
  if (!ok) printf("     message: %s\n", m ? m : "(none)");
  return ok;
}

static void offline_llama3(void) {
  /* tokenizer.model: the 256 bytes (ranks 0..255), then ab, abc, bc, " a" */
  static const char *extra[] = {"ab", "abc", "bc", " a"};
  char line[64], enc[24];
  size_t cap = 1 << 16, w = 0;
  char *model = malloc(cap);
  for (int x = 0; x < 256; x++) {
    unsigned char c = (unsigned char)x;
    w += (size_t)snprintf(model + w, cap - w, "%s %d\n", b64(&c, 1, enc), x);
  }
  for (int k = 0; k < 4; k++)
    w += (size_t)snprintf(model + w, cap - w, "%s %d\n",
                          b64((const unsigned char *)extra[k], strlen(extra[k]), enc), 256 + k);
  char path[4300], jpath[4300];
  path_in(path, sizeof path, "tokenizer.model");
  path_in(jpath, sizeof jpath, "tokenizer.json");
  write_file(path, model, w);
  td_bpe *b = NULL;
  check(td_bpe_load_llama3(path, TD_BPE_LLAMA3, &b) == TD_OK,
        "llama3: a minimal tokenizer.model loads (vocab_size %lld: 260 + 256 special)",
        b ? (long long)td_bpe_vocab_size(b) : -1LL);
  if (b) {
    int want1[] = {'x', 257, 256}; /* x|ab|c|ab -> x|abc|ab (rank 256 before 257) */
    check(encodes_to(b, "xabcab", 6, want1, 3), "llama3 tokenizer.model: \"xabcab\" -> x abc ab");
    int want2[] = {257}; /* a piece that is a token is that token */
    check(encodes_to(b, "abc", 3, want2, 1), "llama3: ignore_merges (\"abc\" is one token)");
    int32_t eot = -1, bot = -1;
    check(td_bpe_token_id(b, "<|eot_id|>", &eot) == TD_OK && eot == 260 + 9 &&
              td_bpe_token_id(b, "<|begin_of_text|>", &bot) == TD_OK && bot == 260 &&
              td_bpe_token_id(b, "<|reserved_special_token_247|>", &eot) == TD_OK && eot == 515,
          "llama3 tokenizer.model: Meta's special tokens follow the ranks (eot_id %d)", eot);
    int want3[] = {'x', 260 + 9, 'y'};
    check(encodes_to(b, "x<|eot_id|>y", 12, want3, 3), "llama3: a special token in the text is its id");
    int32_t *ids = NULL;
    size_t nids = 0, icap = 0;
    check(td_bpe_encode_text(b, (const unsigned char *)"<|eot_id|>", 10, 0, &ids, &nids, &icap) ==
              TD_OK && nids > 1,
          "llama3: td_bpe_encode_text(specials = 0) spells it as text (%zu ids)", nids);
    char *dec = NULL;
    size_t nd = 0;
    int32_t one = 260 + 9;
    check(td_bpe_decode(b, &one, 1, &dec, &nd) == TD_OK && strcmp(dec, "<|eot_id|>") == 0,
          "llama3: a special token decodes to its text");
    free(dec);
    free(ids);
    static const struct { const char *in, *out; } pt[] = {
        {"12345 1234567", "123|45| |123|456|7"},
        {"I'M here, we'Ll", "I|'M| here|,| we|'Ll"},
        {"(word) x_id _id $x", "(word|)| x|_id| _|id| $|x"},
        {"end.\nnext", "end|.\n|next"},
        {"a \n b", "a| \n| b"},
        {"a   b", "a|  | b"},
        {"x  ", "x|  "},
        {"a\r\n\r\nb", "a|\r\n\r\n|b"},
        {"a \t\n  \n\tb", "a| \t\n  \n|\tb"},
        {"x!!\n\n", "x|!!\n\n"},
        {"'sunny 'Sx 's", "'s|unny| '|Sx| '|s"},
        {"\xc2\xa0word \xc2\xa0\xc2\xa0", "\xc2\xa0word| \xc2\xa0\xc2\xa0"},
    };
    char got[256];
    for (size_t k = 0; k < sizeof pt / sizeof *pt; k++) {
      pieces(b, pt[k].in, got, sizeof got);
      char sh1[200], sh2[200];
      check(strcmp(got, pt[k].out) == 0, "llama3 pre-tokens of \"%s\": \"%s\"",
            esc((const unsigned char *)pt[k].in, strlen(pt[k].in), sh1, sizeof sh1),
            esc((const unsigned char *)got, strlen(got), sh2, sizeof sh2));
    }
    /* U+017F LONG S folds to s in Rust's and Oniguruma's (?i), not in the JS port */
    pieces(b, "'\xc5\xbft", got, sizeof got);
    check(strcmp(got, "'\xc5\xbf|t") == 0, "llama3: \"'\\u017Ft\" -> 'ſ|t (a contraction)");
    td_bpe_destroy(&b);
    check(td_bpe_load_llama3(path, TD_BPE_LLAMA3_JS, &b) == TD_OK, "llama3-js loads the same file");
    pieces(b, "'\xc5\xbft", got, sizeof got);
    check(strcmp(got, "'\xc5\xbft") == 0, "llama3-js: \"'\\u017Ft\" is one piece ([sS] only)");
    td_bpe_destroy(&b);
  }

  /* the same tokens as tokenizer.json, merges in rank order */
  const char *json_head = "{\n  \"added_tokens\": [{\"id\": 300, \"content\": \"<|eot_id|>\", "
                          "\"special\": true}],\n  \"model\": {\"type\": \"BPE\", \"vocab\": {";
  size_t jw = 0;
  char *json = malloc(cap);
  jw += (size_t)snprintf(json + jw, cap - jw, "%s", json_head);
  for (int x = 0; x < 256; x++) {
    unsigned char c = (unsigned char)x;
    char sp[8];
    spell(&c, 1, sp);
    jw += (size_t)snprintf(json + jw, cap - jw, "%s\"%s%s\": %d", x ? ", " : "",
                           sp[0] == '"' || sp[0] == '\\' ? "\\" : "", sp, x);
  }
  jw += (size_t)snprintf(json + jw, cap - jw, ", \"ab\": 256, \"abc\": 257, \"bc\": 258, "
                         "\"\xc4\xa0" "a\": 259},\n  \"merges\": [\"a b\", [\"ab\", \"c\"], "
                         "\"b c\", \"\xc4\xa0 a\"]}}\n");
  write_file(jpath, json, jw);
  check(td_bpe_load_llama3(jpath, TD_BPE_LLAMA3, &b) == TD_OK,
        "llama3: a minimal tokenizer.json loads (merges as \"a b\" and [\"a\", \"b\"])");
  if (b) {
    int want1[] = {'x', 257, 256}, want3[] = {'x', 300, 'y'};
    check(encodes_to(b, "xabcab", 6, want1, 3) && encodes_to(b, "x<|eot_id|>y", 12, want3, 3),
          "llama3 tokenizer.json: the same ids; added_tokens are special");
    check(td_bpe_file_name(b) && strcmp(td_bpe_file_name(b), "tokenizer.json") == 0,
          "td_bpe_file_name: tokenizer.json");
    td_bpe_destroy(&b);
  }

  /* malformed files: each names the file and the place */
  static const struct { int json; const char *text, *where, *what; } bad[] = {
      {0, "YWI= 0\n!!!! 1\n", "tokenizer.bad:2", "not base64"},
      {0, "YWI=\n", "tokenizer.bad:1", "not a LLaMA 3 tokenizer file"},
      {0, "YQ== 0\nYWI=\n", "tokenizer.bad:2", "no space"},
      {0, "YQ== 0\nYg== x\n", "tokenizer.bad:2", "not an integer"},
      {0, "YQ== 0\nYg== 0\n", "tokenizer.bad:2", "id 0 is given to two tokens"},
      {0, "YQ== 0\nYQ== 1\n", "tokenizer.bad:2", "given twice"},
      {0, "YQ== 0\nYg== 1", "tokenizer.bad:2", "no newline"},
      {0, "YQ== 0\n", "tokenizer.bad", "no token for the byte 0x00"},
      {0, "", "tokenizer.bad", "empty"},
      {1, "{\"model\": {\"vocab\": {}, \"merges\": []}", "tokenizer.bad:1:", "expected ',' or '}'"},
      {1, "{\"a\": 1}", "tokenizer.bad:1:1", "no \"model\" object"},
      {1, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}, \"merges\": []}}", "tokenizer.bad:1:",
       "model.type"},
      {1, "{\"model\": {\"vocab\": {\"a\": 0, \"\xe4\xb8\xad\": 1}, \"merges\": []}}",
       "tokenizer.bad:1:", "U+4E2D"},
      {1, "{\"model\": {\"vocab\": {\"a\": 0,\n\"a\": 1}, \"merges\": []}}", "tokenizer.bad:2:1",
       "given twice"},
      {1, "{\"model\": {\"vocab\": {\"a\": 1.5}, \"merges\": []}}", "tokenizer.bad:1:",
       "must be an integer"},
      {1, "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "tokenizer.bad:1:",
       "merge 0 must be"},
      {1, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<x>\"}], \"model\": {\"vocab\": "
          "{\"a\": 0}, \"merges\": []}}", "tokenizer.bad:1:", "another token in model.vocab"},
      {1, "{\"model\": {\"vocab\": {\"a\xff\": 0}, \"merges\": []}}", "tokenizer.bad:1:",
       "invalid UTF-8"},
  };
  char bpath[4300];
  path_in(bpath, sizeof bpath, "tokenizer.bad");
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    write_file(bpath, bad[k].text, strlen(bad[k].text));
    td_status st = td_bpe_load_llama3(bpath, TD_BPE_LLAMA3, &b);
    check(st != TD_OK && b == NULL && expect_fail(st, bad[k].where, bad[k].what),
          "llama3 malformed %s %zu: \"%s ... %s\"", bad[k].json ? "tokenizer.json" : "tokenizer.model",
          k, bad[k].where, bad[k].what);
    td_bpe_destroy(&b);
  }
  /* a merge of a token that is not one: the good tokenizer.json, its first merge changed */
  char *m = strstr(json, "[\"a b\"");
  if (m) {
    size_t at = (size_t)(m - json);
    char *bj = malloc(jw + 8);
    memcpy(bj, json, at);
    size_t bw = at + (size_t)sprintf(bj + at, "[\"a zz\"");
    memcpy(bj + bw, m + 6, jw - at - 6);
    bw += jw - at - 6;
    write_file(bpath, bj, bw);
    td_status st = td_bpe_load_llama3(bpath, TD_BPE_LLAMA3, &b);
    check(st != TD_OK && expect_fail(st, "tokenizer.bad:4:14", "merge 0: \"zz\" is not a token"),
          "llama3 malformed tokenizer.json: a merge of an unknown token, named with its place");
    td_bpe_destroy(&b);
    free(bj);
  }
  unlink(bpath);
  unlink(path);
  unlink(jpath);
  free(model);
  free(json);
  (void)line;
}

/* ---- against a reference's ids ---------------------------------------------------- */

static int32_t *read_ids(const char *path, size_t *n) {
  size_t len = 0;
  unsigned char *t = read_file(path, &len);
  if (!t) return NULL;
  int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    size_t e = i;
    while (e < len && t[e] != '\n') e++;
    if (e > i) {
      char buf[32];
      size_t m = e - i < 31 ? e - i : 31;
      memcpy(buf, t + i, m);
      buf[m] = '\0';
      char *end;
      long v = strtol(buf, &end, 10);
      ids[k++] = end != buf && *end == '\0' ? (int32_t)v : -1; /* null, undefined: -1 */
    }
    i = e + 1;
  }
  free(t);
  *n = k;
  return ids;
}

static void print_ids(const char *what, const int32_t *ids, size_t from, size_t to, size_t n) {
  printf("     %s:", what);
  for (size_t i = from; i < to && i < n; i++) printf(" %d", ids[i]);
  printf("\n");
}

/* The first difference: which pre-token, where, both id sequences. */
static void explain(td_bpe *b, const unsigned char *text, size_t n, const int32_t *got, size_t ngot,
                    const int32_t *want, size_t nwant, size_t k) {
  unsigned char *s = NULL;
  size_t ns = 0, nrep = 0;
  if (td_bpe_sanitize_utf8(text, n, &s, &ns, &nrep) != TD_OK) return;
  size_t count = 0;
  for (size_t i = 0; i < ns;) {
    size_t e = td_bpe_pretoken_end(b, s, ns, i);
    int32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    td_bpe_encode(b, s + i, e - i, &ids, &nids, &cap);
    if (count + nids > k) {
      char sh[600];
      printf("     first difference at id %zu, in the pre-token at byte %zu of the text%s:\n"
             "     \"%s\"\n",
             k, i, nrep ? " (after the invalid-UTF-8 rule)" : "", esc(s + i, e - i, sh, sizeof sh));
      size_t ctx = i > 40 ? i - 40 : 0, ce = e + 40 < ns ? e + 40 : ns;
      printf("     context: \"%s\"\n", esc(s + ctx, ce - ctx, sh, sizeof sh));
      print_ids("trident  ", got, count, count + nids + 3, ngot);
      print_ids("reference", want, count, count + nids + 3, nwant);
      char *dec = NULL;
      size_t nd = 0;
      size_t to = count + nids + 3 < nwant ? count + nids + 3 : nwant;
      int ok = 1;
      for (size_t q = count; q < to; q++) ok = ok && want[q] >= 0 && want[q] < td_bpe_vocab_size(b);
      if (ok && to > count && td_bpe_decode(b, want + count, to - count, &dec, &nd) == TD_OK)
        printf("     reference ids decode to \"%s\"\n", esc((unsigned char *)dec, nd, sh, sizeof sh));
      td_error_clear();
      free(dec);
      free(ids);
      break;
    }
    count += nids;
    free(ids);
    i = e;
  }
  free(s);
}

/* GPT-2's two files, or LLaMA 3's one (merp NULL) */
static td_status load(td_bpe_dialect d, const char *encp, const char *merp, td_bpe **b) {
  if (td_bpe_dialect_is_llama3(d)) return td_bpe_load_llama3(encp, d, b);
  return td_bpe_load_dialect(encp, merp, d, b);
}

static int against_reference(td_bpe_dialect d, const char *hash, const char *encp, const char *merp,
                             const char *corpus, const char *expected) {
  td_bpe *b = NULL;
  g_quiet = 0; /* --quiet is for the offline checks */
  double t0 = now();
  if (load(d, encp, merp, &b) != TD_OK) {
    check(0, "load %s, %s", encp, merp);
    return 0;
  }
  double tload = now() - t0;
  check(1, "load %s%s%s (%s): vocab_size %lld, sha256 %s, %.0f ms", encp, merp ? " + " : "",
        merp ? merp : "", td_bpe_dialect_name(d),
        (long long)td_bpe_vocab_size(b), td_bpe_hash(b), 1e3 * tload);
  if (hash) check(strcmp(hash, td_bpe_hash(b)) == 0, "td_bpe_hash == %s", hash);
  size_t n = 0;
  unsigned char *text = read_file(corpus, &n);
  if (!text) {
    check(0, "read %s", corpus);
    td_bpe_destroy(&b);
    return 0;
  }
  int32_t *ids = NULL;
  size_t nids = 0, cap = 0;
  t0 = now();
  td_status st = td_bpe_encode(b, text, n, &ids, &nids, &cap);
  double tcold = now() - t0;
  check(st == TD_OK, "encode %s: %zu bytes -> %zu ids", corpus, n, nids);

  if (strcmp(expected, "-") != 0) {
    size_t nwant = 0;
    int32_t *want = read_ids(expected, &nwant);
    if (!want) {
      check(0, "read %s", expected);
    } else {
      size_t k = 0;
      while (k < nids && k < nwant && ids[k] == want[k]) k++;
      int same = k == nids && k == nwant;
      check(same, "%zu ids identical to the reference's (%s)%s", same ? nids : k, expected,
            same ? "" : ": they differ");
      if (!same) {
        if (k == nids || k == nwant)
          printf("     one sequence ends first: trident %zu ids, reference %zu\n", nids, nwant);
        explain(b, text, n, ids, nids, want, nwant, k);
      }
      free(want);
    }
  }

  /* round trip */
  unsigned char *clean = NULL;
  size_t nclean = 0, nrep = 0, nout = 0;
  char *out = NULL;
  if (td_bpe_sanitize_utf8(text, n, &clean, &nclean, &nrep) == TD_OK &&
      td_bpe_decode(b, ids, nids, &out, &nout) == TD_OK) {
    size_t k = 0;
    while (k < nout && k < nclean && (unsigned char)out[k] == clean[k]) k++;
    check(nout == nclean && k == nout,
          "decode(encode(x)) == x%s (%zu bytes%s)", nrep ? " with the invalid-UTF-8 rule" : "", nout,
          nrep ? ", invalid sequences replaced by U+FFFD" : "");
    if (nrep) printf("     %zu ill-formed UTF-8 subparts in %s became U+FFFD\n", nrep, corpus);
  } else {
    check(0, "decode");
  }
  free(clean);
  free(out);

  /* speed: the first encode had an empty cache; repeat for a warm figure */
  int reps = 0;
  t0 = now();
  double twarm;
  do {
    size_t nn = 0;
    td_bpe_encode(b, text, n, &ids, &nn, &cap);
    reps++;
    twarm = now() - t0;
  } while (twarm < 0.5 && reps < 1000);
  printf("speed: %.1f MB/s cold (%.3f s), %.1f MB/s warm (%d repeats), %.2f bytes/token\n",
         (double)n / 1e6 / tcold, tcold, (double)n * reps / 1e6 / twarm, reps,
         nids ? (double)n / (double)nids : 0.0);
  free(ids);
  free(text);
  td_bpe_destroy(&b);
  return 1;
}

/* ---- the Unicode tables against a reference's ------------------------------------- */

/* trident's class of code point c (L, N, S or 0 for other), from pre-token
 * boundaries: "aca" is one piece when c is a letter, "1c1" when a digit,
 * "\tc\t" (white space at the end of the text) when white space */
static char trident_class(const td_bpe *b, uint32_t c) {
  unsigned char s[8], u[4];
  size_t k;
  if (c < 0x80) {
    u[0] = (unsigned char)c, k = 1;
  } else if (c < 0x800) {
    u[0] = (unsigned char)(0xC0 | c >> 6), u[1] = (unsigned char)(0x80 | (c & 0x3F)), k = 2;
  } else if (c < 0x10000) {
    u[0] = (unsigned char)(0xE0 | c >> 12), u[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    u[2] = (unsigned char)(0x80 | (c & 0x3F)), k = 3;
  } else {
    u[0] = (unsigned char)(0xF0 | c >> 18), u[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    u[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F)), u[3] = (unsigned char)(0x80 | (c & 0x3F)), k = 4;
  }
  /* LLaMA 3 ends a white space run at its last line break: probe with "\n" */
  const char probe[3] = {'a', '1', td_bpe_dialect_is_llama3(td_bpe_get_dialect(b)) ? '\n' : '\t'};
  static const char cls[3] = {'L', 'N', 'S'};
  for (int t = 0; t < 3; t++) {
    s[0] = (unsigned char)probe[t];
    memcpy(s + 1, u, k);
    s[k + 1] = (unsigned char)probe[t];
    if (td_bpe_pretoken_end(b, s, k + 2, 0) == k + 2) return cls[t];
  }
  return 0;
}

/* Compare with FILE's "first last class" ranges (oracle.js / gpt2_encoder.py
 * --classes). A difference is a failure, except at code points that
 * libutf8proc's Unicode does not assign yet (a newer reference's letters and
 * digits): those are counted and shown. */
static void classes_check(td_bpe_dialect d, const char *encp, const char *merp, const char *file) {
  td_bpe *b = NULL;
  g_quiet = 0;
  if (load(d, encp, merp, &b) != TD_OK) {
    check(0, "load %s", encp);
    return;
  }
  char *ref = calloc(0x110000, 1);
  FILE *f = fopen(file, "r");
  unsigned lo, hi;
  char c;
  while (f && fscanf(f, "%x %x %c", &lo, &hi, &c) == 3)
    for (unsigned x = lo; x <= hi && x < 0x110000; x++) ref[x] = c;
  check(f != NULL, "read the reference's classes from %s", file);
  if (f) fclose(f);
  size_t nbad = 0, nnew = 0, shown = 0;
  uint32_t first_new = 0;
  for (uint32_t x = 0; x < 0x110000; x++) {
    if (x >= 0xD800 && x <= 0xDFFF) continue;
    char t = trident_class(b, x);
    if (t == ref[x]) continue;
    if (utf8proc_category((utf8proc_int32_t)x) == UTF8PROC_CATEGORY_CN) {
      if (!nnew++) first_new = x;
      continue;
    }
    nbad++;
    if (shown++ < 12)
      printf("     U+%04X: trident %c, reference %c\n", x, t ? t : 'O', ref[x] ? ref[x] : 'O');
  }
  check(nbad == 0, "%s: \\s, \\p{L}, \\p{N} identical to the reference's for every code point "
        "that Unicode %s assigns", td_bpe_dialect_name(d), utf8proc_unicode_version());
  if (nnew)
    printf("note %zu code points unassigned in Unicode %s (libutf8proc %s) are letters or digits "
           "to the reference (first U+%04X): text using them tokenizes differently\n",
           nnew, utf8proc_unicode_version(), utf8proc_version(), first_new);
  free(ref);
  td_bpe_destroy(&b);
}

int main(int argc, char **argv) {
  td_bpe_dialect d = TD_BPE_GPT2;
  const char *hash = NULL, *classes = NULL, *pos[4];
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--dialect") == 0 && i + 1 < argc) {
      if (td_bpe_dialect_parse(argv[++i], &d) != TD_OK) {
        fprintf(stderr, "test_bpe: %s\n", td_error_message());
        return 2;
      }
    } else if (strcmp(argv[i], "--hash") == 0 && i + 1 < argc) {
      hash = argv[++i];
    } else if (strcmp(argv[i], "--classes") == 0 && i + 1 < argc) {
      classes = argv[++i];
    } else if (strcmp(argv[i], "--quiet") == 0) {
      g_quiet = 1;
    } else if (argv[i][0] == '-' && argv[i][1] == '-') {
      fprintf(stderr, "test_bpe: unknown option %s\n", argv[i]);
      return 2;
    } else if (npos < 4) {
      pos[npos++] = argv[i];
    } else {
      npos = 5;
    }
  }
  int llama3 = td_bpe_dialect_is_llama3(d), want = llama3 ? 3 : 4;
  if (npos != 0 && npos != want) {
    fprintf(stderr, "usage: test_bpe [--dialect gpt2|gpt3-encoder] [--hash HEX] [--classes FILE] [--quiet]\n"
                    "                [ENCODER_JSON VOCAB_BPE CORPUS EXPECTED_IDS|-]\n"
                    "       test_bpe --dialect llama3|llama3-js [--hash HEX] [--classes FILE] [--quiet]\n"
                    "                [TOKENIZER_FILE CORPUS EXPECTED_IDS|-]\n");
    return 2;
  }
  if (llama3 && npos == 3) pos[3] = pos[2], pos[2] = pos[1], pos[1] = NULL, npos = 4;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/test_bpe.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("test_bpe: mkdtemp");
    return 2;
  }
  offline_bpe();
  offline_malformed();
  offline_llama3();
  char f[4300];
  path_in(f, sizeof f, "small_encoder.json");
  unlink(f);
  path_in(f, sizeof f, "small_vocab.bpe");
  unlink(f);
  rmdir(g_dir);
  if (npos == 4) against_reference(d, hash, pos[0], pos[1], pos[2], pos[3]);
  if (npos == 4 && classes) classes_check(d, pos[0], pos[1], classes);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
