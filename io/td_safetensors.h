/* td_safetensors.h — writing Hugging Face safetensors files.
 *
 * The format: 8 bytes little-endian header length N, N bytes of JSON (an
 * object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}
 * relative to the data, plus "__metadata__": {string: string}), padded with
 * spaces to a multiple of 8, then the tensors' raw little-endian bytes in
 * the order given. The JSON is written by td_json_put_string (every name
 * escaped: quote, backslash, control characters). */
#ifndef TD_SAFETENSORS_H
#define TD_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include "td_error.h"

typedef struct td_st_tensor {
  const char *name;
  const char *dtype;  /* "F32" or "BF16" */
  int ndim;
  int64_t shape[4];
  const void *data;   /* little-endian elements */
  int64_t bytes;
} td_st_tensor;

/* Write n tensors to path (through path.tmp, renamed when complete), with
 * metadata pairs meta[2i] -> meta[2i+1] (nmeta pairs). Errors name path. */
td_status td_safetensors_write(const char *path, const td_st_tensor *t, int n,
                               const char *const *meta, int nmeta);

/* Write s as a JSON string literal (quotes included) to f. */
void td_json_put_string(FILE *f, const char *s);

#endif
