/* config.c — job deck → td_config, driven by TD_DECK_SCHEMA alone. */
#include "app/deck/td_config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/td_yaml.h"

typedef enum { T_INT, T_FLOAT, T_STR, T_BOOL, T_INTS, T_FLOATS } vtype;

typedef struct {
  const char *sec, *key, *full, *def, *choices, *doc;
  vtype type;
  double lo, hi;
  unsigned flags;
  size_t off, count_off;
} entry;

#define TD_OFFC_INT(sec, key) 0
#define TD_OFFC_FLOAT(sec, key) 0
#define TD_OFFC_STR(sec, key) 0
#define TD_OFFC_BOOL(sec, key) 0
#define TD_OFFC_INTS(sec, key) offsetof(td_config, sec##_##key##_count)
#define TD_OFFC_FLOATS(sec, key) offsetof(td_config, sec##_##key##_count)

static entry k_schema[] = {
#define TD_X_ENTRY(sec, key, type, def, lo, hi, ch, fl, doc)                                \
  {#sec, #key, #sec "." #key, def, ch, doc, T_##type, (double)(lo), (double)(hi), fl, \
   offsetof(td_config, sec##_##key), TD_OFFC_##type(sec, key)},
    TD_DECK_SCHEMA(TD_X_ENTRY)
#undef TD_X_ENTRY
};
#define NSCHEMA ((int)(sizeof k_schema / sizeof k_schema[0]))

/* Mappings inside a section (model.moe): their keys are schema rows named
 * "<map>_<key>" (model_moe_experts), read and written as "<map>: {<key>:
 * ...}" and named "section.map.key" in messages. */
static const char *const k_submaps[] = {"moe"};
#define NSUBMAPS ((int)(sizeof k_submaps / sizeof k_submaps[0]))

/* The submap a row belongs to (its index), or -1. */
static int submap_of(const char *key) {
  for (int i = 0; i < NSUBMAPS; ++i) {
    size_t l = strlen(k_submaps[i]);
    if (strncmp(key, k_submaps[i], l) == 0 && key[l] == '_') return i;
  }
  return -1;
}

/* The rows' names as users write them: "model.moe.experts" for the row
 * model_moe_experts. Once, before the table is read. */
static void schema_names(void) {
  static int done;
  static char names[sizeof k_schema / sizeof k_schema[0]][96];
  if (done) return;
  done = 1;
  for (size_t i = 0; i < sizeof k_schema / sizeof k_schema[0]; ++i) {
    int sm = submap_of(k_schema[i].key);
    if (sm < 0) continue;
    snprintf(names[i], sizeof names[i], "%s.%s.%s", k_schema[i].sec, k_submaps[sm],
             k_schema[i].key + strlen(k_submaps[sm]) + 1);
    k_schema[i].full = names[i];
  }
}

static const char *const k_sections[] = {
#define TD_X_SEC(s) #s,
    TD_DECK_SECTIONS(TD_X_SEC)
#undef TD_X_SEC
};
#define NSECTIONS ((int)(sizeof k_sections / sizeof k_sections[0]))

static const char *type_name(vtype t) {
  switch (t) {
    case T_INT: return "integer";
    case T_FLOAT: return "number";
    case T_STR: return "string";
    case T_BOOL: return "boolean";
    case T_INTS: return "list of integers";
    default: return "list of numbers";
  }
}

/* "an integer", "a number", ... */
static const char *type_with_article(vtype t) {
  switch (t) {
    case T_INT: return "an integer";
    case T_FLOAT: return "a number";
    case T_STR: return "a string";
    case T_BOOL: return "true or false";
    case T_INTS: return "a list of integers";
    default: return "a list of numbers";
  }
}

/* How a scalar reads in a message: 'x', the quoted string "x", nothing, null. */
static void describe_scalar(const td_yaml_node *n, char *buf, size_t cap) {
  if (n->kind != TD_YAML_SCALAR)
    snprintf(buf, cap, "%s", td_yaml_kind_name(n->kind));
  else if (n->plain && n->value[0] == '\0')
    snprintf(buf, cap, "nothing");
  else if (n->plain && (!strcmp(n->value, "~") || !strcasecmp(n->value, "null")))
    snprintf(buf, cap, "null");
  else if (!n->plain)
    snprintf(buf, cap, "the quoted string \"%s\"", n->value);
  else
    snprintf(buf, cap, "'%s'", n->value);
}

/* Shortest "%g" text of v that reads back exactly. */
static void fmt_double(double v, char *buf, size_t cap) {
  for (int prec = 6; prec <= 17; ++prec) {
    snprintf(buf, cap, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
}

/* A range bound: integers as integers, others exactly. */
static void fmt_bound(const entry *e, double v, char *buf, size_t cap) {
  if ((e->type == T_INT || e->type == T_INTS) && fabs(v) < 9.0e15)
    snprintf(buf, cap, "%lld", (long long)v);
  else
    fmt_double(v, buf, cap);
}

/* Levenshtein distance, for "did you mean". */
static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 63 || lb > 63) return 99;
  int d[64][64];
  for (int i = 0; i <= la; ++i) d[i][0] = i;
  for (int j = 0; j <= lb; ++j) d[0][j] = j;
  for (int i = 1; i <= la; ++i)
    for (int j = 1; j <= lb; ++j) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

/* Largest edit distance still worth suggesting for a name of this length. */
static int max_typo(const char *name) {
  int n = (int)strlen(name);
  return n <= 3 ? 1 : n <= 6 ? 2 : 3;
}

/* The known key closest to `key` (bare name): an exact name in another
 * section first, then a near miss in `sec`, then a near miss anywhere.
 * Returns the full "section.key", or NULL. */
static const char *suggest_key(const char *sec, const char *key) {
  for (int i = 0; i < NSCHEMA; ++i)
    if (strcmp(k_schema[i].key, key) == 0 && (!sec || strcmp(k_schema[i].sec, sec) != 0))
      return k_schema[i].full;
  const char *best = NULL;
  int bestd = max_typo(key) + 1;
  for (int pass = 0; pass < 2 && !best; ++pass)
    for (int i = 0; i < NSCHEMA; ++i) {
      if (pass == 0 && (!sec || strcmp(k_schema[i].sec, sec) != 0)) continue;
      int d = edit_distance(k_schema[i].key, key);
      if (d < bestd) bestd = d, best = k_schema[i].full;
    }
  return best;
}

static const char *suggest_section(const char *name) {
  const char *best = NULL;
  int bestd = max_typo(name) + 1;
  for (int i = 0; i < NSECTIONS; ++i) {
    int d = edit_distance(k_sections[i], name);
    if (d < bestd) bestd = d, best = k_sections[i];
  }
  return best;
}

static const entry *find_entry(const char *sec, const char *key) {
  for (int i = 0; i < NSCHEMA; ++i)
    if (strcmp(k_schema[i].sec, sec) == 0 && strcmp(k_schema[i].key, key) == 0)
      return &k_schema[i];
  return NULL;
}

static int is_section(const char *name) {
  for (int i = 0; i < NSECTIONS; ++i)
    if (strcmp(k_sections[i], name) == 0) return 1;
  return 0;
}

/* Where a value came from, for messages: "deck.yaml:3:7" or "--set a.b=c". */
typedef struct {
  char where[TD_STR_MAX + 64];
} place;

static void place_node(place *p, const char *path, const td_yaml_node *n) {
  snprintf(p->where, sizeof p->where, "%s:%d:%d", path, n->line, n->col);
}

static td_status parse_int(const entry *e, const place *p, const td_yaml_node *n,
                           int64_t *out) {
  char what[TD_STR_MAX + 32];
  describe_scalar(n, what, sizeof what);
  if (n->kind != TD_YAML_SCALAR || !n->plain)
    TD_FAIL(TD_ERR_DECK, "%s: %s: expected an integer, found %s", p->where, e->full, what);
  const char *v0 = n->value + (n->value[0] == '-' || n->value[0] == '+');
  if (v0[0] == '0' && v0[1] >= '0' && v0[1] <= '9')
    TD_FAIL(TD_ERR_DECK, "%s: %s: '%s' has a leading zero (YAML 1.1 reads it as octal); write "
            "the number without it", p->where, e->full, n->value);
  errno = 0;
  char *end = NULL;
  long long v = strtoll(n->value, &end, 10);
  if (errno == ERANGE)
    TD_FAIL(TD_ERR_DECK, "%s: %s: %s does not fit in 64 bits", p->where, e->full, n->value);
  if (end == n->value || *end != '\0') {
    /* Accept 1e3-style integers that are exact. */
    char *fend = NULL;
    double d = strtod(n->value, &fend);
    if (n->plain && fend != n->value && *fend == '\0' && d == floor(d) && fabs(d) < 9e15) {
      *out = (int64_t)d;
      return TD_OK;
    }
    TD_FAIL(TD_ERR_DECK, "%s: %s: expected an integer, found %s", p->where, e->full, what);
  }
  *out = v;
  return TD_OK;
}

static td_status parse_float(const entry *e, const place *p, const td_yaml_node *n,
                             double *out) {
  char what[TD_STR_MAX + 32];
  describe_scalar(n, what, sizeof what);
  if (n->kind != TD_YAML_SCALAR || !n->plain)
    TD_FAIL(TD_ERR_DECK, "%s: %s: expected a number, found %s", p->where, e->full, what);
  char *end = NULL;
  double v = strtod(n->value, &end);
  if (end == n->value || *end != '\0' || isnan(v) || isinf(v))
    TD_FAIL(TD_ERR_DECK, "%s: %s: expected a number, found %s", p->where, e->full, what);
  *out = v;
  return TD_OK;
}

static td_status check_range(const entry *e, const place *p, double v, const char *text) {
  int unbounded = e->hi >= TD_BIG; /* 64-bit overflow is caught by the parser */
  if (v < e->lo || (!unbounded && v > e->hi)) {
    char lo[40], hi[40];
    fmt_bound(e, e->lo, lo, sizeof lo);
    fmt_bound(e, e->hi, hi, sizeof hi);
    if (unbounded)
      TD_FAIL(TD_ERR_DECK, "%s: %s: %s is out of range (must be >= %s)", p->where, e->full,
              text, lo);
    TD_FAIL(TD_ERR_DECK, "%s: %s: %s is out of range [%s, %s]", p->where, e->full, text, lo, hi);
  }
  return TD_OK;
}

/* Store the value of node n into cfg for entry e. */
static td_status set_value(td_config *cfg, const entry *e, const place *p,
                           const td_yaml_node *n) {
  char *base = (char *)cfg + e->off;
  switch (e->type) {
    case T_INT: {
      int64_t v;
      TD_CHECK(parse_int(e, p, n, &v));
      TD_CHECK(check_range(e, p, (double)v, n->value));
      *(int64_t *)base = v;
      return TD_OK;
    }
    case T_FLOAT: {
      double v;
      TD_CHECK(parse_float(e, p, n, &v));
      TD_CHECK(check_range(e, p, v, n->value));
      *(double *)base = v;
      return TD_OK;
    }
    case T_BOOL: {
      const char *s = n->kind == TD_YAML_SCALAR ? n->value : "";
      if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        *(int *)base = 1;
      else if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off"))
        *(int *)base = 0;
      else
        TD_FAIL(TD_ERR_DECK, "%s: %s: expected true or false, found %s%s%s", p->where,
                e->full, n->kind == TD_YAML_SCALAR ? "'" : "",
                n->kind == TD_YAML_SCALAR ? s : td_yaml_kind_name(n->kind),
                n->kind == TD_YAML_SCALAR ? "'" : "");
      return TD_OK;
    }
    case T_STR: {
      char what[TD_STR_MAX + 32];
      describe_scalar(n, what, sizeof what);
      if (n->kind != TD_YAML_SCALAR || (n->plain && (!strcmp(what, "null") || !strcmp(what, "nothing"))))
        TD_FAIL(TD_ERR_DECK, "%s: %s: expected a string, found %s", p->where, e->full, what);
      if (strlen(n->value) >= TD_STR_MAX)
        TD_FAIL(TD_ERR_DECK, "%s: %s: value longer than %d characters", p->where, e->full,
                TD_STR_MAX - 1);
      if (e->choices) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", e->choices);
        int ok = 0;
        for (char *save = NULL, *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
          if (strcmp(t, n->value) == 0) ok = 1;
        if (!ok)
          TD_FAIL(TD_ERR_DECK, "%s: %s: '%s' is not one of %s", p->where, e->full, n->value,
                  e->choices);
      }
      snprintf(base, TD_STR_MAX, "%s", n->value);
      return TD_OK;
    }
    case T_INTS:
    case T_FLOATS: {
      if (n->kind != TD_YAML_SEQ)
        TD_FAIL(TD_ERR_DECK, "%s: %s: expected %s like [1, 2], found %s", p->where, e->full,
                type_with_article(e->type), n->kind == TD_YAML_SCALAR ? "a scalar" : "a mapping");
      if (n->n > TD_LIST_MAX)
        TD_FAIL(TD_ERR_DECK, "%s: %s: at most %d elements, found %d", p->where, e->full,
                TD_LIST_MAX, n->n);
      if ((e->flags & TD_F_LEN2) && n->n != 2)
        TD_FAIL(TD_ERR_DECK, "%s: %s: expected exactly 2 elements, found %d", p->where,
                e->full, n->n);
      for (int i = 0; i < n->n; ++i) {
        place ip;
        place_node(&ip, p->where, n->items[i]);
        /* keep the list's own place but the element's line:column when in a file */
        if (strchr(p->where, ':') && strncmp(p->where, "--set", 5) != 0) {
          const char *path_end = p->where;
          char path[TD_STR_MAX];
          /* p->where is "path:line:col": cut at the second-to-last ':' */
          const char *c2 = strrchr(path_end, ':');
          const char *c1 = c2;
          while (c1 > path_end && *(--c1) != ':') {
          }
          snprintf(path, sizeof path, "%.*s", (int)(c1 - path_end), path_end);
          place_node(&ip, path, n->items[i]);
        } else {
          ip = *p;
        }
        if (e->type == T_INTS) {
          int64_t v;
          TD_CHECK(parse_int(e, &ip, n->items[i], &v));
          TD_CHECK(check_range(e, &ip, (double)v, n->items[i]->value));
          ((int64_t *)base)[i] = v;
        } else {
          double v;
          TD_CHECK(parse_float(e, &ip, n->items[i], &v));
          TD_CHECK(check_range(e, &ip, v, n->items[i]->value));
          ((double *)base)[i] = v;
        }
      }
      *(int *)((char *)cfg + e->count_off) = n->n;
      return TD_OK;
    }
  }
  TD_FAIL(TD_ERR_INTERNAL, "bad schema type");
}

/* An empty string for a string key (--set k= ), unless it has choices. */
static td_status set_empty_string(td_config *cfg, const entry *e, const char *where) {
  if (e->choices)
    TD_FAIL(TD_ERR_DECK, "%s: %s: '' is not one of %s", where, e->full, e->choices);
  ((char *)cfg + e->off)[0] = '\0';
  return TD_OK;
}

/* Parse `text` as a YAML value named `where` and store it. */
static td_status set_from_text(td_config *cfg, const entry *e, const char *where,
                               const char *text) {
  td_yaml_node *doc = NULL;
  td_status st = TD_OK;
  place p;
  snprintf(p.where, sizeof p.where, "%s", where);
  if (text[0] == '\0' && e->type == T_STR) return set_empty_string(cfg, e, where);
  TD_CHECK_GOTO(td_yaml_load(where, text, &doc));
  if (doc->kind == TD_YAML_MAP && doc->n == 0) {
    /* empty text: an empty string */
    if (e->type != T_STR)
      TD_FAIL_GOTO(TD_ERR_DECK, "%s: %s: expected %s, found nothing", where, e->full,
                   type_with_article(e->type));
    TD_CHECK_GOTO(set_empty_string(cfg, e, where));
    goto done;
  }
  TD_CHECK_GOTO(set_value(cfg, e, &p, doc));
done:
  td_yaml_free(&doc);
  return st;
}

/* Marks of where each key was set (line 0: default). */
typedef struct {
  int line[NSCHEMA > 0 ? NSCHEMA : 1], col[NSCHEMA > 0 ? NSCHEMA : 1];
  int set[NSCHEMA > 0 ? NSCHEMA : 1];
  char via[NSCHEMA > 0 ? NSCHEMA : 1][64]; /* "--set" when overridden */
} marks;

static int entry_index(const entry *e) { return (int)(e - k_schema); }

/* Whether section sec has rows of submap sm. */
static int find_submap_row(const char *sec, int sm) {
  for (int i = 0; i < NSCHEMA; ++i)
    if (strcmp(k_schema[i].sec, sec) == 0 && submap_of(k_schema[i].key) == sm) return 1;
  return 0;
}

static void mark_set(marks *mk, const entry *e, const td_yaml_node *vv) {
  int ix = entry_index(e);
  mk->line[ix] = vv->line;
  mk->col[ix] = vv->col;
  mk->set[ix] = 1;
}

/* The mapping "sec.<submap sm>: {key: value, ...}" (empty: the defaults). */
static td_status apply_submap(td_config *cfg, const char *path, const char *sec, int sm,
                              const td_yaml_node *map, marks *mk) {
  const char *name = k_submaps[sm];
  if (map->kind == TD_YAML_SCALAR && map->value[0] == '\0') return TD_OK;
  if (map->kind != TD_YAML_MAP)
    TD_FAIL(TD_ERR_DECK, "%s:%d:%d: %s.%s must be a mapping of keys (e.g. %s: {experts: 8}), "
            "found %s", path, map->line, map->col, sec, name, name,
            td_yaml_kind_name(map->kind));
  for (int j = 0; j < map->n; ++j) {
    const td_yaml_node *kk = map->keys[j], *vv = map->items[j];
    char row[96];
    snprintf(row, sizeof row, "%s_%s", name, kk->value);
    const entry *e = find_entry(sec, row);
    if (!e) {
      const char *best = NULL;
      int bestd = max_typo(kk->value) + 1;
      for (int i = 0; i < NSCHEMA; ++i) {
        if (strcmp(k_schema[i].sec, sec) != 0 || submap_of(k_schema[i].key) != sm) continue;
        int d = edit_distance(k_schema[i].key + strlen(name) + 1, kk->value);
        if (d < bestd) bestd = d, best = k_schema[i].full;
      }
      if (best)
        TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown key '%s.%s.%s' (did you mean '%s'?)", path,
                kk->line, kk->col, sec, name, kk->value, best);
      TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown key '%s.%s.%s' (see `trident check --schema`)",
              path, kk->line, kk->col, sec, name, kk->value);
    }
    place p;
    place_node(&p, path, vv);
    TD_CHECK(set_value(cfg, e, &p, vv));
    mark_set(mk, e, vv);
  }
  return TD_OK;
}

static td_status apply_deck(td_config *cfg, const char *path, const td_yaml_node *root,
                            marks *mk) {
  if (root->kind != TD_YAML_MAP)
    TD_FAIL(TD_ERR_DECK, "%s:%d:%d: a job deck is a mapping of sections (run:, model:, ...), found %s",
            path, root->line, root->col, td_yaml_kind_name(root->kind));
  for (int i = 0; i < root->n; ++i) {
    const td_yaml_node *sk = root->keys[i], *sv = root->items[i];
    if (!is_section(sk->value)) {
      for (int j = 0; j < NSCHEMA; ++j) /* a flat key like "dp: 1" at the top level */
        if (strcmp(k_schema[j].key, sk->value) == 0)
          TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown section '%s' (did you mean '%s'?)", path,
                  sk->line, sk->col, sk->value, k_schema[j].full);
      const char *s = suggest_section(sk->value);
      if (s)
        TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown section '%s' (did you mean '%s'?)", path,
                sk->line, sk->col, sk->value, s);
      TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown section '%s' (known: run, model, parallel, data, "
              "training, optimizer, schedule, checkpoint, logging, eval)",
              path, sk->line, sk->col, sk->value);
    }
    if (sv->kind == TD_YAML_SCALAR && sv->value[0] == '\0') continue; /* "eval:" empty */
    if (sv->kind != TD_YAML_MAP)
      TD_FAIL(TD_ERR_DECK, "%s:%d:%d: section '%s' must be a mapping of keys, found %s", path,
              sv->line, sv->col, sk->value, td_yaml_kind_name(sv->kind));
    for (int j = 0; j < sv->n; ++j) {
      const td_yaml_node *kk = sv->keys[j], *vv = sv->items[j];
      int sm = -1;
      for (int i2 = 0; i2 < NSUBMAPS; ++i2)
        if (strcmp(kk->value, k_submaps[i2]) == 0) sm = i2;
      if (sm >= 0 && find_submap_row(sk->value, sm)) {
        TD_CHECK(apply_submap(cfg, path, sk->value, sm, vv, mk));
        continue;
      }
      const entry *e = find_entry(sk->value, kk->value);
      if (!e) {
        const char *s = suggest_key(sk->value, kk->value);
        if (s)
          TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown key '%s.%s' (did you mean '%s'?)", path,
                  kk->line, kk->col, sk->value, kk->value, s);
        TD_FAIL(TD_ERR_DECK, "%s:%d:%d: unknown key '%s.%s' (see `trident check --schema`)",
                path, kk->line, kk->col, sk->value, kk->value);
      }
      place p;
      place_node(&p, path, vv);
      TD_CHECK(set_value(cfg, e, &p, vv));
      int ix = entry_index(e);
      mk->line[ix] = vv->line;
      mk->col[ix] = vv->col;
      mk->set[ix] = 1;
    }
  }
  return TD_OK;
}

