/* td_checkpoint.h — save and load the trainer's state (docs/architecture.md,
 * "Checkpoint file (format 1)") on any grid. */
#ifndef TD_CHECKPOINT_H
#define TD_CHECKPOINT_H

#include <stddef.h>

#include "app/train/td_trainer.h"

/* Save step t->step to checkpoint.dir (temporary name, commit, `latest`,
 * keep). The committed path goes to path_out. Collective on the world. */
td_status td_trainer_save(td_trainer *t, char *path_out, size_t cap);
/* checkpoint.async: allocate the staging buffer (the owned state's three
 * fp32 buffers, td_mem_plan.ckpt) before training starts. Collective. */
td_status td_trainer_save_prepare(td_trainer *t);
/* checkpoint.async: save step t->step in the background (a save still in
 * flight is finished first). Returns once the state is copied and the
 * file's metadata made; the commit comes with td_trainer_save_finish.
 * Collective on the world. */
td_status td_trainer_save_async(td_trainer *t);
/* Whether this rank's background writer is still writing. Not collective:
 * the ranks agree on it (any busy) before td_trainer_save_finish. */
int td_trainer_save_busy(const td_trainer *t);
/* Whether a background save is in flight (the same on every rank). */
int td_trainer_save_inflight(const td_trainer *t);
/* Wait for the background save in flight, if any, and commit it (exit 3
 * on every rank if its writing failed anywhere; `latest` then still names
 * the previous checkpoint). Collective on the world. */
td_status td_trainer_save_finish(td_trainer *t);
/* The end of training (td_trainer_run): wait for a writer still running
 * and abandon its save (the .tmp removed; collective unless this rank
 * failed alone), and free the staging buffer, before the back-end whose
 * pinned memory it may be. */
void td_trainer_save_drop(td_trainer *t);
/* Load a checkpoint written by any grid: parameters, and with load_optim the
 * AdamW moments, step, tokens seen and sampler position. The deck's model
 * must match the checkpoint's. Collective on the world. */
td_status td_trainer_load(td_trainer *t, const char *path, int load_optim);
/* checkpoint.resume: auto (latest if present), never, or a path. Collective. */
td_status td_trainer_resume(td_trainer *t);

#endif
