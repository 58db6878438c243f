/* test_safetensors.c — td_safetensors_write with names that need escaping
 * (quote, backslash, newline, tab, a control byte, UTF-8), F32 and BF16
 * tensors of several shapes and an empty one; tests/cmake/interop.cmake then
 * reads the file back with Python's json + numpy and checks every name,
 * shape and value (tests/reference/check_safetensors.py).
 *   test_safetensors OUT.safetensors */
#include <stdio.h>

#include "io/td_safetensors.h"
#include "common/td_bf16.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_safetensors OUT.safetensors\n");
    return 2;
  }
  static float a[6], b[5];
  static td_bf16 c[4];
  for (int i = 0; i < 6; ++i) a[i] = 0.5f * (float)i - 1.0f;
  for (int i = 0; i < 5; ++i) b[i] = 1.0f / (float)(i + 1);
  for (int i = 0; i < 4; ++i) c[i] = td_bf16_from_f32(3.0f * (float)i + 0.25f);
  td_st_tensor t[] = {
      {"plain.weight", "F32", 2, {2, 3, 0, 0}, a, sizeof a},
      {"quote\"back\\slash\nnew\tline\x01 \xc3\xa9", "F32", 1, {5, 0, 0, 0}, b, sizeof b},
      {"bf16.values", "BF16", 2, {2, 2, 0, 0}, c, sizeof c},
      {"empty", "F32", 1, {0, 0, 0, 0}, NULL, 0},
  };
  const char *meta[] = {"format", "pt", "note \"quoted\"", "line\nbreak"};
  if (td_safetensors_write(argv[1], t, 4, meta, 2) != TD_OK) {
    fprintf(stderr, "test_safetensors: %s\n", td_error_message());
    return 1;
  }
  printf("test_safetensors: wrote %s\n", argv[1]);
  return 0;
}