static td_status apply_set(td_config *cfg, const char *arg, marks *mk) {
  const char *eq = strchr(arg, '=');
  const char *dot = strchr(arg, '.');
  char where[TD_STR_MAX + 16];
  snprintf(where, sizeof where, "--set %s", arg);
  if (!eq || !dot || dot > eq)
    TD_FAIL(TD_ERR_USAGE, "%s: expected --set section.key=value (e.g. --set training.steps=10)",
            where);
  char sec[64], key[64];
  snprintf(sec, sizeof sec, "%.*s", (int)(dot - arg), arg);
  snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
  char written[64]; /* as the user wrote it, for messages */
  snprintf(written, sizeof written, "%s", key);
  char *dot2 = strchr(key, '.'); /* model.moe.experts: the row moe_experts */
  if (dot2) {
    *dot2 = '_';
    if (submap_of(key) < 0) *dot2 = '.';
  }
  const entry *e = find_entry(sec, key);
  if (!e) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", sec, written);
    const char *s = suggest_key(sec, key);
    if (s) TD_FAIL(TD_ERR_DECK, "%s: unknown key '%s' (did you mean '%s'?)", where, full, s);
    TD_FAIL(TD_ERR_DECK, "%s: unknown key '%s' (see `trident check --schema`)", where, full);
  }
  TD_CHECK(set_from_text(cfg, e, where, eq + 1));
  int ix = entry_index(e);
  mk->set[ix] = 1;
  mk->line[ix] = 0;
  snprintf(mk->via[ix], sizeof mk->via[ix], "--set %s", e->full);
  return TD_OK;
}

