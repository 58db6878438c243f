/* json.c — a strict JSON reader into one array of values (td_json.h). */
#include "io/td_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  td_json_kind kind;
  int first, last, next; /* children (arrays, objects); the next sibling */
  int64_t count;
  size_t key_off, key_len; /* object members: the key, in the string arena */
  size_t str_off, str_len; /* strings */
  double num;
  int is_int;
  int64_t ival;
  int64_t line, col;
} td_json_node;

struct td_json {
  td_json_node *v;
  int n, cap;
  char *arena; /* every key and string, NUL-terminated */
  size_t used, acap;
};

typedef struct {
  const char *name;
  const unsigned char *s;
  size_t n, i;
  int64_t line, line_start; /* line of s[i] and where it starts */
  td_json *j;
} td_parser;

static td_status fail(const td_parser *p, size_t at, int line, const char *func,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static td_status fail(const td_parser *p, size_t at, int line, const char *func,
                      const char *fmt, ...) {
  char msg[400], found[48];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* the line and column of `at`: at is on the current line or an earlier one
   * only for string contents (which hold no raw newline) */
  int64_t col = (int64_t)at - p->line_start + 1;
  if (at >= p->n) {
    snprintf(found, sizeof found, "the end of the text");
  } else if (p->s[at] >= 0x20 && p->s[at] < 0x7F) {
    snprintf(found, sizeof found, "'%c'", p->s[at]);
  } else {
    snprintf(found, sizeof found, "byte 0x%02X", p->s[at]);
  }
  return td_error_set(TD_ERR_DATA, __FILE__, line, func, "%s:%lld:%lld: %s, found %s", p->name,
                      (long long)p->line, (long long)(col < 1 ? 1 : col), msg, found);
}
#define FAIL(p, at, ...) return fail((p), (at), __LINE__, __func__, __VA_ARGS__)

static td_status node_new(td_parser *p, td_json_kind k, int *out) {
  td_json *j = p->j;
  if (j->n == j->cap) {
    int cap = j->cap ? 2 * j->cap : 64;
    if (cap < 0) FAIL(p, p->i, "more values than a JSON document here may hold");
    td_json_node *v = realloc(j->v, (size_t)cap * sizeof *v);
    if (!v) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory for JSON values", p->name);
    j->v = v;
    j->cap = cap;
  }
  td_json_node *x = &j->v[j->n];
  memset(x, 0, sizeof *x);
  x->kind = k;
  x->first = x->last = x->next = -1;
  x->line = p->line;
  x->col = (int64_t)p->i - p->line_start + 1;
  *out = j->n++;
  return TD_OK;
}

static td_status arena_put(td_parser *p, const void *b, size_t k) {
  td_json *j = p->j;
  if (j->acap - j->used < k + 1) {
    size_t cap = j->acap ? j->acap : 4096;
    while (cap - j->used < k + 1) cap *= 2;
    char *a = realloc(j->arena, cap);
    if (!a) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory for JSON strings", p->name);
    j->arena = a;
    j->acap = cap;
  }
  memcpy(j->arena + j->used, b, k);
  j->used += k;
  return TD_OK;
}

static void ws(td_parser *p) {
  while (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c == '\n') {
      p->line++;
      p->line_start = (int64_t)++p->i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      p->i++;
    } else {
      break;
    }
  }
}

