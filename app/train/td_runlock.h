/* td_runlock.h — one training run per checkpoint folder.
 *
 * `trident train` claims checkpoint.dir before it builds anything:
 *   - a lock file, checkpoint.dir/trident.lock, created exclusively by rank
 *     0 and holding "host PID job started" (job: $SLURM_JOB_ID or "-"),
 *     its modification time refreshed every TD_LOCK_REFRESH_S seconds by a
 *     thread of rank 0 while the run lives, removed when it ends. A second
 *     run into the same folder is refused at start (exit 2) naming the
 *     holder. A lock is stale, and taken over with a note, when its holder
 *     is this host's PID that no longer exists, when it carries this Slurm
 *     job's id (a requeued job), or when it was not refreshed for
 *     TD_LOCK_STALE_S seconds (a holder on a host that died). A holder on
 *     this host whose PID still runs gets TD_LOCK_WAIT_S seconds to end
 *     (a job that just failed may still be taking its ranks down) before
 *     the run is refused;
 *   - with checkpoint.resume: never, a folder that holds an earlier run's
 *     checkpoints (step_*.h5 or `latest`) is refused (exit 2: resume it,
 *     train into another folder, or set checkpoint.overwrite: true), and
 *     with checkpoint.overwrite: true those checkpoints are deleted first;
 *   - a checkpoint folder that cannot be made or written is exit 2 naming
 *     checkpoint.dir.
 * Rank 0 decides; every rank gets the same status (collective). */
#ifndef TD_RUNLOCK_H
#define TD_RUNLOCK_H

#include "app/deck/td_app.h"
#include "app/deck/td_config.h"

#define TD_LOCK_REFRESH_S 30
#define TD_LOCK_STALE_S 120
#define TD_LOCK_WAIT_S 10 /* a holder on this host still running: wait this long for it to end */

typedef struct td_runlock td_runlock;

/* Collective. *out is NULL on ranks other than 0 and on failure. */
td_status td_runlock_claim(td_app *app, const td_config *c, td_runlock **out);
/* Stop refreshing and remove the lock (rank 0; NULL accepted). Not collective. */
void td_runlock_release(td_runlock **l);

#endif