/* "deck.yaml:4:9" for entry e, or "deck.yaml" when defaulted. */
static void where_of(const td_config *cfg, const marks *mk, const entry *e, char *buf,
                     size_t cap) {
  int ix = entry_index(e);
  if (mk->via[ix][0])
    snprintf(buf, cap, "%s", mk->via[ix]);
  else if (mk->line[ix] > 0)
    snprintf(buf, cap, "%s:%d:%d", cfg->deck_path, mk->line[ix], mk->col[ix]);
  else
    snprintf(buf, cap, "%s", cfg->deck_path);
}

#define WHERE(sec, key) \
  (where_of(cfg, mk, find_entry(#sec, #key), wbuf, sizeof wbuf), wbuf)

/* Where the grid was set: the first of parallel.dp/cp/tp/pp given explicitly. */
static const char *grid_where(const td_config *cfg, const marks *mk, char *buf, size_t cap) {
  const char *keys[] = {"dp", "cp", "tp", "pp"};
  for (int i = 0; i < 4; ++i) {
    const entry *e = find_entry("parallel", keys[i]);
    if (mk->set[entry_index(e)]) {
      where_of(cfg, mk, e, buf, cap);
      return buf;
    }
  }
  where_of(cfg, mk, find_entry("parallel", "dp"), buf, cap);
  return buf;
}

/* One factor of a checked product: its name in messages, its value, and the
 * deck key it comes from (NULL for a constant such as "4 bytes"). */
typedef struct {
  const char *name;
  int64_t v;
  const entry *e;
} factor;

/* *out = the product of the n factors (all >= 0), or TD_ERR_DECK when it does
 * not fit in int64_t: "WHERE: a × b = 1 × 2 overflows 64 bits (what)", WHERE
 * being where the largest factor given in the deck or by --set was set. */
static td_status checked_product(const td_config *cfg, const marks *mk, const char *what,
                                 const factor *f, int n, int64_t *out) {
  int64_t p = 1;
  int over = 0;
  for (int i = 0; i < n && !over; ++i) over = __builtin_mul_overflow(p, f[i].v, &p);
  if (!over) {
    *out = p;
    return TD_OK;
  }
  const entry *blame = NULL;
  int64_t big = -1;
  for (int i = 0; i < n; ++i)
    if (f[i].e && (!blame || (mk->set[entry_index(f[i].e)] && f[i].v > big))) {
      if (mk->set[entry_index(f[i].e)]) big = f[i].v;
      blame = f[i].e;
    }
  char wbuf[TD_STR_MAX + 64], names[512] = "", values[512] = "";
  if (blame)
    where_of(cfg, mk, blame, wbuf, sizeof wbuf);
  else
    snprintf(wbuf, sizeof wbuf, "%s", cfg->deck_path);
  for (int i = 0; i < n; ++i) {
    size_t ln = strlen(names), lv = strlen(values);
    snprintf(names + ln, sizeof names - ln, "%s%s", i ? " × " : "", f[i].name);
    snprintf(values + lv, sizeof values - lv, "%s%lld", i ? " × " : "", (long long)f[i].v);
  }
  TD_FAIL(TD_ERR_DECK, "%s: %s = %s overflows 64 bits (%s)", wbuf, names, values, what);
}

#define FACTOR(sec, key) {#sec "." #key, cfg->sec##_##key, find_entry(#sec, #key)}
#define CHECKED(what, out, ...)                                                      \
  do {                                                                              \
    const factor f_[] = {__VA_ARGS__};                                              \
    TD_CHECK(checked_product(cfg, mk, (what), f_, (int)(sizeof f_ / sizeof f_[0]), (out))); \
  } while (0)

/* Sizes that follow from products of deck values — tokens, parameters, what a
 * rank allocates — must fit in 64 bits before anything computes them: every
 * product the model, the estimate and the trainer form is bounded here. */
static td_status check_sizes(td_config *cfg, const marks *mk) {
  int64_t T = cfg->model_seq_len, C = cfg->model_dim;
  int64_t V = cfg->model_vocab_size, H = cfg->model_heads;
  int64_t pp = cfg->parallel_pp, x;
  CHECKED("tokens per optimizer step", &x, FACTOR(training, global_batch), FACTOR(model, seq_len));
  CHECKED("the step's list of windows", &x, FACTOR(training, global_batch), {"8 bytes", 8, NULL});
  CHECKED("tokens of the whole run", &x, FACTOR(training, steps), FACTOR(training, global_batch),
          FACTOR(model, seq_len));
  CHECKED("evaluation windows", &x, FACTOR(eval, batches), FACTOR(training, global_batch));

  /* parameters (td_config_dims), 16 bytes each (fp32 value, gradient, two
   * AdamW moments) */
  td_model_dims dm;
  td_config_dims(cfg, &dm);
  int64_t per_layer = dm.block_params; /* C <= 2^20, F <= 2^22: fits */
  const factor fdim = FACTOR(model, dim);
  CHECKED("fp32 embedding, its gradient and AdamW moments", &x, FACTOR(model, vocab_size), fdim,
          {"16 bytes", 16, NULL});
  CHECKED("fp32 parameters, gradients and AdamW moments of the blocks", &x, FACTOR(model, layers),
          {"(the parameters of one block)", per_layer, fdim.e}, {"16 bytes", 16, NULL});
  if (dm.params == INT64_MAX || __builtin_mul_overflow(dm.params, (int64_t)16, &x)) {
    char wbuf[TD_STR_MAX + 64];
    TD_FAIL(TD_ERR_DECK, "%s: the model's parameters × 16 bytes (fp32 value, gradient, AdamW "
            "moments) overflow 64 bits", WHERE(model, layers));
  }

  /* activations of one micro-batch */
  int64_t B = td_config_micro_batch(cfg), m = td_config_accum_steps(cfg);
  factor fb = FACTOR(parallel, micro_batch);
  if (cfg->parallel_micro_batch == 0)
    fb = (factor){"micro-batch (training.global_batch / parallel.dp)", B,
                  find_entry("training", "global_batch")};
  const factor ft = FACTOR(model, seq_len), f4 = {"4 bytes", 4, NULL};
  CHECKED("MLP activations of one micro-batch", &x, fb, ft,
          {"3·(the MLP width)", 3 * dm.F, find_entry("model", dm.llama ? "ffn_dim" : "dim")}, f4);
  CHECKED("logits of one micro-batch", &x, fb, ft, FACTOR(model, vocab_size), f4);
  CHECKED("attention probabilities of one micro-batch", &x, fb, FACTOR(model, heads), ft, ft, f4);

  /* everything one rank holds for its live micro-batches: the model's slots
   * and the estimate are sums of at most this many elements */
  int64_t lmax = 0, first, count;
  for (int s = 0; s < pp; ++s) {
    int64_t sum = 0;
    for (int64_t k = s; k < pp * cfg->parallel_virtual_stages; k += pp) {
      td_config_chunk_layers(cfg, (int)k, &first, &count);
      sum += count;
    }
    if (sum > lmax) lmax = sum;
  }
  int gpipe = cfg->parallel_pp_schedule[0] == 'g';
  int64_t live = pp <= 1 ? 1 : gpipe ? m : (pp < m ? pp : m);
  if (pp > 1 && strcmp(cfg->parallel_pp_schedule, "interleaved") == 0) /* per chunk, bounded */
    live = 2 * pp < m ? 2 * pp : m;
  if (pp > 1 && gpipe && m > INT32_MAX) {
    char wbuf[TD_STR_MAX + 64];
    TD_FAIL(TD_ERR_DECK, "%s: parallel.pp_schedule = gpipe keeps all %lld micro-batches of a step "
            "alive (at most %d; use 1f1b or a larger parallel.micro_batch)",
            WHERE(parallel, pp_schedule), (long long)m, INT32_MAX);
  }
  int64_t width = 16 * C + 4 * dm.F + V + H * T + 8; /* bounded by the schema's ranges */
  CHECKED("activation memory of the largest pipeline stage", &x,
          {"(live micro-batches + 1)", live + 1, gpipe && pp > 1 ? fb.e : find_entry("parallel", "pp")},
          {"(layers per stage + 3)", lmax + 3, find_entry("model", "layers")}, fb, ft,
          {"(16·model.dim + 4·MLP width + model.vocab_size + model.heads·model.seq_len + 8)",
           width, fdim.e}, f4);
  return TD_OK;
}

static td_status cross_check(td_config *cfg, const marks *mk) {
  char wbuf[TD_STR_MAX + 64];
  for (int i = 0; i < NSCHEMA; ++i)
    if ((k_schema[i].flags & TD_F_REQ) && !mk->set[i])
      TD_FAIL(TD_ERR_DECK, "%s: missing required key '%s': %s", cfg->deck_path,
              k_schema[i].full, k_schema[i].doc);
  int64_t dp = cfg->parallel_dp, cp = cfg->parallel_cp, tp = cfg->parallel_tp;
  int64_t pp = cfg->parallel_pp, T = cfg->model_seq_len;
  if (cfg->world > 0 && dp * cp * tp * pp != cfg->world)
    TD_FAIL(TD_ERR_DECK,
            "%s: parallel: dp × cp × tp × pp = %lld × %lld × %lld × %lld = %lld, but the job has "
            "%d rank%s (set parallel.dp/cp/tp/pp so that their product is the number of MPI "
            "ranks)",
            grid_where(cfg, mk, wbuf, sizeof wbuf), (long long)dp, (long long)cp, (long long)tp,
            (long long)pp, (long long)(dp * cp * tp * pp), cfg->world, cfg->world == 1 ? "" : "s");
  if (cp > 1 && T % (2 * cp) != 0)
    TD_FAIL(TD_ERR_DECK,
            "%s: parallel.cp = %lld needs model.seq_len = %lld divisible by 2·cp = %lld (each "
            "context-parallel rank holds two of the sequence's 2·cp equal chunks, one early and "
            "one late, so that the causal attention's work is balanced)",
            WHERE(parallel, cp), (long long)cp, (long long)T, (long long)(2 * cp));
  if (cfg->model_dim % cfg->model_heads != 0)
    TD_FAIL(TD_ERR_DECK, "%s: model.dim = %lld is not divisible by model.heads = %lld",
            WHERE(model, dim), (long long)cfg->model_dim, (long long)cfg->model_heads);
  if (cfg->model_heads % tp != 0)
    TD_FAIL(TD_ERR_DECK,
            "%s: model.heads = %lld is not divisible by parallel.tp = %lld (each tensor-parallel "
            "rank holds whole heads)",
            WHERE(parallel, tp), (long long)cfg->model_heads, (long long)tp);
  if (cfg->parallel_sequence_parallel && tp < 2)
    TD_FAIL(TD_ERR_DECK,
            "%s: parallel.sequence_parallel = true needs parallel.tp > 1 (it splits the tokens "
            "of the tensor-parallel group's replicated regions; tp is %lld)",
            WHERE(parallel, sequence_parallel), (long long)tp);
  if (cfg->parallel_sequence_parallel && (T / cp) % tp != 0)
    TD_FAIL(TD_ERR_DECK,
            "%s: parallel.sequence_parallel = true needs the tokens a rank holds of each "
            "sequence, model.seq_len / parallel.cp = %lld, divisible by parallel.tp = %lld (each "
            "tensor-parallel rank holds 1/tp of them in the norms and residual stream)",
            WHERE(parallel, sequence_parallel), (long long)(T / cp), (long long)tp);
  td_model_dims dm;
  td_config_dims(cfg, &dm);
  if (dm.llama) {
    if (cfg->model_ffn_dim == 0)
      TD_FAIL(TD_ERR_DECK, "%s: model.arch = llama needs model.ffn_dim (the SwiGLU hidden width)",
              WHERE(model, arch));
    if (dm.H % dm.KV != 0)
      TD_FAIL(TD_ERR_DECK, "%s: model.heads = %lld is not divisible by model.kv_heads = %lld",
              WHERE(model, kv_heads), (long long)dm.H, (long long)dm.KV);
    if (dm.KV % tp != 0)
      TD_FAIL(TD_ERR_DECK,
              "%s: model.kv_heads = %lld is not divisible by parallel.tp = %lld (each "
              "tensor-parallel rank holds whole key/value heads)",
              WHERE(parallel, tp), (long long)dm.KV, (long long)tp);
    if (dm.F % tp != 0)
      TD_FAIL(TD_ERR_DECK, "%s: model.ffn_dim = %lld is not divisible by parallel.tp = %lld",
              WHERE(parallel, tp), (long long)dm.F, (long long)tp);
    if (dm.HS % 2 != 0)
      TD_FAIL(TD_ERR_DECK,
              "%s: the head size model.dim / model.heads = %lld is odd (rotary embeddings "
              "rotate pairs)", WHERE(model, heads), (long long)dm.HS);
  } else {
    if (cfg->model_kv_heads != 0 && cfg->model_kv_heads != cfg->model_heads)
      TD_FAIL(TD_ERR_DECK, "%s: model.kv_heads is for model.arch = llama (gpt2 has one key/value "
              "head per query head)", WHERE(model, kv_heads));
    if (cfg->model_ffn_dim != 0 && cfg->model_ffn_dim != 4 * cfg->model_dim)
      TD_FAIL(TD_ERR_DECK, "%s: model.ffn_dim is for model.arch = llama (gpt2's MLP is "
              "4·model.dim = %lld)", WHERE(model, ffn_dim), (long long)(4 * cfg->model_dim));
    if (!dm.tied)
      TD_FAIL(TD_ERR_DECK, "%s: gpt2 ties its output head to the embedding; "
              "model.tie_embeddings = false is for llama", WHERE(model, tie_embeddings));
  }
  if (cfg->model_moe_experts > 0) { /* model.moe */
    if (cfg->model_moe_experts < 2)
      TD_FAIL(TD_ERR_DECK, "%s: model.moe.experts = %lld: a mixture needs at least 2 experts "
              "(0: a dense model)", WHERE(model, moe_experts), (long long)cfg->model_moe_experts);
    if (cfg->model_moe_top_k > cfg->model_moe_experts)
      TD_FAIL(TD_ERR_DECK, "%s: model.moe.top_k = %lld is more than model.moe.experts = %lld",
              WHERE(model, moe_top_k), (long long)cfg->model_moe_top_k,
              (long long)cfg->model_moe_experts);
    if (cfg->model_moe_every > cfg->model_layers)
      TD_FAIL(TD_ERR_DECK, "%s: model.moe.every = %lld: the model has %lld blocks, so none "
              "would be sparse", WHERE(model, moe_every), (long long)cfg->model_moe_every,
              (long long)cfg->model_layers);
    if (dm.Fe % tp != 0)
      TD_FAIL(TD_ERR_DECK, "%s: the experts' width %lld (model.moe.ffn_dim, else model.ffn_dim) "
              "is not divisible by parallel.tp = %lld (experts are split like the MLP)",
              WHERE(model, moe_ffn_dim), (long long)dm.Fe, (long long)tp);
    if (cfg->model_moe_experts % cfg->parallel_ep != 0)
      TD_FAIL(TD_ERR_DECK, "%s: model.moe.experts = %lld is not divisible by parallel.ep = %lld "
              "(each expert-parallel rank holds experts/ep whole experts)",
              WHERE(parallel, ep), (long long)cfg->model_moe_experts, (long long)cfg->parallel_ep);
    if (cfg->model_moe_capacity_factor > 0 && cp > 1)
      TD_FAIL(TD_ERR_DECK, "%s: model.moe.capacity_factor = %g with parallel.cp = %lld is not "
              "built yet (a sequence's capacity is kept in position order, which its cp ranks "
              "would have to agree on); use parallel.cp: 1 or capacity_factor: 0 (dropless)",
              WHERE(model, moe_capacity_factor), cfg->model_moe_capacity_factor, (long long)cp);
  }
  if (cfg->parallel_ep > 1 && cfg->model_moe_experts == 0)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.ep = %lld splits the experts of model.moe, and the model "
            "has none (set model.moe.experts, or parallel.ep: 1)", WHERE(parallel, ep),
            (long long)cfg->parallel_ep);
  if ((dp * cp) % cfg->parallel_ep != 0)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.ep = %lld does not divide parallel.dp × parallel.cp = "
            "%lld × %lld = %lld (expert parallelism is carved out of the data- and "
            "context-parallel ranks)", WHERE(parallel, ep), (long long)cfg->parallel_ep,
            (long long)dp, (long long)cp, (long long)(dp * cp));
  int interleaved = strcmp(cfg->parallel_pp_schedule, "interleaved") == 0;
  int64_t vs = cfg->parallel_virtual_stages, nchunks = pp * vs;
  if (interleaved && pp < 2)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.pp_schedule = interleaved needs parallel.pp >= 2 "
            "(pp = %lld)", WHERE(parallel, pp), (long long)pp);
  if (interleaved && vs < 2)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.pp_schedule = interleaved needs parallel.virtual_stages "
            ">= 2 (model chunks per stage; it is %lld)", WHERE(parallel, virtual_stages),
            (long long)vs);
  if (!interleaved && vs != 1)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.virtual_stages = %lld is for parallel.pp_schedule = "
            "interleaved (the schedule is %s)", WHERE(parallel, virtual_stages), (long long)vs,
            cfg->parallel_pp_schedule);
  if (interleaved && cfg->parallel_stage_layers_count == 0 && cfg->model_layers < nchunks)
    TD_FAIL(TD_ERR_DECK, "%s: model.layers = %lld is fewer than the parallel.pp × "
            "parallel.virtual_stages = %lld model chunks of the interleaved schedule",
            WHERE(parallel, virtual_stages), (long long)cfg->model_layers, (long long)nchunks);
  if (interleaved && cfg->parallel_stage_layers_count == 0 && cfg->model_layers % nchunks != 0)
    TD_FAIL(TD_ERR_DECK, "%s: model.layers = %lld is not divisible by parallel.pp × "
            "parallel.virtual_stages = %lld model chunks (or give parallel.stage_layers, one "
            "entry per chunk)", WHERE(parallel, virtual_stages), (long long)cfg->model_layers,
            (long long)nchunks);
  if (cfg->parallel_stage_layers_count > 0) {
    int64_t sum = 0;
    for (int i = 0; i < cfg->parallel_stage_layers_count; ++i) sum += cfg->parallel_stage_layers[i];
    if (cfg->parallel_stage_layers_count != nchunks)
      TD_FAIL(TD_ERR_DECK, "%s: parallel.stage_layers has %d entries but parallel.pp = %lld%s",
              WHERE(parallel, stage_layers), cfg->parallel_stage_layers_count, (long long)pp,
              interleaved ? " stages of parallel.virtual_stages chunks each: one entry a chunk"
                          : "");
    /* empty: only the first model chunk (the embedding alone) and the last
     * (final norm, head and loss alone), as Llama 3's layout (§3.3.2) */
    for (int i = 1; i + 1 < cfg->parallel_stage_layers_count; ++i)
      if (cfg->parallel_stage_layers[i] == 0)
        TD_FAIL(TD_ERR_DECK, "%s: parallel.stage_layers[%d] = 0: only the first model chunk "
                "(the embedding alone) and the last (the head and loss alone) may hold no layers",
                WHERE(parallel, stage_layers), i);
    if (sum != cfg->model_layers)
      TD_FAIL(TD_ERR_DECK, "%s: parallel.stage_layers sums to %lld but model.layers = %lld",
              WHERE(parallel, stage_layers), (long long)sum, (long long)cfg->model_layers);
  } else if (!interleaved && cfg->model_layers % pp != 0) {
    TD_FAIL(TD_ERR_DECK,
            "%s: model.layers = %lld is not divisible by parallel.pp = %lld (or give "
            "parallel.stage_layers)",
            WHERE(parallel, pp), (long long)cfg->model_layers, (long long)pp);
  }
  if (cfg->training_global_batch % dp != 0)
    TD_FAIL(TD_ERR_DECK, "%s: training.global_batch = %lld is not divisible by parallel.dp = %lld",
            WHERE(training, global_batch), (long long)cfg->training_global_batch, (long long)dp);
  int64_t mb = cfg->parallel_micro_batch, mbdp = 0;
  if (mb > 0)
    CHECKED("sequences of one micro-batch step", &mbdp, FACTOR(parallel, micro_batch),
            FACTOR(parallel, dp));
  if (mb > 0 && cfg->training_global_batch % mbdp != 0)
    TD_FAIL(TD_ERR_DECK,
            "%s: training.global_batch = %lld is not divisible by parallel.micro_batch × "
            "parallel.dp = %lld × %lld",
            WHERE(parallel, micro_batch), (long long)cfg->training_global_batch, (long long)mb,
            (long long)dp);
  int64_t accum = td_config_accum_steps(cfg);
  if (interleaved && accum > 0 && accum % pp != 0)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.pp_schedule = interleaved needs the micro-batches per step "
            "(training.global_batch / (parallel.micro_batch × parallel.dp) = %lld) to be a "
            "multiple of parallel.pp = %lld", WHERE(parallel, micro_batch), (long long)accum,
            (long long)pp);
  if (cfg->schedule_min_lr > cfg->optimizer_lr)
    TD_FAIL(TD_ERR_DECK, "%s: schedule.min_lr = %g is larger than optimizer.lr = %g",
            WHERE(schedule, min_lr), cfg->schedule_min_lr, cfg->optimizer_lr);
  if (cfg->training_steps > 0 && cfg->schedule_warmup > cfg->training_steps)
    TD_FAIL(TD_ERR_DECK, "%s: schedule.warmup = %lld is longer than training.steps = %lld",
            WHERE(schedule, warmup), (long long)cfg->schedule_warmup,
            (long long)cfg->training_steps);
  if (cfg->run_name[0] == '\0')
    TD_FAIL(TD_ERR_DECK, "%s: run.name is empty (it names the run's folder, runs/<name>)",
            WHERE(run, name));
  if (cfg->data_train[0] == '\0')
    TD_FAIL(TD_ERR_DECK, "%s: data.train is empty", WHERE(data, train));
  if (strcmp(cfg->data_attend, "document") == 0 && strcmp(cfg->model_attention, "fused") != 0)
    TD_FAIL(TD_ERR_DECK, "%s: data.attend = document keeps attention inside each document "
            "with the fused kernels' document masks: model.attention is %s (set "
            "model.attention: fused)", WHERE(data, attend), cfg->model_attention);
  if (strcmp(cfg->optimizer_offload, "cpu") == 0 && strcmp(cfg->run_device, "cuda") != 0)
    TD_FAIL(TD_ERR_DECK, "%s: optimizer.offload = cpu moves the optimizer from a device to the "
            "host, and needs a device: run.device is %s (set run.device: cuda, or "
            "optimizer.offload: none)", WHERE(optimizer, offload), cfg->run_device);
  return check_sizes(cfg, mk);
}

