/* td_yaml.h — a YAML file as a small tree with source positions (libyaml).
 *
 * Only what job decks need: mappings, sequences and scalars, each node with
 * the line:column where it starts, so that every consumer can name the place
 * of a bad value. Anchors and aliases are resolved by libyaml. */
#ifndef TD_YAML_H
#define TD_YAML_H

#include <stdint.h>

#include "td_error.h"

typedef enum { TD_YAML_SCALAR, TD_YAML_SEQ, TD_YAML_MAP } td_yaml_kind;

typedef struct td_yaml_node td_yaml_node;
struct td_yaml_node {
  td_yaml_kind kind;
  int line, col;       /* 1-based start of the node */
  char *value;         /* scalar text (NULL for collections) */
  int plain;           /* scalar was unquoted */
  int n;               /* number of items / pairs */
  td_yaml_node **items; /* SEQ: n items; MAP: n values */
  td_yaml_node **keys;  /* MAP: n key scalars */
};

/* Parse a file (or, if text != NULL, the text with `path` used as its name).
 * Syntax errors → TD_ERR_DECK "path:line:col: problem". An empty document
 * gives an empty mapping. */
td_status td_yaml_load(const char *path, const char *text, td_yaml_node **out);
void td_yaml_free(td_yaml_node **node);
/* Name of a node kind for messages ("a mapping"). */
const char *td_yaml_kind_name(td_yaml_kind k);

#endif
