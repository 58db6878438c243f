/* td_checkpoint.h — save and load the trainer's state (docs/architecture.md,
 * "Checkpoint file (format 1)") on any grid. */
#ifndef TD_CHECKPOINT_H
#define TD_CHECKPOINT_H

#include <stddef.h>

#include "app/train/td_trainer.h"

/* Save step t->step to checkpoint.dir (temporary name, commit, `latest`,
 * keep). The committed path goes to path_out. Collective on the world. */
td_status td_trainer_save(td_trainer *t, char *path_out, size_t cap);
/* Load a checkpoint written by any grid: parameters, and with load_optim the
 * AdamW moments, step, tokens seen and sampler position. The deck's model
 * must match the checkpoint's. Collective on the world. */
td_status td_trainer_load(td_trainer *t, const char *path, int load_optim);
/* checkpoint.resume: auto (latest if present), never, or a path. Collective. */
td_status td_trainer_resume(td_trainer *t);

#endif