static void derive_paths(td_config *cfg) {
  char buf[TD_STR_MAX * 2];
  if (cfg->run_out_dir[0] == '\0') {
    snprintf(buf, sizeof buf, "runs/%s", cfg->run_name);
    snprintf(cfg->run_out_dir, TD_STR_MAX, "%.*s", TD_STR_MAX - 1, buf);
  }
  if (cfg->checkpoint_dir[0] == '\0') {
    snprintf(buf, sizeof buf, "%s/ckpt", cfg->run_out_dir);
    snprintf(cfg->checkpoint_dir, TD_STR_MAX, "%.*s", TD_STR_MAX - 1, buf);
  }
  if (cfg->logging_metrics[0] == '\0') {
    snprintf(buf, sizeof buf, "%s/metrics.jsonl", cfg->run_out_dir);
    snprintf(cfg->logging_metrics, TD_STR_MAX, "%.*s", TD_STR_MAX - 1, buf);
  }
  if (strcmp(cfg->logging_tensorboard, "true") == 0) {
    snprintf(buf, sizeof buf, "%s/tb", cfg->run_out_dir);
    snprintf(cfg->logging_tensorboard, TD_STR_MAX, "%.*s", TD_STR_MAX - 1, buf);
  } else if (strcmp(cfg->logging_tensorboard, "false") == 0) {
    cfg->logging_tensorboard[0] = '\0';
  }
  if (cfg->data_val[0] == '\0') snprintf(cfg->data_val, TD_STR_MAX, "%s", cfg->data_train);
}

