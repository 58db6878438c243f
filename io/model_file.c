/* model_file.c — GPT-2 weights from safetensors or llm.c files
 * (td_model_file.h). */
#include "io/td_model_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/td_bf16.h"

typedef struct {
  char name[96];
  int ndim;
  int64_t shape[2];
  float *data;
  int used;
} entry;

struct td_model_file {
  const char *format;
  entry *e;
  int n, cap;
};

void td_model_file_close(td_model_file **mp) {
  if (!mp || !*mp) return;
  td_model_file *m = *mp;
  for (int i = 0; i < m->n; ++i) free(m->e[i].data);
  free(m->e);
  free(m);
  *mp = NULL;
}

const char *td_model_file_format(const td_model_file *m) { return m->format; }

/* A new entry named name (ndim, shape), its float32 storage allocated. */
static td_status add(td_model_file *m, const char *path, const char *name, int ndim,
                     int64_t r, int64_t c, entry **out) {
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 64;
    entry *e = realloc(m->e, (size_t)cap * sizeof *e);
    if (!e) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory", path);
    m->e = e, m->cap = cap;
  }
  for (int i = 0; i < m->n; ++i)
    if (!strcmp(m->e[i].name, name))
      TD_FAIL(TD_ERR_DATA, "%s: tensor %s is stored twice (in this file and an earlier one)",
              path, name);
  entry *e = &m->e[m->n];
  memset(e, 0, sizeof *e);
  if (snprintf(e->name, sizeof e->name, "%s", name) >= (int)sizeof e->name)
    TD_FAIL(TD_ERR_DATA, "%s: tensor name too long: %.60s...", path, name);
  e->ndim = ndim, e->shape[0] = r, e->shape[1] = ndim == 2 ? c : 1;
  size_t n = (size_t)(r * e->shape[1]);
  if (!(e->data = malloc((n ? n : 1) * sizeof(float))))
    TD_FAIL(TD_ERR_NOMEM, "%s: out of memory for %s", path, name);
  m->n++;
  *out = e;
  return TD_OK;
}

/* Elements of type bf16 or f32 at p, as float32 into dst. */
static void widen(float *dst, const unsigned char *p, int64_t n, int bf16) {
  if (!bf16) {
    memcpy(dst, p, (size_t)n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    td_bf16 h;
    memcpy(&h, p + 2 * i, 2);
    dst[i] = td_bf16_to_f32(h);
  }
}

static td_status read_file(const char *path, unsigned char **out, size_t *n) {
  struct stat sb;
  if (stat(path, &sb) != 0) TD_FAIL(TD_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) TD_FAIL(TD_ERR_DATA, "%s: not a regular file", path);
  FILE *f = fopen(path, "rb");
  if (!f) TD_FAIL(TD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  td_status st = TD_OK;
  unsigned char *buf = NULL;
  if (fseek(f, 0, SEEK_END) != 0) TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot seek", path);
  long len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0) TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot seek", path);
  if (!(buf = malloc((size_t)len + 1))) TD_FAIL_GOTO(TD_ERR_NOMEM, "%s: out of memory", path);
  if (fread(buf, 1, (size_t)len, f) != (size_t)len)
    TD_FAIL_GOTO(TD_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  *out = buf, *n = (size_t)len;
  buf = NULL;
done:
  free(buf);
  fclose(f);
  return st;
}

/* "h.<N>.attn.bias" or "h.<N>.attn.masked_bias": old exports' mask buffers. */
static int mask_buffer(const char *name) {
  if (strncmp(name, "h.", 2) != 0) return 0;
  const char *p = name + 2;
  while (*p >= '0' && *p <= '9') ++p;
  return p > name + 2 && (!strcmp(p, ".attn.bias") || !strcmp(p, ".attn.masked_bias"));
}

static td_status open_safetensors(td_model_file *m, const char *path, const unsigned char *raw,
                                  size_t len) {
  td_status st = TD_OK;
  uint64_t hl = 0;
  for (int i = 0; i < 8; ++i) hl |= (uint64_t)raw[i] << (8 * i);
  if (hl > len - 8) TD_FAIL(TD_ERR_DATA, "%s: header length %llu exceeds the file (%zu bytes)",
                            path, (unsigned long long)hl, len);
  cJSON *h = cJSON_ParseWithLength((const char *)raw + 8, (size_t)hl);
  if (!h || !cJSON_IsObject(h))
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: the safetensors header is not a JSON object (near byte %lld)",
                 path, h ? 8LL : (long long)(8 + (cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - (const char *)raw - 8 : 0)));
  const unsigned char *data = raw + 8 + hl;
  size_t dlen = len - 8 - (size_t)hl;
  for (cJSON *t = h->child; t; t = t->next) {
    const char *key = t->string;
    if (!strcmp(key, "__metadata__")) continue;
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: tensor %s: needs dtype, shape and data_offsets", path, key);
    const char *name = strncmp(key, "transformer.", 12) == 0 ? key + 12 : key;
    if (mask_buffer(name)) continue; /* buffers, not parameters */
    int bf16 = !strcmp(dt->valuestring, "BF16");
    if (!bf16 && strcmp(dt->valuestring, "F32") != 0)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: tensor %s has dtype %s (F32 or BF16 expected)", path, key,
                   dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd < 1 || nd > 2)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: tensor %s has %d dimensions (1 or 2 expected)", path, key, nd);
    double d0 = cJSON_GetArrayItem(sh, 0)->valuedouble;
    double d1 = nd == 2 ? cJSON_GetArrayItem(sh, 1)->valuedouble : 1.0;
    if (!(d0 >= 0 && d1 >= 0 && d0 <= 9.0e15 && d1 <= 9.0e15 && d0 == (double)(int64_t)d0 &&
          d1 == (double)(int64_t)d1))
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: tensor %s: its shape is not a list of counts", path, key);
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, e = cJSON_GetArrayItem(of, 1)->valuedouble;
    double want = d0 * d1 * (bf16 ? 2.0 : 4.0);
    if (d0 < 0 || d1 < 0 || b < 0 || e < b || e > (double)dlen || e - b != want)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: tensor %s: data_offsets [%.0f, %.0f] do not hold its "
                   "shape in %s within the %zu data bytes", path, key, b, e, dt->valuestring, dlen);
    entry *en = NULL;
    TD_CHECK_GOTO(add(m, path, name, nd, (int64_t)d0, (int64_t)d1, &en));
    widen(en->data, data + (size_t)b, (int64_t)(d0 * d1), bf16);
  }
  m->format = "safetensors";
