/* registry.c — the one place back-ends are registered: picks the ops table
 * for the device named by the deck. The CUDA back-end is a module,
 * libtrident_cuda.so, loaded on first use (dlopen): trident itself links no
 * CUDA library, so a CPU run does not pay for loading cuBLASLt and NCCL
 * (~0.2 s of every process start) and the same binary runs where they are
 * not installed. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/td_kernels.h"

#ifdef TD_HAVE_CUDA
/* The module's entry points (kernels/cuda/td_cuda.h). */
static struct {
  int tried;
  void *handle;
  char why[768];
  td_status (*create)(int, td_kernels **);
  int (*devices)(void);
  td_status (*select)(int);
  int (*nccl)(void); /* optional: a module without it has no NCCL */
  int (*info)(int *, double *); /* optional */
} g_cuda;

/* Load the module once: $TD_CUDA_MODULE, else libtrident_cuda.so beside the
 * executable or one folder up (test programs), else the build tree's. */
static int cuda_module(void) {
  if (g_cuda.tried) return g_cuda.handle != NULL;
  g_cuda.tried = 1;
  char exe[PATH_MAX], cand[3][PATH_MAX + 64];
  int n = 0;
  const char *env = getenv("TD_CUDA_MODULE");
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (env && *env) {
    snprintf(cand[n++], sizeof cand[0], "%s", env);
  } else {
    if (len > 0) {
      exe[len] = '\0';
      char *slash = strrchr(exe, '/');
      if (slash) *slash = '\0';
      snprintf(cand[n++], sizeof cand[0], "%s/libtrident_cuda.so", exe);
      snprintf(cand[n++], sizeof cand[0], "%s/../libtrident_cuda.so", exe);
    }
    snprintf(cand[n++], sizeof cand[0], "%s", TD_CUDA_MODULE_PATH);
  }
  snprintf(g_cuda.why, sizeof g_cuda.why, "not found (looked for %s)", cand[0]);
  for (int i = 0; i < n; i++) {
    if (access(cand[i], R_OK) != 0) continue;
    g_cuda.handle = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
    if (!g_cuda.handle) snprintf(g_cuda.why, sizeof g_cuda.why, "%s", dlerror());
    break; /* the first module found is the one: its error is the message */
  }
  if (!g_cuda.handle) return 0;
  *(void **)&g_cuda.create = dlsym(g_cuda.handle, "td_kernels_cuda_create");
  *(void **)&g_cuda.devices = dlsym(g_cuda.handle, "td_kernels_cuda_devices");
  *(void **)&g_cuda.select = dlsym(g_cuda.handle, "td_kernels_cuda_select");
  *(void **)&g_cuda.nccl = dlsym(g_cuda.handle, "td_kernels_cuda_nccl");
  *(void **)&g_cuda.info = dlsym(g_cuda.handle, "td_kernels_cuda_info");
  if (!g_cuda.create || !g_cuda.devices || !g_cuda.select) {
    snprintf(g_cuda.why, sizeof g_cuda.why, "%s lacks an entry point (a module of another "
             "trident version?)", TD_CUDA_MODULE_PATH);
    dlclose(g_cuda.handle);
    g_cuda.handle = NULL;
    return 0;
  }
  return 1;
}
#endif

int td_kernels_gpu_count(void) {
#ifdef TD_HAVE_CUDA
  return cuda_module() ? g_cuda.devices() : 0;
#else
  return 0;
#endif
}

int td_kernels_gpu_info(int *sms, double *mem_bytes) {
#ifdef TD_HAVE_CUDA
  return cuda_module() && g_cuda.info ? g_cuda.info(sms, mem_bytes) : 0;
#else
  (void)sms, (void)mem_bytes;
  return 0;
#endif
}

int td_kernels_gpu_nccl(void) {
#ifdef TD_HAVE_CUDA
  return cuda_module() && g_cuda.nccl ? g_cuda.nccl() : 0;
#else
  return 0;
#endif
}

td_status td_kernels_gpu_select(int ordinal) {
#ifdef TD_HAVE_CUDA
  if (cuda_module()) TD_CHECK(g_cuda.select(ordinal));
#else
  (void)ordinal;
#endif
  return TD_OK;
}

td_status td_kernels_create(const char *device, int threads, td_kernels **out) {
  *out = NULL;
  TD_REQUIRE(device != NULL, TD_ERR_USAGE, "no device named (expected \"cpu\" or \"cuda\")");
  if (strcmp(device, "cpu") == 0) {
    TD_CHECK(td_kernels_cpu_create(threads, out));
    return TD_OK;
  }
  if (strcmp(device, "cuda") == 0) {
#ifdef TD_HAVE_CUDA
    if (!cuda_module())
      TD_FAIL(TD_ERR_UNSUPPORTED,
              "run.device: cuda: cannot load the CUDA back-end module libtrident_cuda.so: %s "
              "(is the CUDA toolkit's library folder on LD_LIBRARY_PATH? TD_CUDA_MODULE names "
              "the module's path)",
              g_cuda.why[0] ? g_cuda.why : "not found");
    TD_CHECK(g_cuda.create(threads, out));
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