static td_status load_impl(const char *path, const char *text, int nset, char **sets, int world,
                           td_config *cfg) {
  td_status st = TD_OK;
  td_yaml_node *root = NULL;
  schema_names();
  marks *mk = calloc(1, sizeof *mk);
  if (!mk) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->deck_path, sizeof cfg->deck_path, "%s", path);
  cfg->world = world;
  for (int i = 0; i < NSCHEMA; ++i) {
    if (k_schema[i].flags & TD_F_REQ) continue;
    char where[128];
    snprintf(where, sizeof where, "default of %s", k_schema[i].full);
    TD_CHECK_GOTO(set_from_text(cfg, &k_schema[i], where, k_schema[i].def));
  }
  TD_CHECK_GOTO(td_yaml_load(path, text, &root));
  TD_CHECK_GOTO(apply_deck(cfg, path, root, mk));
  for (int i = 0; i < nset; ++i) TD_CHECK_GOTO(apply_set(cfg, sets[i], mk));
  TD_CHECK_GOTO(cross_check(cfg, mk));
  derive_paths(cfg);
done:
  td_yaml_free(&root);
  free(mk);
  return st;
}

td_status td_config_load(const char *path, int nset, char **sets, int world, td_config *cfg) {
  return load_impl(path, NULL, nset, sets, world, cfg);
}

