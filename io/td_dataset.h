/* td_dataset.h — token datasets: trident HDF5, nanoGPT .bin, llm.c .bin.
 *
 * The format is chosen by content, not by name:
 *   - "\x89HDF\r\n\x1a\n" at offset 0: a trident HDF5 file (docs/architecture.md, "Token
 *     datasets"): 1-D integer /tokens, optional /val_tokens, root attributes
 *     vocab_size and tokenizer;
 *   - int32 little-endian header[0] == 20240520 with header[1] == 1 (GPT-2,
 *     uint16 tokens) or header[0] == 20240801 with header[1] == 7 (LLaMA-3,
 *     uint32 tokens): an llm.c file, 256 int32 header, header[2] = number of
 *     tokens, then the tokens;
 *   - anything else: a flat little-endian uint16 nanoGPT file.
 *
 * Windows (the eval protocol of docs/architecture.md): window i of length T covers tokens
 * [i·T, i·T + T] — T+1 tokens, inputs the first T, targets the last T — and
 * there are (ntokens - 1) / T of them.
 *
 * Not collective: every rank opens and reads on its own (serial HDF5,
 * read-only, or pread). td_h5_init() must have been called. */
#ifndef TD_DATASET_H
#define TD_DATASET_H

#include <stdint.h>

#include "td_error.h"

typedef enum { TD_SPLIT_TRAIN, TD_SPLIT_VAL } td_split;
typedef struct td_dataset td_dataset;

/* Open `path` for reading. TRAIN reads /tokens; VAL reads /val_tokens (or
 * /tokens if absent) of a trident file, and a .bin file whole. vocab_size is
 * the deck's: a trident file whose vocab_size attribute exceeds it is an
 * error; tokens themselves are checked against it as windows are read.
 * Errors (TD_ERR_DATA, naming the file): missing, empty or truncated file,
 * wrong llm.c magic/version, no /tokens, tokens not a 1-D integer dataset
 * of at most 32 bits, vocab_size attribute > vocab_size. */
td_status td_dataset_open(const char *path, td_split split, int64_t vocab_size,
                          td_dataset **out);
/* Number of tokens of the split. */
int64_t td_dataset_ntokens(const td_dataset *d);
/* "trident-hdf5", "nanogpt-bin" or "llmc-bin". */
const char *td_dataset_format(const td_dataset *d);
/* The path given to td_dataset_open. */
const char *td_dataset_path(const td_dataset *d);
/* Windows of length T: (ntokens - 1) / T (0 if T < 1 or ntokens < 2). */
int64_t td_dataset_nwindows(const td_dataset *d, int64_t T);
/* Read window i into out (T+1 int32). Reads only that range (HDF5 hyperslab
 * or pread). A token outside [0, vocab_size) is TD_ERR_DATA naming the file,
 * the token index and value; i outside [0, nwindows) is TD_ERR_INTERNAL. */
td_status td_dataset_read_window(td_dataset *d, int64_t i, int64_t T,
                                 int32_t *out);
/* A trident file may also hold, for each split (td_prepare.h,
 * td_prepare_records): a loss mask (/loss_mask, /val_loss_mask: uint8, 1
 * where the token's prediction counts) and document boundaries (/documents,
 * /val_documents: int64, the first token of each document, increasing, the
 * first 0). Both are checked at open (length, type, order: TD_ERR_DATA
 * naming the file and the dataset). Files without them read as "every token
 * counts" and "one stream". */
int td_dataset_has_mask(const td_dataset *d);
int td_dataset_has_documents(const td_dataset *d);
/* For window i (T+1 tokens, as td_dataset_read_window): mask (T+1 bytes, 1
 * where the token counts: all 1 without a mask) and doc (T+1 int32: for each
 * token, the window offset where its document starts — 0 when it started
 * before the window, or without boundaries). Either may be NULL. */
td_status td_dataset_read_meta(td_dataset *d, int64_t i, int64_t T, uint8_t *mask,
                               int32_t *doc);
/* TD_ERR_DATA "FILE (what): N tokens give W windows of T+1 tokens; one global
 * batch needs NEEDED" when nwindows(T) < needed. `what` names the role, e.g.
 * "data.train". */
td_status td_dataset_require_windows(const td_dataset *d, int64_t T,
                                     int64_t needed, const char *what);
/* Close and free; accepts NULL and sets *d = NULL. */
void td_dataset_close(td_dataset **d);

#endif