/* Length of the well-formed UTF-8 sequence at s (n > 0 bytes left), 0 if ill-formed. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t k;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) k = 2;
  else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (n < k || s[1] < lo || s[1] > hi) return 0;
  for (size_t t = 2; t < k; t++)
    if (s[t] < 0x80 || s[t] > 0xBF) return 0;
  return k;
}

static int hex4(const unsigned char *s, uint32_t *v) {
  uint32_t x = 0;
  for (int k = 0; k < 4; k++) {
    unsigned char c = s[k];
    x <<= 4;
    if (c >= '0' && c <= '9') x |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
    else return 0;
  }
  *v = x;
  return 1;
}

/* A string at p->i (the opening quote) appended to the arena; its offset and length. */
static td_status string(td_parser *p, size_t *off, size_t *len) {
  td_json *j = p->j;
  size_t start = j->used;
  p->i++;
  for (;;) {
    size_t a = p->i;
    while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && p->s[p->i] >= 0x20 &&
           p->s[p->i] < 0x80)
      p->i++;
    if (p->i > a) TD_CHECK(arena_put(p, p->s + a, p->i - a));
    if (p->i >= p->n) FAIL(p, p->i, "a string runs to the end of the text (no closing '\"')");
    unsigned char c = p->s[p->i];
    if (c == '"') {
      p->i++;
      break;
    }
    if (c < 0x20) FAIL(p, p->i, "a raw control character in a string (write it as \\u%04X)", c);
    if (c >= 0x80) {
      size_t k = utf8_len(p->s + p->i, p->n - p->i);
      if (k == 0) FAIL(p, p->i, "invalid UTF-8 in a string");
      TD_CHECK(arena_put(p, p->s + p->i, k));
      p->i += k;
      continue;
    }
    /* an escape */
    if (p->i + 1 >= p->n) FAIL(p, p->i, "a string ends inside an escape");
    unsigned char e = p->s[p->i + 1], out[4];
    size_t k = 1;
    switch (e) {
      case '"': out[0] = '"'; break;
      case '\\': out[0] = '\\'; break;
      case '/': out[0] = '/'; break;
      case 'b': out[0] = '\b'; break;
      case 'f': out[0] = '\f'; break;
      case 'n': out[0] = '\n'; break;
      case 'r': out[0] = '\r'; break;
      case 't': out[0] = '\t'; break;
      case 'u': {
        uint32_t u, lo;
        if (p->i + 6 > p->n || !hex4(p->s + p->i + 2, &u))
          FAIL(p, p->i, "\\u must be followed by four hexadecimal digits");
        if (u >= 0xDC00 && u <= 0xDFFF) FAIL(p, p->i, "a lone low surrogate \\u%04X", u);
        if (u >= 0xD800 && u <= 0xDBFF) {
          if (p->i + 12 > p->n || p->s[p->i + 6] != '\\' || p->s[p->i + 7] != 'u' ||
              !hex4(p->s + p->i + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            FAIL(p, p->i, "a high surrogate \\u%04X not followed by a low one", u);
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          p->i += 6;
        }
        if (u < 0x80) {
          out[0] = (unsigned char)u;
        } else if (u < 0x800) {
          out[0] = (unsigned char)(0xC0 | u >> 6), out[1] = (unsigned char)(0x80 | (u & 63));
          k = 2;
        } else if (u < 0x10000) {
          out[0] = (unsigned char)(0xE0 | u >> 12), out[1] = (unsigned char)(0x80 | (u >> 6 & 63));
          out[2] = (unsigned char)(0x80 | (u & 63));
          k = 3;
        } else {
          out[0] = (unsigned char)(0xF0 | u >> 18), out[1] = (unsigned char)(0x80 | (u >> 12 & 63));
          out[2] = (unsigned char)(0x80 | (u >> 6 & 63)), out[3] = (unsigned char)(0x80 | (u & 63));
          k = 4;
        }
        p->i += 4;
        break;
      }
      default:
        FAIL(p, p->i, "an unknown escape \\%c", e >= 0x20 && e < 0x7F ? e : '?');
    }
    p->i += 2;
    TD_CHECK(arena_put(p, out, k));
  }
  char nul = 0;
  TD_CHECK(arena_put(p, &nul, 1));
  *off = start;
  *len = j->used - start - 1;
  return TD_OK;
}

static td_status number(td_parser *p, int v) {
  size_t a = p->i, i = p->i;
  const unsigned char *s = p->s;
  int is_int = 1;
  if (i < p->n && s[i] == '-') i++;
  if (i >= p->n || s[i] < '0' || s[i] > '9') FAIL(p, a, "expected a value");
  if (s[i] == '0') i++;
  else while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  if (i < p->n && s[i] == '.') {
    is_int = 0;
    if (++i >= p->n || s[i] < '0' || s[i] > '9') FAIL(p, i, "a digit must follow '.'");
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  }
  if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
    is_int = 0;
    if (++i < p->n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= p->n || s[i] < '0' || s[i] > '9') FAIL(p, i, "a digit must follow the exponent");
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  }
  char buf[64];
  size_t k = i - a;
  if (k >= sizeof buf) is_int = 0;
  char *big = k >= sizeof buf ? malloc(k + 1) : buf;
  if (!big) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory", p->name);
  memcpy(big, s + a, k);
  big[k] = '\0';
  td_json_node *x = &p->j->v[v];
  x->num = strtod(big, NULL);
  if (is_int) {
    /* exact integers: digits, checked against int64 */
    int neg = big[0] == '-';
    uint64_t u = 0;
    for (const char *c = big + neg; *c; c++) {
      if (u > (UINT64_MAX - 9) / 10) { is_int = 0; break; }
      u = u * 10 + (uint64_t)(*c - '0');
    }
    if (is_int && (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX)) is_int = 0;
    if (is_int) x->ival = neg ? (int64_t)(0 - u) : (int64_t)u;
  }
  x->is_int = is_int;
  if (big != buf) free(big);
  if (!isfinite(x->num)) FAIL(p, a, "a number too large for a double");
  p->i = i;
  return TD_OK;
}

