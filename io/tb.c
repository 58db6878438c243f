/* tb.c — TensorBoard event files (td_tb.h): TFRecord framing, CRC32C and
 * the few protobuf fields of an Event, encoded by hand. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "io/td_fs.h"
#include "io/td_tb.h"

struct td_tb {
  FILE *f;
  char path[1024];
};

/* ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78) ------------------------ */

static uint32_t g_crc_table[256];

static void crc_table_make(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    g_crc_table[i] = c;
  }
}

uint32_t td_tb_crc32c(const void *data, size_t n) {
  if (g_crc_table[1] == 0) crc_table_make(); /* idempotent: racing makers agree */
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = g_crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t td_tb_masked_crc(const void *data, size_t n) {
  uint32_t c = td_tb_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protobuf: the wire format's varints, tags and fixed-width fields ------------- */

typedef struct {
  unsigned char *p;
  size_t n, cap;
  int oom;
} pb;

static void pb_bytes(pb *b, const void *src, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    unsigned char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void pb_varint(pb *b, uint64_t v) {
  unsigned char t[10];
  int n = 0;
  do {
    t[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  pb_bytes(b, t, (size_t)n);
}

/* wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void pb_key(pb *b, int field, int wire) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_fixed(pb *b, uint64_t v, int bytes) {
  unsigned char t[8];
  for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
  pb_bytes(b, t, (size_t)bytes);
}

static void pb_double(pb *b, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  pb_key(b, field, 1);
  pb_fixed(b, u, 8);
}

static void pb_float(pb *b, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  pb_key(b, field, 5);
  pb_fixed(b, u, 4);
}

static void pb_len(pb *b, int field, const void *data, size_t n) {
  pb_key(b, field, 2);
  pb_varint(b, n);
  pb_bytes(b, data, n);
}

/* ---- records ---------------------------------------------------------------------- */

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Frame one payload as a TFRecord and write it (flushed). */
static td_status write_record(td_tb *tb, const pb *payload) {
  if (payload->oom) return td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__,
                                        "out of memory encoding a TensorBoard event");
  unsigned char head[12];
  uint64_t len = payload->n;
  for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
  uint32_t hc = td_tb_masked_crc(head, 8), pc = td_tb_masked_crc(payload->p, payload->n);
  for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(hc >> (8 * i));
  unsigned char tail[4];
  for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(pc >> (8 * i));
  if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(payload->p, 1, payload->n, tb->f) != payload->n ||
      fwrite(tail, 1, 4, tb->f) != 4 || fflush(tb->f) != 0)
    return td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "%s: cannot write: %s",
                        tb->path, strerror(errno));
  return TD_OK;
}

/* The fields every Event starts with: wall time and step. */
static void event_head(pb *b, int64_t step) {
  pb_double(b, 1, wall_now());
  pb_key(b, 2, 0);
  pb_varint(b, (uint64_t)step);
}

td_status td_tb_open(const char *dir, int64_t resumed_from, td_tb **out) {
  td_status st = TD_OK;
  td_tb *tb = NULL;
  pb b = {0};
  *out = NULL;
  TD_CHECK(td_mkdir_p(dir, "TensorBoard folder"));
  tb = calloc(1, sizeof *tb);
  if (!tb) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  long now = (long)time(NULL);
  /* a new file every start: <time>.<host>, and a counter if that name exists
   * (two starts within one second) */
  for (int k = 0; k < 1000 && !tb->f; k++) {
    if (k == 0)
      snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s", dir, now, host);
    else
      snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s.%d", dir, now, host, k);
    int fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot create: %s", tb->path, strerror(errno));
    tb->f = fdopen(fd, "wb");
    if (!tb->f) {
      close(fd);
      TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot open: %s", tb->path, strerror(errno));
    }
  }
  if (!tb->f) TD_FAIL_GOTO(TD_ERR_IO, "%s: no free event file name", dir);
  event_head(&b, 0);
  pb_len(&b, 3, "brain.Event:2", 13);
  TD_CHECK_GOTO(write_record(tb, &b));
  if (resumed_from > 0) {
    pb s = {0};
    b.n = 0;
    pb_key(&s, 1, 0);
    pb_varint(&s, 1); /* SessionLog.status = START */
    event_head(&b, resumed_from + 1); /* the first step this run logs */
    pb_len(&b, 7, s.p, s.n);          /* Event.session_log (6: the deprecated log_message) */
    st = s.oom ? td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory")
               : write_record(tb, &b);
    free(s.p);
    TD_CHECK_GOTO(st);
  }
  *out = tb;
  tb = NULL;
done:
  free(b.p);
  td_tb_close(&tb);
  return st;
}

td_status td_tb_scalars(td_tb *tb, int64_t step, int n, const char *const *tags,
                        const double *values) {
  td_status st = TD_OK;
  pb ev = {0}, sum = {0}, val = {0};
  for (int i = 0; i < n; i++) {
    val.n = 0;
    pb_len(&val, 1, tags[i], strlen(tags[i]));
    pb_float(&val, 2, (float)values[i]);
    pb_len(&sum, 1, val.p, val.n);
  }
  event_head(&ev, step);
  pb_len(&ev, 5, sum.p, sum.n);
  if (val.oom || sum.oom) ev.oom = 1;
  st = write_record(tb, &ev);
  free(ev.p);
  free(sum.p);
  free(val.p);
  return st;
}

const char *td_tb_path(const td_tb *tb) { return tb->path; }

void td_tb_close(td_tb **tb) {
  if (!tb || !*tb) return;
  if ((*tb)->f) fclose((*tb)->f);
  free(*tb);
  *tb = NULL;
}
