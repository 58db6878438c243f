/* tokenizer_h5.c — the /tokenizer group of datasets and checkpoints
 * (td_tokenizer_h5.h). */
#include "io/td_tokenizer_h5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/td_h5.h"

static char *dup_text(const char *s) {
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

void td_tokenizer_files_free(td_tokenizer_files *t) {
  if (!t) return;
  free(t->name);
  td_free(t->encoder_json);
  td_free(t->vocab_bpe);
  td_free(t->file);
  t->name = t->encoder_json = t->vocab_bpe = t->file = NULL;
  t->file_name[0] = '\0';
}

int td_tokenizer_files_present(const td_tokenizer_files *t) {
  return t && (t->encoder_json || t->file);
}

/* A td_alloc'd copy (like td_h5_read_string's buffers, so one free fits both). */
static char *alloc_copy(const char *s) {
  size_t n = strlen(s);
  char *d = NULL;
  if (td_alloc((void **)&d, n + 1, "tokenizer file") != TD_OK) return NULL;
  memcpy(d, s, n + 1);
  return d;
}

td_status td_tokenizer_files_of(const td_bpe *b, td_tokenizer_files *out) {
  memset(out, 0, sizeof *out);
  const char *e = td_bpe_file_text(b, 0), *m = td_bpe_file_text(b, 1);
  const char *n = td_bpe_dialect_name(td_bpe_get_dialect(b));
  if (td_bpe_file_name(b)) { /* LLaMA 3: one file */
    snprintf(out->file_name, sizeof out->file_name, "%s", td_bpe_file_name(b));
    if (!(out->file = alloc_copy(e)) || !(out->name = dup_text(n))) {
      td_tokenizer_files_free(out);
      TD_FAIL(TD_ERR_NOMEM, "out of memory copying the tokenizer's file");
    }
    return TD_OK;
  }
  size_t ne = strlen(e), nm = strlen(m);
  /* td_alloc'd like td_h5_read_string's buffers, so one free fits both */
  if (td_alloc((void **)&out->encoder_json, ne + 1, "tokenizer encoder.json") != TD_OK ||
      td_alloc((void **)&out->vocab_bpe, nm + 1, "tokenizer vocab.bpe") != TD_OK ||
      !(out->name = dup_text(n))) {
    td_tokenizer_files_free(out);
    TD_FAIL(TD_ERR_NOMEM, "out of memory copying the tokenizer's files");
  }
  memcpy(out->encoder_json, e, ne + 1);
  memcpy(out->vocab_bpe, m, nm + 1);
  return TD_OK;
}

td_status td_tokenizer_h5_write(hid_t file, const td_tokenizer_files *t, int writer) {
  td_status st = TD_OK;
  hid_t g = H5Gcreate2(file, "/tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) TD_FAIL(TD_ERR_HDF5, "cannot create /tokenizer: %s", td_h5_error_text());
  TD_CHECK_GOTO(td_h5_attr_write_str(g, "name", t->name));
  if (t->file) {
    char path[64];
    snprintf(path, sizeof path, "/tokenizer/%s", t->file_name);
    TD_CHECK_GOTO(td_h5_write_string(file, path, t->file, writer));
    goto done;
  }
  TD_CHECK_GOTO(td_h5_write_string(file, "/tokenizer/encoder.json", t->encoder_json, writer));
  TD_CHECK_GOTO(td_h5_write_string(file, "/tokenizer/vocab.bpe", t->vocab_bpe, writer));
done:
  H5Gclose(g);
  return st;
}

td_status td_tokenizer_h5_read(const char *path, td_tokenizer_files *out) {
  td_status st = TD_OK;
  hid_t f = -1, g = -1;
  memset(out, 0, sizeof *out);
  htri_t is = H5Fis_hdf5(path);
  H5Eclear2(H5E_DEFAULT);
  if (is <= 0) return TD_OK; /* a .bin dataset, or none: no tokenizer to carry */
  TD_CHECK(td_h5_open(path, MPI_COMM_NULL, 0, &f));
  htri_t has = H5Lexists(f, "/tokenizer", H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  if (has > 0) {
    char name[64];
    if ((g = H5Gopen2(f, "/tokenizer", H5P_DEFAULT)) < 0)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: /tokenizer is not a group", path);
    TD_CHECK_GOTO(td_h5_attr_read_str(g, path, "name", name, sizeof name));
    if (!(out->name = dup_text(name))) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
    td_bpe_dialect d;
    if (td_bpe_dialect_parse(name, &d) == TD_OK && td_bpe_dialect_is_llama3(d)) {
      static const char *const kinds[] = {"tokenizer.model", "tokenizer.json"};
      for (int k = 0; k < 2 && !out->file; k++) {
        char p[64];
        snprintf(p, sizeof p, "/tokenizer/%s", kinds[k]);
        htri_t e = H5Lexists(f, p, H5P_DEFAULT);
        H5Eclear2(H5E_DEFAULT);
        if (e > 0) {
          snprintf(out->file_name, sizeof out->file_name, "%s", kinds[k]);
          TD_CHECK_GOTO(td_h5_read_string(f, path, p, &out->file));
        }
      }
      if (!out->file)
        TD_FAIL_GOTO(TD_ERR_DATA, "%s: /tokenizer names %s but holds neither tokenizer.model nor "
                     "tokenizer.json", path, name);
      goto done;
    }
    td_error_clear();
    TD_CHECK_GOTO(td_h5_read_string(f, path, "/tokenizer/encoder.json", &out->encoder_json));
    TD_CHECK_GOTO(td_h5_read_string(f, path, "/tokenizer/vocab.bpe", &out->vocab_bpe));
  }
done:
  if (g >= 0) H5Gclose(g);
  if (f >= 0) H5Fclose(f);
  if (st != TD_OK) td_tokenizer_files_free(out);
  return st;
}

td_status td_tokenizer_files_load(const td_tokenizer_files *t, const char *where, td_bpe **out) {
  td_bpe_dialect d;
  char ename[600], mname[600];
  if (td_bpe_dialect_parse(t->name, &d) != TD_OK)
    TD_FAIL(TD_ERR_DATA, "%s: /tokenizer names an unknown tokenizer \"%s\" (expected gpt2, "
            "gpt3-encoder, llama3 or llama3-js)", where, t->name);
  if (t->file) {
    snprintf(ename, sizeof ename, "%s:/tokenizer/%s", where, t->file_name);
    TD_CHECK(td_bpe_load_llama3_mem(ename, (const unsigned char *)t->file, strlen(t->file), d, out));
    return TD_OK;
  }
  snprintf(ename, sizeof ename, "%s:/tokenizer/encoder.json", where);
  snprintf(mname, sizeof mname, "%s:/tokenizer/vocab.bpe", where);
  TD_CHECK(td_bpe_load_mem(ename, (const unsigned char *)t->encoder_json,
                           strlen(t->encoder_json), mname, (const unsigned char *)t->vocab_bpe,
                           strlen(t->vocab_bpe), d, out));
  return TD_OK;
}
