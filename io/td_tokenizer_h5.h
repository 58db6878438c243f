/* td_tokenizer_h5.h — a tokenizer carried inside trident's HDF5 files.
 *
 * A dataset prepared with --tokenizer gpt2 or llama3, and every checkpoint
 * trained on one, hold the group /tokenizer: the attribute "name" (the
 * dialect, td_bpe_dialect_name) and the files' bytes as scalar string
 * datasets — "encoder.json" and "vocab.bpe" for GPT-2, "tokenizer.model" or
 * "tokenizer.json" for LLaMA 3. So `generate` speaks the model's text from a
 * checkpoint alone, and a checkpoint names what its ids mean. */
#ifndef TD_TOKENIZER_H5_H
#define TD_TOKENIZER_H5_H

#include <hdf5.h>

#include "io/td_bpe.h"
#include "td_error.h"

/* The files of a tokenizer, NUL-terminated (free with td_tokenizer_files_free). */
typedef struct td_tokenizer_files {
  char *name;          /* dialect name, e.g. "gpt2" */
  char *encoder_json;  /* GPT-2 */
  char *vocab_bpe;
  char *file;          /* LLaMA 3: its one file */
  char file_name[32];  /* "tokenizer.model" or "tokenizer.json" */
} td_tokenizer_files;

/* Whether t holds a tokenizer (read from a file that has one). */
int td_tokenizer_files_present(const td_tokenizer_files *t);

/* Write /tokenizer into file (collective on a parallel file: every rank
 * passes the same texts; only `writer` writes the data). */
td_status td_tokenizer_h5_write(hid_t file, const td_tokenizer_files *t, int writer);
/* Read /tokenizer of the HDF5 file at path, opened read-only by this process
 * alone; a file that is not HDF5 or has no /tokenizer gives all NULL and
 * TD_OK. Malformed content → TD_ERR_DATA naming the file. */
td_status td_tokenizer_h5_read(const char *path, td_tokenizer_files *out);
/* The files of a loaded tokenizer (copies). */
td_status td_tokenizer_files_of(const td_bpe *b, td_tokenizer_files *out);
/* Build the tokenizer they describe; messages name `where` (the HDF5 file). */
td_status td_tokenizer_files_load(const td_tokenizer_files *t, const char *where, td_bpe **out);
void td_tokenizer_files_free(td_tokenizer_files *t);

#endif
