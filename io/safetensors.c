/* safetensors.c — the safetensors writer (td_safetensors.h). */
#include "io/td_safetensors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes the host's bytes: safetensors is little-endian"
#endif

void td_json_put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f); /* UTF-8 passes through: JSON text is UTF-8 */
  }
  fputc('"', f);
}

/* The JSON header into a memory stream: *out (malloc'd), *len bytes. */
static td_status header(const td_st_tensor *t, int n, const char *const *meta, int nmeta,
                        char **out, size_t *len) {
  FILE *m = open_memstream(out, len);
  if (!m) TD_FAIL(TD_ERR_NOMEM, "out of memory for a safetensors header");
  int64_t off = 0;
  fputc('{', m);
  if (nmeta > 0) {
    td_json_put_string(m, "__metadata__");
    fputs(":{", m);
    for (int i = 0; i < nmeta; ++i) {
      if (i) fputc(',', m);
      td_json_put_string(m, meta[2 * i]);
      fputc(':', m);
      td_json_put_string(m, meta[2 * i + 1]);
    }
    fputc('}', m);
  }
  for (int i = 0; i < n; ++i) {
    if (i || nmeta > 0) fputc(',', m);
    td_json_put_string(m, t[i].name);
    fputs(":{\"dtype\":", m);
    td_json_put_string(m, t[i].dtype);
    fputs(",\"shape\":[", m);
    for (int d = 0; d < t[i].ndim; ++d) fprintf(m, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    fprintf(m, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + t[i].bytes));
    off += t[i].bytes;
  }
  fputc('}', m);
  /* pad with spaces so the data starts 8-byte aligned */
  long at = ftell(m);
  while (at >= 0 && at % 8 != 0) fputc(' ', m), ++at;
  if (fclose(m) != 0) TD_FAIL(TD_ERR_NOMEM, "out of memory for a safetensors header");
  return TD_OK;
}

td_status td_safetensors_write(const char *path, const td_st_tensor *t, int n,
                               const char *const *meta, int nmeta) {
  td_status st = TD_OK;
  char *hdr = NULL, *tmp = NULL;
  size_t hlen = 0;
  FILE *f = NULL;
  TD_CHECK(header(t, n, meta, nmeta, &hdr, &hlen));
  size_t pl = strlen(path);
  if (!(tmp = malloc(pl + 5))) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  memcpy(tmp, path, pl);
  memcpy(tmp + pl, ".tmp", 5);
  if (!(f = fopen(tmp, "wb"))) TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
  for (int i = 0; ok && i < n; ++i)
    ok = t[i].bytes == 0 || fwrite(t[i].data, 1, (size_t)t[i].bytes, f) == (size_t)t[i].bytes;
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (fclose(f) != 0) ok = 0;
  f = NULL;
  if (!ok) TD_FAIL_GOTO(TD_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
  if (rename(tmp, path) != 0)
    TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
done:
  if (f) fclose(f);
  if (st != TD_OK && tmp) unlink(tmp);
  free(tmp);
  free(hdr);
  return st;
}