td_status td_config_load_text(const char *name, const char *text, td_config *cfg) {
  return load_impl(name, text, 0, NULL, 0, cfg);
}

td_status td_config_load_text_sets(const char *name, const char *text, int nset, char **sets,
                                   int world, td_config *cfg) {
  return load_impl(name, text, nset, sets, world, cfg);
}

/* The code point at s (UTF-8) and its length in bytes; an invalid byte is
 * returned as itself with length 1. */
static uint32_t utf8_next(const unsigned char *s, int *len) {
  int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
          : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
  uint32_t cp = n == 1 ? s[0] : n == 2 ? s[0] & 0x1fu : n == 3 ? s[0] & 0x0fu : s[0] & 0x07u;
  for (int i = 1; i < n; ++i) {
    if ((s[i] & 0xc0) != 0x80) n = 0;
    if (!n) break;
    cp = cp << 6 | (s[i] & 0x3fu);
  }
  *len = n ? n : 1;
  return n ? cp : s[0];
}

/* Whether libyaml reads code point cp back as itself inside a scalar: YAML's
 * printable set less NEL, LS and PS (line breaks) and the BOM. */
static int yaml_literal_ok(uint32_t cp) {
  if (cp == 0x85 || cp == 0x2028 || cp == 0x2029 || cp == 0xfeff) return 0;
  return (cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xd7ff) ||
         (cp >= 0xe000 && cp <= 0xfffd) || (cp >= 0x10000 && cp <= 0x10ffff);
}

