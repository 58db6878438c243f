/* td_utf8.h — text that a terminal can show: a streaming UTF-8 sanitizer.
 *
 * Byte-level tokenizers (GPT-2's BPE, the built-in bytes) split characters:
 * one token may carry the first two bytes of a three-byte character and the
 * next token the third. Fed token by token, this holds an incomplete
 * sequence until the bytes that complete it arrive, and replaces what stays
 * invalid with U+FFFD — one replacement per maximal subpart of an ill-formed
 * sequence (Unicode §3.9, "U+FFFD Substitution of Maximal Subparts"), as
 * Python's bytes.decode("utf-8", "replace"), tiktoken's and Hugging Face's
 * decoders do. The output is always well-formed UTF-8. */
#ifndef TD_UTF8_H
#define TD_UTF8_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
  unsigned char pend[4]; /* the bytes of an incomplete sequence so far */
  int n;                 /* how many */
  int need;              /* continuation bytes still expected */
  unsigned char lo, hi;  /* the range the next continuation byte must be in */
} td_utf8;

/* Start empty. */
void td_utf8_init(td_utf8 *u);
/* Write to `out` what the bytes s[0..n) complete; keep an incomplete tail. */
void td_utf8_feed(td_utf8 *u, const void *s, size_t n, FILE *out);
/* End of text: an incomplete tail becomes one U+FFFD. */
void td_utf8_flush(td_utf8 *u, FILE *out);

#endif
