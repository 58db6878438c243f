/* registry.c — the one place back-ends are registered: picks the ops table
 * for the device named by the deck. */
#include <stdio.h>
#include <string.h>

#include "kernels/td_kernels.h"
#ifdef TD_HAVE_CUDA
#include "kernels/cuda/td_cuda.h"
#endif

td_status td_kernels_create(const char *device, int threads, td_kernels **out) {
  *out = NULL;
  TD_REQUIRE(device != NULL, TD_ERR_USAGE, "no device named (expected \"cpu\" or \"cuda\")");
  if (strcmp(device, "cpu") == 0) {
    TD_CHECK(td_kernels_cpu_create(threads, out));
    return TD_OK;
  }
  if (strcmp(device, "cuda") == 0) {
#ifdef TD_HAVE_CUDA
    TD_CHECK(td_kernels_cuda_create(threads, out));
    return TD_OK;
#else
    TD_FAIL(TD_ERR_UNSUPPORTED,
            "this trident was built without CUDA (configure with -DTD_ENABLE_CUDA=ON)");
#endif
  }
  TD_FAIL(TD_ERR_USAGE, "unknown device \"%s\" (expected \"cpu\" or \"cuda\")", device);
}

int td_kernels_precision_ok(const char *device, const char *precision, char *why, size_t n) {
  if (n) why[0] = '\0';
  if (strcmp(precision, "fp32") == 0) return 1;
  if (strcmp(precision, "bf16") != 0) {
    snprintf(why, n, "unknown precision \"%s\" (expected fp32 or bf16)", precision);
    return 0;
  }
  if (strcmp(device, "cpu") == 0 && !td_kernels_cpu_bf16()) {
    snprintf(why, n,
             "bf16 on run.device: cpu needs the oneDNN matmul engine; this trident was "
             "built with CBLAS (install libdnnl-dev and rebuild, or use training.precision: "
             "fp32)");
    return 0;
  }
  return 1;
}

int td_kernels_host_memory(const char *device) {
  if (device && strcmp(device, "cpu") == 0) return td_kernels_cpu_host_memory();
  if (device && strcmp(device, "cuda") == 0) return 0;
  return 1;
}

void td_kernels_destroy(td_kernels **k) {
  if (!k || !*k) return;
  if ((*k)->destroy) (*k)->destroy(*k);
  *k = NULL;
}
