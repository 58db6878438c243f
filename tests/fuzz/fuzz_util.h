/* fuzz_util.h — what the libFuzzer harnesses of tests/fuzz share: a private
 * scratch folder on tmpfs (removed at exit) and writing an input into it. */
#ifndef TD_FUZZ_UTIL_H
#define TD_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The scratch folder, created on first use under $TD_FUZZ_SCRATCH, else
 * /dev/shm (or $TMPDIR when /dev/shm is missing), and removed with everything
 * in it at a normal exit (a crashing run leaves it: run.sh points
 * TD_FUZZ_SCRATCH at a folder it removes). */
const char *td_fuzz_dir(void);
/* buf = "<scratch>/<name>". */
void td_fuzz_path(char *buf, size_t cap, const char *name);
/* Write n bytes to path (create or truncate); aborts on failure, which is a
 * harness fault, not a finding. */
void td_fuzz_write(const char *path, const void *data, size_t n);
/* rm -rf of path's contents (path itself stays). */
void td_fuzz_clear(const char *path);

#endif