done:
  cJSON_Delete(h);
  return st;
}

/* llm.c's layout: (out, in) matrices, transposed to (in, out). */
static void transpose_into(float *dst, const float *src, int64_t out, int64_t in) {
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) dst[i * out + o] = src[o * in + i];
}

static td_status open_llmc(td_model_file *m, const char *path, const unsigned char *raw,
                           size_t len) {
  int32_t h[256];
  memcpy(h, raw, sizeof h);
  int bf16 = h[1] == 5;
  if (h[1] != 3 && h[1] != 5)
    TD_FAIL(TD_ERR_DATA, "%s: llm.c model version %d (3 = fp32 and 5 = bf16 are read)", path, h[1]);
  int64_t T = h[2], V = h[3], L = h[4], C = h[6], Vp = h[7];
  if (T < 1 || V < 1 || L < 1 || h[5] < 1 || C < 1 || Vp < V)
    TD_FAIL(TD_ERR_DATA, "%s: llm.c header: max_seq_len %lld, vocab %lld, layers %lld, heads %d, "
            "channels %lld, padded vocab %lld do not describe a model", path, (long long)T,
            (long long)V, (long long)L, h[5], (long long)C, (long long)Vp);
  /* the sizes the header claims, first in floating point: int32 fields
   * multiplied (C·C·L·4) overflow 64-bit integers */
  double dT = (double)T, dV = (double)Vp, dL = (double)L, dC = (double)C;
  double dneed = (dV * dC + dT * dC + dL * dC * 13.0 + dL * 12.0 * dC * dC + 2.0 * dC) *
                 (bf16 ? 2.0 : 4.0);
  if (dneed != (double)(len - 1024))
    TD_FAIL(TD_ERR_DATA, "%s: %zu bytes of tensors after the header, the header's model needs "
            "%.0f", path, len - 1024, dneed);
  /* llm.c's tensors, in its order: count of elements and (out, in) when a matrix */
  const int64_t n[16] = {Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                         L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
  size_t es = bf16 ? 2 : 4, need = 0;
  for (int i = 0; i < 16; ++i) need += (size_t)n[i] * es;
  if (len - 1024 != need)
    TD_FAIL(TD_ERR_DATA, "%s: %zu bytes of tensors after the header, the header's model needs "
            "%zu", path, len - 1024, need);
  const unsigned char *p[16];
  p[0] = raw + 1024;
  for (int i = 1; i < 16; ++i) p[i] = p[i - 1] + (size_t)n[i - 1] * es;
  float *tmp = malloc((size_t)(4 * C * C) * sizeof(float));
  if (!tmp) TD_FAIL(TD_ERR_NOMEM, "%s: out of memory", path);
  td_status st = TD_OK;
  entry *e = NULL;
  TD_CHECK_GOTO(add(m, path, "wte.weight", 2, V, C, &e)); /* padded rows dropped */
  widen(e->data, p[0], V * C, bf16);
  TD_CHECK_GOTO(add(m, path, "wpe.weight", 2, T, C, &e));
  widen(e->data, p[1], T * C, bf16);
  static const char *const vec[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.bias",
                                    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                    "mlp.c_fc.bias", "mlp.c_proj.bias"};
  static const int vec_at[] = {2, 3, 5, 7, 8, 9, 11, 13}, vec_w[] = {1, 1, 3, 1, 1, 1, 4, 1};
  static const char *const mat[] = {"attn.c_attn.weight", "attn.c_proj.weight",
                                    "mlp.c_fc.weight", "mlp.c_proj.weight"};
  static const int mat_at[] = {4, 6, 10, 12}, mat_out[] = {3, 1, 4, 1}, mat_in[] = {1, 1, 1, 4};
  char name[96];
  for (int64_t l = 0; l < L; ++l) {
    for (int k = 0; k < 8; ++k) {
      int64_t w = vec_w[k] * C;
      snprintf(name, sizeof name, "h.%lld.%s", (long long)l, vec[k]);
      TD_CHECK_GOTO(add(m, path, name, 1, w, 1, &e));
      widen(e->data, p[vec_at[k]] + (size_t)(l * w) * es, w, bf16);
    }
    for (int k = 0; k < 4; ++k) {
      int64_t out = mat_out[k] * C, in = mat_in[k] * C;
      snprintf(name, sizeof name, "h.%lld.%s", (long long)l, mat[k]);
      TD_CHECK_GOTO(add(m, path, name, 2, in, out, &e));
      widen(tmp, p[mat_at[k]] + (size_t)(l * out * in) * es, out * in, bf16);
      transpose_into(e->data, tmp, out, in);
    }
  }
  TD_CHECK_GOTO(add(m, path, "ln_f.weight", 1, C, 1, &e));
  widen(e->data, p[14], C, bf16);
  TD_CHECK_GOTO(add(m, path, "ln_f.bias", 1, C, 1, &e));
  widen(e->data, p[15], C, bf16);
  m->format = "llm.c";
done:
  free(tmp);
  return st;
}

/* One file, by its content: llm.c's model file or safetensors. */
static td_status open_one(td_model_file *m, const char *path) {
  td_status st = TD_OK;
  unsigned char *raw = NULL;
  size_t len = 0;
  TD_CHECK(read_file(path, &raw, &len));
  int32_t magic = 0;
  if (len >= 1024) memcpy(&magic, raw, 4);
  if (len >= 1024 && magic == 20240326)
    st = open_llmc(m, path, raw, len);
  else if (len >= 10 && raw[8] == '{')
    st = open_safetensors(m, path, raw, len);
  else
    st = td_error_set(TD_ERR_DATA, __FILE__, __LINE__, __func__,
                      "%s: neither safetensors nor an llm.c model file (magic 20240326)", path);
  free(raw);
  return st;
}

/* Hugging Face's sharded layout: index.json's weight_map names, for every
 * tensor, the shard (a file of dir) that holds it; every shard is read and
 * every tensor the map names must be in its shard. */
static td_status open_index(td_model_file *m, const char *dir, const char *index) {
  td_status st = TD_OK;
  unsigned char *raw = NULL;
  size_t len = 0;
  cJSON *j = NULL;
  char (*files)[256] = NULL;
  int nf = 0;
  TD_CHECK(read_file(index, &raw, &len));
  j = cJSON_ParseWithLength((const char *)raw, len);
  cJSON *map = j ? cJSON_GetObjectItemCaseSensitive(j, "weight_map") : NULL;
  if (!cJSON_IsObject(map))
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: not a JSON object with a \"weight_map\" object", index);
  int n = cJSON_GetArraySize(map);
  files = calloc((size_t)(n ? n : 1), sizeof *files);
  if (!files) TD_FAIL_GOTO(TD_ERR_NOMEM, "%s: out of memory", index);
  for (cJSON *t = map->child; t; t = t->next) {
    if (!cJSON_IsString(t) || !t->valuestring[0] || strchr(t->valuestring, '/') ||
        strlen(t->valuestring) >= sizeof files[0])
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: weight_map[\"%.80s\"]: expected the name of a shard file in "
                   "the same folder", index, t->string);
    int k = 0;
    while (k < nf && strcmp(files[k], t->valuestring)) ++k;
    if (k == nf) snprintf(files[nf++], sizeof files[0], "%s", t->valuestring);
  }
  if (nf == 0) TD_FAIL_GOTO(TD_ERR_DATA, "%s: the weight_map names no tensor", index);
  for (int k = 0; k < nf; ++k) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, files[k]);
    int before = m->n;
    TD_CHECK_GOTO(open_one(m, path));
    for (cJSON *t = map->child; t; t = t->next) { /* the map's tensors of this shard */
      if (strcmp(t->valuestring, files[k])) continue;
      const char *name = strncmp(t->string, "transformer.", 12) == 0 ? t->string + 12 : t->string;
      int found = mask_buffer(name);
      for (int i = before; i < m->n && !found; ++i) found = !strcmp(m->e[i].name, name);
      if (!found)
        TD_FAIL_GOTO(TD_ERR_DATA, "%s: names %s in %s, which does not hold it", index, t->string,
                     path);
    }
  }
  m->format = "sharded safetensors";