/* Print a string as a YAML scalar, quoted when it needs to be; in quotes,
 * what YAML would not read back as itself is escaped. */
static void print_str(FILE *out, const char *s) {
  size_t n = strlen(s);
  int plain = s[0] != '\0' && !strpbrk(s, ":#{}[],&*!|>'\"%@`") && s[0] != ' ' &&
              s[n - 1] != ' ' && s[0] != '-' && s[0] != '?' && s[0] != '~';
  for (const unsigned char *c = (const unsigned char *)s; plain && *c;) {
    int len;
    plain = yaml_literal_ok(utf8_next(c, &len));
    c += len;
  }
  if (plain && (!strcasecmp(s, "true") || !strcasecmp(s, "false") || !strcasecmp(s, "yes") ||
                !strcasecmp(s, "no") || !strcasecmp(s, "null") || !strcasecmp(s, "on") ||
                !strcasecmp(s, "off") || strtod(s, NULL) != 0.0 || s[0] == '0'))
    plain = 0;
  if (plain) {
    fputs(s, out);
    return;
  }
  fputc('"', out);
  for (const unsigned char *c = (const unsigned char *)s; *c;) {
    int len;
    uint32_t cp = utf8_next(c, &len);
    if (cp == '"' || cp == '\\')
      fprintf(out, "\\%c", (int)cp);
    else if (cp == '\n')
      fputs("\\n", out);
    else if (cp == '\t')
      fputs("\\t", out);
    else if (yaml_literal_ok(cp))
      fwrite(c, 1, (size_t)len, out);
    else if (cp < 0x100)
      fprintf(out, "\\x%02x", (unsigned)cp);
    else if (cp < 0x10000)
      fprintf(out, "\\u%04x", (unsigned)cp);
    else
      fprintf(out, "\\U%08x", (unsigned)cp);
    c += len;
  }
  fputc('"', out);
}

/* Shortest "%g" form of v that reads back exactly. */
static void print_double(FILE *out, double v) {
  char buf[48];
  fmt_double(v, buf, sizeof buf - 4);
  /* keep it a YAML number that reads as a float */
  if (!strpbrk(buf, ".eEni")) strcat(buf, ".0");
  fputs(buf, out);
}

static void print_value(FILE *out, const td_config *cfg, const entry *e) {
  const char *base = (const char *)cfg + e->off;
  switch (e->type) {
    case T_INT: fprintf(out, "%lld", (long long)*(const int64_t *)base); break;
    case T_FLOAT: print_double(out, *(const double *)base); break;
    case T_BOOL: fputs(*(const int *)base ? "true" : "false", out); break;
    case T_STR: print_str(out, base); break;
    case T_INTS:
    case T_FLOATS: {
      int n = *(const int *)((const char *)cfg + e->count_off);
      fputc('[', out);
      for (int i = 0; i < n; ++i) {
        if (i) fputs(", ", out);
        if (e->type == T_INTS)
          fprintf(out, "%lld", (long long)((const int64_t *)base)[i]);
        else
          print_double(out, ((const double *)base)[i]);
      }
      fputc(']', out);
      break;
    }
  }
}

static void print_keys(const td_config *cfg, FILE *out, unsigned skip) {
  schema_names();
  const char *sec = "";
  for (int i = 0; i < NSCHEMA; ++i) {
    const entry *e = &k_schema[i];
    if (e->flags & skip) continue;
    if (strcmp(sec, e->sec) != 0) {
      fprintf(out, "%s:\n", e->sec);
      sec = e->sec;
    }
    int sm = submap_of(e->key);
    if (sm >= 0) { /* "  moe:" once, then its keys one level deeper */
      if (i == 0 || submap_of(k_schema[i - 1].key) != sm ||
          strcmp(k_schema[i - 1].sec, e->sec) != 0)
        fprintf(out, "  %s:\n", k_submaps[sm]);
      fprintf(out, "    %s: ", e->key + strlen(k_submaps[sm]) + 1);
    } else {
      fprintf(out, "  %s: ", e->key);
    }
    print_value(out, cfg, e);
    fputc('\n', out);
  }
}

void td_config_print(const td_config *cfg, FILE *out) { print_keys(cfg, out, 0); }

td_status td_config_to_text(const td_config *cfg, int checkpoint, char **out) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) TD_FAIL(TD_ERR_NOMEM, "cannot format the deck");
  print_keys(cfg, f, checkpoint ? TD_F_HOW : 0);
  fclose(f);
  *out = buf;
  return TD_OK;
}