static uint64_t hash_key(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t k = 0; k < n; k++) h = (h ^ (unsigned char)s[k]) * 1099511628211ull;
  return h;
}

/* Refuse a key given twice in object `o` (a hash set for large objects). */
static td_status no_duplicates(td_parser *p, int o) {
  td_json *j = p->j;
  int64_t n = j->v[o].count;
  if (n < 2) return TD_OK;
  size_t cap = 16;
  while (cap < 2 * (size_t)n) cap *= 2;
  int *slot = malloc(cap * sizeof *slot);
  if (!slot) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory", p->name);
  memset(slot, 0xFF, cap * sizeof *slot);
  td_status st = TD_OK;
  for (int c = j->v[o].first; c >= 0; c = j->v[c].next) {
    const char *k = j->arena + j->v[c].key_off;
    size_t kn = j->v[c].key_len;
    size_t h = (size_t)hash_key(k, kn) & (cap - 1);
    for (; slot[h] >= 0; h = (h + 1) & (cap - 1)) {
      const td_json_node *d = &j->v[slot[h]];
      if (d->key_len == kn && memcmp(j->arena + d->key_off, k, kn) == 0) {
        st = td_error_set(TD_ERR_DATA, __FILE__, __LINE__, __func__,
                          "%s:%lld:%lld: the key \"%.*s\" is given twice in one object (first at "
                          "line %lld)", p->name, (long long)j->v[c].line,
                          (long long)j->v[c].col, (int)(kn > 60 ? 60 : kn), k,
                          (long long)d->line);
        goto done;
      }
    }
    slot[h] = c;
  }
done:
  free(slot);
  return st;
}

static void add_child(td_json *j, int parent, int c) {
  td_json_node *x = &j->v[parent];
  if (x->last >= 0) j->v[x->last].next = c;
  else x->first = c;
  x->last = c;
  x->count++;
}

static td_status value(td_parser *p, int depth, int *out);

static td_status container(td_parser *p, int depth, int v, int object) {
  unsigned char close = object ? '}' : ']';
  p->i++;
  ws(p);
  if (p->i < p->n && p->s[p->i] == close) {
    p->i++;
    return TD_OK;
  }
  for (;;) {
    ws(p);
    size_t koff = 0, klen = 0;
    int64_t kline = p->line, kcol = (int64_t)p->i - p->line_start + 1;
    if (object) {
      if (p->i >= p->n || p->s[p->i] != '"') FAIL(p, p->i, "expected a string key");
      TD_CHECK(string(p, &koff, &klen));
      ws(p);
      if (p->i >= p->n || p->s[p->i] != ':') FAIL(p, p->i, "expected ':' after a key");
      p->i++;
      ws(p);
    }
    int c;
    TD_CHECK(value(p, depth + 1, &c));
    if (object) {
      td_json_node *x = &p->j->v[c];
      x->key_off = koff, x->key_len = klen, x->line = kline, x->col = kcol;
    }
    add_child(p->j, v, c);
    ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == close) {
      p->i++;
      break;
    }
    FAIL(p, p->i, object ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
  }
  return object ? no_duplicates(p, v) : TD_OK;
}

