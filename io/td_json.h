/* td_json.h — a strict JSON reader (RFC 8259) for the files trident takes
 * from other tools: Hugging Face's tokenizer.json, JSONL documents and chat
 * conversations, multiple-choice tasks.
 *
 * A document is parsed whole into a tree of values kept in one array; values
 * are handles (int, -1 for "none"). Strings are decoded to UTF-8 (escapes,
 * surrogate pairs) and NUL-terminated; a string may hold U+0000 (its length
 * says so). Refused, each with "NAME:LINE:COL: what, found X": bad syntax,
 * raw control characters in strings, invalid UTF-8 anywhere, lone
 * surrogates, duplicate keys in one object, nesting deeper than
 * TD_JSON_MAX_DEPTH, anything after the value. Numbers are kept as doubles
 * (and their text, for integer checks). Depends on libc only. */
#ifndef TD_JSON_H
#define TD_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "td_error.h"

#define TD_JSON_MAX_DEPTH 256

typedef enum {
  TD_JSON_NULL,
  TD_JSON_FALSE,
  TD_JSON_TRUE,
  TD_JSON_NUMBER,
  TD_JSON_STRING,
  TD_JSON_ARRAY,
  TD_JSON_OBJECT,
} td_json_kind;

typedef struct td_json td_json;

/* Parse s[0..n) as one JSON value. `name` (the file) and `line0` (the line
 * of s[0] in it, 1 for a whole file; a JSONL line's number) place messages.
 * Errors: TD_ERR_DATA "name:line:col: ..."; TD_ERR_NOMEM. */
td_status td_json_parse(const char *name, int64_t line0, const unsigned char *s, size_t n,
                        td_json **out);
/* Free; accepts NULL and *j == NULL; sets *j = NULL. */
void td_json_destroy(td_json **j);

/* The top-level value (0). */
int td_json_root(const td_json *j);
td_json_kind td_json_kind_of(const td_json *j, int v);
/* "null", "false", "true", "a number", "a string", "an array", "an object". */
const char *td_json_kind_name(td_json_kind k);
/* Members of an array or object: the first child, then the next one; -1 at
 * the end (and for other kinds). */
int td_json_first(const td_json *j, int v);
int td_json_next(const td_json *j, int v);
/* Number of children of an array or object (0 otherwise). */
int64_t td_json_count(const td_json *j, int v);
/* The member of object `v` with this key, or -1. */
int td_json_get(const td_json *j, int v, const char *key);
/* The key of object member `v` (its length in *n when n is not NULL). */
const char *td_json_key(const td_json *j, int v, size_t *n);
/* A string's UTF-8 bytes, NUL-terminated (length in *n); NULL for other kinds. */
const char *td_json_str(const td_json *j, int v, size_t *n);
/* A number's value (0 for other kinds). */
double td_json_num(const td_json *j, int v);
/* 1 when v is a number written as an integer in [INT64_MIN, INT64_MAX]
 * (no fraction, no exponent), with its value in *out. */
int td_json_int(const td_json *j, int v, int64_t *out);
/* Where v starts in the file: line (counted from line0) and column (bytes, from 1). */
void td_json_where(const td_json *j, int v, int64_t *line, int64_t *col);

#endif
