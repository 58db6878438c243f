/* utf8.c — the streaming UTF-8 sanitizer of td_utf8.h. The well-formed byte
 * sequences are those of Unicode Table 3-7: a lead byte fixes how many
 * continuation bytes follow and the range of the first of them (E0, ED, F0
 * and F4 narrow it; the rest are 80..BF). */
#include "io/td_utf8.h"

static const unsigned char k_fffd[3] = {0xEF, 0xBF, 0xBD};

void td_utf8_init(td_utf8 *u) {
  u->n = 0;
  u->need = 0;
  u->lo = 0x80, u->hi = 0xBF;
}

/* A new lead byte c: start a sequence (returns 1) or say it cannot start one
 * (returns 0; an ASCII byte is a whole sequence and is written). */
static int start(td_utf8 *u, unsigned char c, FILE *out) {
  u->lo = 0x80, u->hi = 0xBF;
  if (c < 0x80) {
    fputc(c, out);
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) u->need = 1;
  else if (c >= 0xE0 && c <= 0xEF) u->need = 2;
  else if (c >= 0xF0 && c <= 0xF4) u->need = 3;
  else return 0; /* 80..C1, F5..FF: never a lead byte */
  if (c == 0xE0) u->lo = 0xA0;      /* no overlong three-byte forms */
  else if (c == 0xED) u->hi = 0x9F; /* no surrogates */
  else if (c == 0xF0) u->lo = 0x90; /* no overlong four-byte forms */
  else if (c == 0xF4) u->hi = 0x8F; /* nothing above U+10FFFF */
  u->pend[0] = c;
  u->n = 1;
  return 1;
}

void td_utf8_feed(td_utf8 *u, const void *s, size_t n, FILE *out) {
  const unsigned char *p = s;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    if (u->n > 0) {
      if (c >= u->lo && c <= u->hi) {
        u->pend[u->n++] = c;
        u->lo = 0x80, u->hi = 0xBF;
        if (--u->need == 0) {
          fwrite(u->pend, 1, (size_t)u->n, out);
          u->n = 0;
        }
        continue;
      }
      /* the maximal subpart so far is ill-formed: one U+FFFD, and c starts anew */
      fwrite(k_fffd, 1, 3, out);
      u->n = 0, u->need = 0;
    }
    if (!start(u, c, out)) fwrite(k_fffd, 1, 3, out);
  }
}

void td_utf8_flush(td_utf8 *u, FILE *out) {
  if (u->n > 0) fwrite(k_fffd, 1, 3, out);
  td_utf8_init(u);
}