void td_config_print_schema(FILE *out) {
  schema_names();
  fprintf(out, "| key | type | default | allowed | meaning |\n");
  fprintf(out, "| --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < NSCHEMA; ++i) {
    const entry *e = &k_schema[i];
    char allowed[128] = "";
    if (e->choices) {
      for (const char *c = e->choices; *c && strlen(allowed) + 3 < sizeof allowed; ++c) {
        size_t l = strlen(allowed);
        if (*c == '|')
          snprintf(allowed + l, sizeof allowed - l, ", ");
        else
          allowed[l] = *c, allowed[l + 1] = '\0';
      }
    } else if (e->type == T_INT || e->type == T_FLOAT || e->type == T_INTS || e->type == T_FLOATS) {
      char lo[40], hi[40];
      fmt_bound(e, e->lo, lo, sizeof lo);
      fmt_bound(e, e->hi, hi, sizeof hi);
      if (e->hi >= TD_BIG)
        snprintf(allowed, sizeof allowed, "≥ %s", lo);
      else
        snprintf(allowed, sizeof allowed, "%s … %s", lo, hi);
      if (e->flags & TD_F_LEN2) strncat(allowed, ", 2 elements", sizeof allowed - strlen(allowed) - 1);
    }
    char def[64];
    if (e->flags & TD_F_REQ)
      snprintf(def, sizeof def, "**required**");
    else if (e->def[0] == '\0')
      snprintf(def, sizeof def, "(derived)");
    else
      snprintf(def, sizeof def, "`%s`", e->def);
    fprintf(out, "| `%s` | %s | %s | %s | %s |\n", e->full, type_name(e->type), def, allowed,
            e->doc);
  }
}

void td_config_model_diff(const td_config *a, const td_config *b, char *buf, size_t cap) {
  schema_names();
  buf[0] = '\0';
  for (int i = 0; i < NSCHEMA; ++i) {
    const entry *e = &k_schema[i];
    if (strcmp(e->sec, "model") != 0) continue;
    if (strcmp(e->full, "model.init_from") == 0) continue; /* where it started, not its shape */
    /* how the kernels compute it, not the model: a run switches freely */
    if (strcmp(e->full, "model.attention") == 0 || strcmp(e->full, "model.head") == 0 ||
        strcmp(e->full, "model.head_chunk") == 0)
      continue;
    size_t sz = e->type == T_STR ? TD_STR_MAX : e->type == T_INT ? sizeof(int64_t) : sizeof(double);
    if (memcmp((const char *)a + e->off, (const char *)b + e->off, sz) != 0) {
      size_t used = strlen(buf);
      snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", e->full);
    }
  }
}

/* a + b and a · b saturated at INT64_MAX (check_sizes reports overflow) */
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

void td_config_dims(const td_config *cfg, td_model_dims *d) {
  memset(d, 0, sizeof *d);
  d->llama = strcmp(cfg->model_arch, "llama") == 0;
  d->tied = strcmp(cfg->model_tie_embeddings, "auto") == 0 ? !d->llama
            : strcmp(cfg->model_tie_embeddings, "true") == 0;
  d->V = cfg->model_vocab_size, d->T = cfg->model_seq_len, d->L = cfg->model_layers;
  d->C = cfg->model_dim, d->H = cfg->model_heads;
  d->KV = cfg->model_kv_heads > 0 ? cfg->model_kv_heads : d->H;
  d->HS = d->H > 0 ? d->C / d->H : 0;
  d->F = cfg->model_ffn_dim > 0 ? cfg->model_ffn_dim : 4 * d->C;
  int64_t C = d->C, embed = sat_mul(d->V, C);
  if (d->llama) { /* q, k, v, o; gate, up, down; two RMSNorm weights */
    int64_t attn = sat_mul(C, sat_add(sat_mul(2 * d->H, d->HS), sat_mul(2 * d->KV, d->HS)));
    d->block_matmul = sat_add(attn, sat_mul(3 * C, d->F));
    d->block_params = sat_add(d->block_matmul, 2 * C);
    d->params = sat_add(sat_add(embed, d->tied ? 0 : embed), C); /* + final norm */
  } else { /* c_attn, c_proj, c_fc, c_proj with biases; two LayerNorms */
    d->block_matmul = sat_add(sat_mul(4 * C, C), sat_mul(2 * C, d->F));
    d->block_params = sat_add(d->block_matmul, sat_add(3 * C + C + d->F + C, 4 * C));
    d->params = sat_add(sat_add(embed, sat_mul(d->T, C)), 2 * C); /* + wpe, ln_f */
  }
  d->params = sat_add(d->params, sat_mul(d->L, d->block_params));
  d->active_params = d->params;
  d->avg_block_matmul = (double)d->block_matmul, d->avg_block_params = (double)d->block_params;
  if (cfg->model_moe_experts <= 0) return;
  /* sparse blocks: the MLP becomes a router (E, C) and E experts, of which a
   * token uses K */
  d->E = cfg->model_moe_experts, d->K = cfg->model_moe_top_k, d->every = cfg->model_moe_every;
  d->Fe = cfg->model_moe_ffn_dim > 0 ? cfg->model_moe_ffn_dim : d->F;
  d->moe_layers = d->L / d->every;
  if (cfg->model_moe_capacity_factor > 0)
    d->cap = (int64_t)ceil(cfg->model_moe_capacity_factor * (double)d->T * (double)d->K /
                           (double)d->E);
  /* the MLP's weights (and GPT-2's biases) and an expert's: SwiGLU 3·C·F,
   * GELU 2·C·F (+ F + C) */
  int64_t w = d->llama ? 3 : 2, bias = d->llama ? 0 : 1;
  int64_t mlp_mm = sat_mul(w * C, d->F), mlp = sat_add(mlp_mm, bias * (d->F + C));
  int64_t exp_mm = sat_mul(w * C, d->Fe), expert = sat_add(exp_mm, bias * (d->Fe + C));
  int64_t router = sat_mul(d->E, C);
  int64_t rest = d->block_params - mlp; /* attention and norms */
  d->moe_params = sat_add(sat_add(rest, router), sat_mul(d->E, expert));
  d->moe_matmul = sat_add(sat_add(d->block_matmul - mlp_mm, router), sat_mul(d->K, exp_mm));
  int64_t dense = d->params - sat_mul(d->L, d->block_params);
  int64_t Ld = d->L - d->moe_layers;
  d->params = sat_add(sat_add(dense, sat_mul(Ld, d->block_params)),
                      sat_mul(d->moe_layers, d->moe_params));
  d->active_params =
      sat_add(sat_add(dense, sat_mul(Ld, d->block_params)),
              sat_mul(d->moe_layers, sat_add(sat_add(rest, router), sat_mul(d->K, expert))));
  double L = (double)(d->L > 0 ? d->L : 1), Lm = (double)d->moe_layers;
  d->avg_block_matmul = ((L - Lm) * (double)d->block_matmul + Lm * (double)d->moe_matmul) / L;
  d->avg_block_params = ((L - Lm) * (double)d->block_params + Lm * (double)d->moe_params) / L;
}

int td_config_moe_layer(const td_config *cfg, int64_t layer) {
  return cfg->model_moe_experts > 0 && (layer + 1) % cfg->model_moe_every == 0;
}

int64_t td_config_micro_batch(const td_config *cfg) {
  if (cfg->parallel_micro_batch > 0) return cfg->parallel_micro_batch;
  return cfg->parallel_dp > 0 ? cfg->training_global_batch / cfg->parallel_dp : 0;
}

/* 0 where micro-batch × dp is 0 or overflows (a deck cross_check refuses). */
int64_t td_config_accum_steps(const td_config *cfg) {
  int64_t step;
  if (__builtin_mul_overflow(cfg->parallel_dp, td_config_micro_batch(cfg), &step) || step <= 0)
    return 0;
  return cfg->training_global_batch / step;
}

void td_config_chunk_layers(const td_config *cfg, int k, int64_t *first, int64_t *count) {
  int64_t f = 0;
  if (cfg->parallel_stage_layers_count > 0) {
    for (int i = 0; i < k; ++i) f += cfg->parallel_stage_layers[i];
    *first = f;
    *count = cfg->parallel_stage_layers[k];
    return;
  }
  int64_t n = cfg->parallel_pp * (cfg->parallel_virtual_stages > 0 ? cfg->parallel_virtual_stages : 1);
  int64_t per = cfg->model_layers / n;
  *first = per * k;
  *count = per;
}

void td_config_stage_layers(const td_config *cfg, int s, int64_t *first, int64_t *count) {
  td_config_chunk_layers(cfg, s, first, count);
}
