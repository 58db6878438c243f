/* prepare_internal.h — between io/prepare.c and io/prepare_records.c. Not
 * part of the library's interface. */
#ifndef TD_PREPARE_INTERNAL_H
#define TD_PREPARE_INTERNAL_H

#include <hdf5.h>
#include <stdint.h>

#include "td_error.h"

/* One split's document starts, /documents (val 0) or /val_documents (1),
 * from one process: the starts[0..n) (increasing, in the whole token
 * stream) inside the split's tokens [lo, hi), made relative to lo; 0 first
 * when the split begins inside a document. */
td_status td_prepare__split_documents(hid_t f, const int64_t *starts, int64_t n, int64_t lo,
                                      int64_t hi, int val);

#endif
