/* td_tb.h — TensorBoard event files: scalars written by one process.
 *
 * A file `events.out.tfevents.<unix time>.<host>` in a folder, as
 * TensorFlow's summary writer names it, holding TFRecord records: u64 length
 * (little-endian), u32 masked CRC32C of those 8 bytes, the payload, u32
 * masked CRC32C of the payload. Each payload is an `Event` protobuf
 * (tensorflow/core/util/event.proto): wall_time 1 (double), step 2 (int64),
 * file_version 3 (string, the first record: "brain.Event:2"), summary 5
 * (Summary: value 1, repeated; Value: tag 1, simple_value 2 (float)),
 * session_log 7 (SessionLog: status 1, START = 1; field 6 is the deprecated
 * log_message). Hand-encoded: trident
 * writes nothing else of protobuf.
 *
 * A writer is not collective: one rank opens, writes and closes it. */
#ifndef TD_TB_H
#define TD_TB_H

#include <stdint.h>

#include "td_error.h"

typedef struct td_tb td_tb;

/* Create `dir` (and its parents) if needed and open a new event file in it
 * whose first record is the file-version event. A folder that already holds
 * event files keeps them: TensorBoard reads every file of a folder as one
 * run. When `resumed_from` (the checkpoint's step) > 0 a SessionLog START
 * event at step resumed_from + 1 — the first step this run trains and logs —
 * follows, which tells TensorBoard to drop the points of earlier files at
 * steps >= that step (a run that died after its last checkpoint logged steps
 * it will train again) and keep the checkpoint's own step. On failure *out
 * is NULL and the status names the file. */
td_status td_tb_open(const char *dir, int64_t resumed_from, td_tb **out);

/* One event at `step` holding n scalars (tags[i], values[i]); wall time now.
 * The record is flushed to the file before returning. */
td_status td_tb_scalars(td_tb *tb, int64_t step, int n, const char *const *tags,
                        const double *values);

/* The file's path (for messages). */
const char *td_tb_path(const td_tb *tb);

/* Close the file and free the writer; accepts NULL and sets *tb = NULL. */
void td_tb_close(td_tb **tb);

/* CRC32C (Castagnoli) of n bytes and its TFRecord mask:
 * ((crc >> 15) | (crc << 17)) + 0xA282EAD8. Exposed for the unit test. */
uint32_t td_tb_crc32c(const void *data, size_t n);
uint32_t td_tb_masked_crc(const void *data, size_t n);

#endif
