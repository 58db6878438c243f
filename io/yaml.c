/* yaml.c — libyaml's document loader turned into a td_yaml_node tree. */
#include "io/td_yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

const char *td_yaml_kind_name(td_yaml_kind k) {
  switch (k) {
    case TD_YAML_SCALAR: return "a scalar";
    case TD_YAML_SEQ: return "a list";
    default: return "a mapping";
  }
}

void td_yaml_free(td_yaml_node **node) {
  if (!node || !*node) return;
  td_yaml_node *x = *node;
  for (int i = 0; i < x->n; ++i) {
    td_yaml_free(&x->items[i]);
    if (x->keys) td_yaml_free(&x->keys[i]);
  }
  free(x->items);
  free(x->keys);
  free(x->value);
  free(x);
  *node = NULL;
}

/* Nodes one document may expand to: aliases share nodes in libyaml's tree
 * but are copied here, so ten levels of ten aliases each would be 10^10. */
#define TD_YAML_MAX_NODES 100000

static td_status convert(yaml_document_t *doc, yaml_node_t *src, int depth,
                         const char *path, int64_t *nodes, td_yaml_node **out) {
  *out = NULL;
  if (depth > 64)
    TD_FAIL(TD_ERR_DECK, "%s:%zu:%zu: nesting deeper than 64 levels", path,
            src->start_mark.line + 1, src->start_mark.column + 1);
  if (++*nodes > TD_YAML_MAX_NODES)
    TD_FAIL(TD_ERR_DECK, "%s:%zu:%zu: more than %d nodes (aliases of aliases?)", path,
            src->start_mark.line + 1, src->start_mark.column + 1, TD_YAML_MAX_NODES);
  td_yaml_node *x = calloc(1, sizeof *x);
  if (!x) TD_FAIL(TD_ERR_NOMEM, "out of memory reading %s", path);
  x->line = (int)src->start_mark.line + 1;
  x->col = (int)src->start_mark.column + 1;
  td_status st = TD_OK;
  switch (src->type) {
    case YAML_SCALAR_NODE:
      x->kind = TD_YAML_SCALAR;
      x->value = strndup((const char *)src->data.scalar.value, src->data.scalar.length);
      x->plain = src->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
      if (!x->value) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
      break;
    case YAML_SEQUENCE_NODE: {
      x->kind = TD_YAML_SEQ;
      int n = (int)(src->data.sequence.items.top - src->data.sequence.items.start);
      x->items = calloc((size_t)n + 1, sizeof *x->items);
      if (!x->items) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
      for (int i = 0; i < n; ++i) {
        yaml_node_t *c = yaml_document_get_node(doc, src->data.sequence.items.start[i]);
        TD_CHECK_GOTO(convert(doc, c, depth + 1, path, nodes, &x->items[i]));
        x->n = i + 1;
      }
      break;
    }
    case YAML_MAPPING_NODE: {
      x->kind = TD_YAML_MAP;
      int n = (int)(src->data.mapping.pairs.top - src->data.mapping.pairs.start);
      x->items = calloc((size_t)n + 1, sizeof *x->items);
      x->keys = calloc((size_t)n + 1, sizeof *x->keys);
      if (!x->items || !x->keys)
        TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
      for (int i = 0; i < n; ++i) {
        yaml_node_pair_t *p = &src->data.mapping.pairs.start[i];
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
          TD_FAIL_GOTO(TD_ERR_DECK, "%s:%zu:%zu: a key must be a plain name, found a %s",
                       path, k->start_mark.line + 1, k->start_mark.column + 1,
                       k->type == YAML_MAPPING_NODE ? "mapping" : "list");
        TD_CHECK_GOTO(convert(doc, k, depth + 1, path, nodes, &x->keys[i]));
        x->n = i + 1; /* the key is freed with x if its value fails */
        TD_CHECK_GOTO(convert(doc, v, depth + 1, path, nodes, &x->items[i]));
        for (int j = 0; j < i; ++j)
          if (strcmp(x->keys[j]->value, x->keys[i]->value) == 0)
            TD_FAIL_GOTO(TD_ERR_DECK, "%s:%d:%d: duplicate key '%s' (first at line %d)",
                         path, x->keys[i]->line, x->keys[i]->col, x->keys[i]->value,
                         x->keys[j]->line);
      }
      break;
    }
    default:
      TD_FAIL_GOTO(TD_ERR_DECK, "%s:%d:%d: empty node", path, x->line, x->col);
  }
done:
  if (st != TD_OK) {
    td_yaml_free(&x);
    return st;
  }
  *out = x;
  return TD_OK;
}

td_status td_yaml_load(const char *path, const char *text, td_yaml_node **out) {
  *out = NULL;
  td_status st = TD_OK;
  FILE *f = NULL;
  yaml_parser_t parser;
  yaml_document_t doc;
  int have_parser = 0, have_doc = 0;
  if (!text) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
      TD_FAIL(TD_ERR_DECK, "%s: cannot read the job deck: it is a directory, not a YAML file", path);
    f = fopen(path, "rb");
    if (!f) TD_FAIL(TD_ERR_DECK, "%s: cannot open the job deck: %s", path, strerror(errno));
  }
  if (!yaml_parser_initialize(&parser)) TD_FAIL_GOTO(TD_ERR_NOMEM, "libyaml: cannot initialise");
  have_parser = 1;
  if (f)
    yaml_parser_set_input_file(&parser, f);
  else
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
  if (!yaml_parser_load(&parser, &doc)) {
    const char *what = parser.problem ? parser.problem : "syntax error";
    size_t line = parser.problem_mark.line + 1, col = parser.problem_mark.column + 1;
    if (parser.context)
      TD_FAIL_GOTO(TD_ERR_DECK, "%s:%zu:%zu: YAML syntax error: %s %s (line %zu)", path,
                   line, col, what, parser.context, parser.context_mark.line + 1);
    TD_FAIL_GOTO(TD_ERR_DECK, "%s:%zu:%zu: YAML syntax error: %s", path, line, col, what);
  }
  have_doc = 1;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root) {
    td_yaml_node *empty = calloc(1, sizeof *empty);
    if (!empty) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory reading %s", path);
    empty->kind = TD_YAML_MAP;
    empty->line = empty->col = 1;
    *out = empty;
    goto done;
  }
  int64_t nodes = 0;
  TD_CHECK_GOTO(convert(&doc, root, 0, path, &nodes, out));
  {
    /* One document per file: a second one after "---" would be ignored silently. */
    yaml_document_t next;
    if (!yaml_parser_load(&parser, &next)) {
      td_yaml_free(out);
      TD_FAIL_GOTO(TD_ERR_DECK, "%s:%zu:%zu: YAML syntax error: %s", path,
                   parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                   parser.problem ? parser.problem : "syntax error");
    }
    yaml_node_t *extra = yaml_document_get_root_node(&next);
    size_t line = next.start_mark.line + 1, col = next.start_mark.column + 1;
    yaml_document_delete(&next);
    if (extra) {
      td_yaml_free(out);
      TD_FAIL_GOTO(TD_ERR_DECK, "%s:%zu:%zu: a second YAML document; a job deck is one document "
                   "(remove the '---' line)", path, line, col);
    }
  }
done:
  if (have_doc) yaml_document_delete(&doc);
  if (have_parser) yaml_parser_delete(&parser);
  if (f) fclose(f);
  return st;
}