done:
  free(files);
  cJSON_Delete(j);
  free(raw);
  return st;
}

td_status td_model_file_open(const char *path, td_model_file **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_model_file *m = calloc(1, sizeof *m);
  if (!m) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a Hugging Face model folder */
    char one[4096], index[4096];
    snprintf(one, sizeof one, "%s/model.safetensors", path);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
    if (stat(one, &sb) == 0)
      st = open_one(m, one);
    else if (stat(index, &sb) == 0)
      st = open_index(m, path, index);
    else
      st = td_error_set(TD_ERR_DATA, __FILE__, __LINE__, __func__,
                        "%s: a folder without model weights: neither %s nor %s (Hugging "
                        "Face's single-file and sharded layouts) exists", path, one, index);
  } else {
    st = open_one(m, path);
  }
  TD_CHECK_GOTO(st);
  *out = m;
  m = NULL;
done:
  td_model_file_close(&m);
  return st;
}

td_status td_model_file_hf_config(const char *path, td_hf_config *c, int *found) {
  td_status st = TD_OK;
  *found = 0;
  memset(c, 0, sizeof *c);
  char p[4096];
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return TD_OK;
  snprintf(p, sizeof p, "%s/config.json", path);
  if (stat(p, &sb) != 0) return TD_OK;
  unsigned char *raw = NULL;
  size_t len = 0;
  TD_CHECK(read_file(p, &raw, &len));
  cJSON *j = cJSON_ParseWithLength((const char *)raw, len);
  if (!cJSON_IsObject(j)) TD_FAIL_GOTO(TD_ERR_DATA, "%s: not a JSON object", p);
  snprintf(c->path, sizeof c->path, "%s", p);
  cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
  if (cJSON_IsString(mt)) snprintf(c->model_type, sizeof c->model_type, "%s", mt->valuestring);
  for (int i = 0; i < TD_HF_NKEYS; ++i) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, td_hf_keys[i]);
    c->v[i] = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
  }
  *found = 1;
done:
  cJSON_Delete(j);
  free(raw);
  return st;
}

const char *const td_hf_keys[TD_HF_NKEYS] = {
    "vocab_size", "n_embd", "n_layer", "n_head", "n_positions",
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "num_local_experts", "num_experts_per_tok"};

const float *td_model_file_tensor(const td_model_file *m, const char *name, int *ndim,
                                  int64_t shape[2]) {
  for (int i = 0; i < m->n; ++i)
    if (!strcmp(m->e[i].name, name)) {
      entry *e = &m->e[i];
      e->used = 1;
      *ndim = e->ndim, shape[0] = e->shape[0], shape[1] = e->shape[1];
      return e->data;
    }
  return NULL;
}

const char *td_model_file_unused(const td_model_file *m, int k) {
  for (int i = 0; i < m->n; ++i)
    if (!m->e[i].used && k-- == 0) return m->e[i].name;
  return NULL;
}