static td_status value(td_parser *p, int depth, int *out) {
  ws(p);
  if (depth > TD_JSON_MAX_DEPTH)
    FAIL(p, p->i, "values nested deeper than %d levels", TD_JSON_MAX_DEPTH);
  if (p->i >= p->n) FAIL(p, p->i, "expected a value");
  unsigned char c = p->s[p->i];
  int v;
  static const struct { const char *w; td_json_kind k; } words[] = {
      {"null", TD_JSON_NULL}, {"false", TD_JSON_FALSE}, {"true", TD_JSON_TRUE}};
  for (size_t k = 0; k < 3; k++) {
    size_t wl = strlen(words[k].w);
    if (c == (unsigned char)words[k].w[0]) {
      if (p->n - p->i < wl || memcmp(p->s + p->i, words[k].w, wl) != 0)
        FAIL(p, p->i, "expected a value");
      TD_CHECK(node_new(p, words[k].k, &v));
      p->i += wl;
      *out = v;
      return TD_OK;
    }
  }
  if (c == '"') {
    TD_CHECK(node_new(p, TD_JSON_STRING, &v));
    size_t off, len;
    TD_CHECK(string(p, &off, &len));
    p->j->v[v].str_off = off, p->j->v[v].str_len = len;
  } else if (c == '[' || c == '{') {
    TD_CHECK(node_new(p, c == '[' ? TD_JSON_ARRAY : TD_JSON_OBJECT, &v));
    TD_CHECK(container(p, depth, v, c == '{'));
  } else {
    TD_CHECK(node_new(p, TD_JSON_NUMBER, &v));
    TD_CHECK(number(p, v));
  }
  *out = v;
  return TD_OK;
}

td_status td_json_parse(const char *name, int64_t line0, const unsigned char *s, size_t n,
                        td_json **out) {
  TD_REQUIRE(name && out && (s || n == 0), TD_ERR_USAGE, "td_json_parse: NULL argument");
  *out = NULL;
  td_json *j = calloc(1, sizeof *j);
  if (!j) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory", name);
  td_parser p = {name, s, n, 0, line0, 0, j};
  td_status st = TD_OK;
  int root;
  if (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
    TD_CHECK_GOTO(fail(&p, 0, __LINE__, __func__, "a byte order mark (JSON text has none)"));
  TD_CHECK_GOTO(value(&p, 0, &root));
  ws(&p);
  if (p.i < n) TD_CHECK_GOTO(fail(&p, p.i, __LINE__, __func__, "text after the JSON value"));
  *out = j;
  j = NULL;
done:
  td_json_destroy(&j);
  return st;
}

void td_json_destroy(td_json **jp) {
  if (!jp || !*jp) return;
  free((*jp)->v);
  free((*jp)->arena);
  free(*jp);
  *jp = NULL;
}

static int ok(const td_json *j, int v) { return j && v >= 0 && v < j->n; }

int td_json_root(const td_json *j) { return j && j->n > 0 ? 0 : -1; }

td_json_kind td_json_kind_of(const td_json *j, int v) {
  return ok(j, v) ? j->v[v].kind : TD_JSON_NULL;
}

const char *td_json_kind_name(td_json_kind k) {
  static const char *names[] = {"null",     "false",    "true",     "a number",
                                "a string", "an array", "an object"};
  return (unsigned)k < 7 ? names[k] : "?";
}

int td_json_first(const td_json *j, int v) { return ok(j, v) ? j->v[v].first : -1; }

int td_json_next(const td_json *j, int v) { return ok(j, v) ? j->v[v].next : -1; }

int64_t td_json_count(const td_json *j, int v) { return ok(j, v) ? j->v[v].count : 0; }

int td_json_get(const td_json *j, int v, const char *key) {
  if (!ok(j, v) || j->v[v].kind != TD_JSON_OBJECT) return -1;
  size_t kn = strlen(key);
  for (int c = j->v[v].first; c >= 0; c = j->v[c].next)
    if (j->v[c].key_len == kn && memcmp(j->arena + j->v[c].key_off, key, kn) == 0) return c;
  return -1;
}

const char *td_json_key(const td_json *j, int v, size_t *n) {
  if (!ok(j, v)) return NULL;
  if (n) *n = j->v[v].key_len;
  return j->arena ? j->arena + j->v[v].key_off : "";
}

const char *td_json_str(const td_json *j, int v, size_t *n) {
  if (!ok(j, v) || j->v[v].kind != TD_JSON_STRING) return NULL;
  if (n) *n = j->v[v].str_len;
  return j->arena + j->v[v].str_off;
}

double td_json_num(const td_json *j, int v) {
  return ok(j, v) && j->v[v].kind == TD_JSON_NUMBER ? j->v[v].num : 0.0;
}

int td_json_int(const td_json *j, int v, int64_t *out) {
  if (!ok(j, v) || j->v[v].kind != TD_JSON_NUMBER || !j->v[v].is_int) return 0;
  *out = j->v[v].ival;
  return 1;
}

void td_json_where(const td_json *j, int v, int64_t *line, int64_t *col) {
  *line = ok(j, v) ? j->v[v].line : 0;
  *col = ok(j, v) ? j->v[v].col : 0;
}
