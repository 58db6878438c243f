/* bpe_internal.h — between io/bpe.c (the engine) and io/bpe_llama3.c (the
 * LLaMA 3 files). Not part of the library's interface. */
#ifndef TD_BPE_INTERNAL_H
#define TD_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/td_bpe.h"

/* One token as a file gives it: its bytes (the byte alphabet undone) and id,
 * and where the file gives it (for messages). */
typedef struct {
  const unsigned char *bytes;
  uint32_t len;
  int32_t id;
  int64_t line, col;
} td_bpe_tok;

/* One merge of a merges list (rank = its index): the two tokens' bytes. */
typedef struct {
  const unsigned char *l, *r;
  uint32_t nl, nr;
  int64_t line, col;
} td_bpe_merge;

/* The two kinds of LLaMA 3 file. */
#define TD_BPE_FILE_TIKTOKEN 1
#define TD_BPE_FILE_HF_JSON 2

/* What a LLaMA 3 file describes (io/bpe_llama3.c fills it). */
typedef struct {
  const char *name;     /* the file, for messages */
  td_bpe_tok *tok;      /* ordinary tokens */
  size_t ntok;
  td_bpe_merge *merges; /* tokenizer.json: its merges; NULL for tokenizer.model */
  size_t nmerges;
  td_bpe_tok *special;  /* special tokens, matched in text before pre-tokenization */
  size_t nspecial;
  int kind;             /* TD_BPE_FILE_TIKTOKEN or TD_BPE_FILE_HF_JSON */
} td_bpe_spec;

/* Parse a LLaMA 3 tokenizer file (either kind, recognised by content) into
 * spec; the pointers in spec point into *arena (free both with free()).
 * TD_ERR_DATA naming the file and place. */
td_status td_bpe__llama3_parse(const char *name, const unsigned char *s, size_t n,
                               td_bpe_spec *spec, unsigned char **arena);
void td_bpe__spec_free(td_bpe_spec *spec);

/* The byte alphabet (GPT-2's bytes_to_unicode): cp_to_byte[cp] = the byte
 * code point cp < TD_BPE_ALPHABET_END stands for, or -1. */
#define TD_BPE_ALPHABET_END 0x144
void td_bpe__alphabet(int16_t cp_to_byte[TD_BPE_ALPHABET_END]);
/* The bytes that the alphabet string s[0..n) (valid UTF-8) spells, into o
 * (room for n bytes); their count, or -1 with *bad the first code point
 * outside the alphabet. */
long td_bpe__alphabet_decode(const int16_t *cp_to_byte, const unsigned char *s, size_t n,
                             unsigned char *o, uint32_t *bad);
/* Messages: s shown as text, control bytes as \xNN, cut after ~60 bytes. */
const char *td_bpe__show(const unsigned char *s, size_t n, char *buf, size_t cap);
/* Read a whole file. */
td_status td_bpe__read_all(const char *path, const char *what, unsigned char **out, size_t *n);

#endif
