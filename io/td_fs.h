/* td_fs.h — file-system helpers shared by io/'s writers (checkpoints,
 * TensorBoard events). Implemented in ckpt_files.c. Not collective. */
#ifndef TD_FS_H
#define TD_FS_H

#include "td_error.h"

/* mkdir -p `dir`; `what` names it in messages ("checkpoint folder"):
 * TD_ERR_IO naming the path that could not be made, or that exists and is
 * not a folder. */
td_status td_mkdir_p(const char *dir, const char *what);

#endif
