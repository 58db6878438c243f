/* zero.c — ZeRO stages 0–3 over MPI (see td_zero.h for the contract).
 *
 * Staging. When the back-end's buffers are not host memory (k->host_memory
 * 0: a GPU; MPI is never handed device memory) every collective runs on host
 * copies allocated once at creation (z->staged): the device data is copied
 * to the host copy (k->to_host, which waits for the device) just before the
 * non-blocking call is posted, the call works on the host copy, and where
 * the collective writes, the result is copied back (k->to_device) where its
 * request is waited — finish_grad_slot, finish_slot_gather, the request list
 * of stages 0–1 in td_zero_finish_grads — never before. With host memory
 * none of this runs and MPI works on the buffers themselves.
 *
 * Device collectives. With opts.dcomm (NCCL where every rank has a GPU of its
 * own) the same calls go to the device communicator instead: no host copies
 * and no host waits. Each call returns a ticket; the place that waits for an
 * MPI request joins the ticket instead (the back-end's queue waits for the
 * call), so the kernels that read a result, or overwrite a buffer a call
 * reads, are queued behind it.
 *
 * Offload (opts.offload). The fp32 masters of the owned range, both moments
 * and a host copy of the owned gradients live in host memory (pinned where
 * the back-end has host_alloc); the device keeps its working parameters
 * (fp32, or in bf16 only the bf16 copy) and the gradients. At the optimizer
 * step the owned gradients come to the host (stages 2–3: unit by unit during
 * the backward pass, on the back-end's copy stream, as each unit's last
 * reduction lands: finish_grad_slot), the CPU back-end's AdamW
 * (opts.host, its threads) updates the masters and moments there, and the
 * owned parameters go back in the working precision, rounded on the host by
 * the CPU's cast (round to nearest even, as the device's): stages 1–2 then
 * all-gather them on the device as before (in bf16, the bf16 copy: half the
 * bytes). The CPU's and the CUDA back-end's AdamW are the same arithmetic
 * (kernels/cuda/adamw.cu), so the numbers are those of a run without
 * offload, bit for bit. */
#include "parallel/td_zero.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"
#include "td_log.h"

#define MAX_REQ 4096

/* A working buffer holding one unit's gathered parameters (stage 3) or its
 * gradients (stages 2–3). Slots 0 and 1 serve the two persistent units
 * (sized for them); the block slots serve every other unit (sized for the
 * largest of those), so the embedding's size never multiplies. */
typedef struct {
  int unit;          /* unit held, -1 none */
  int busy;          /* acquired and not yet released */
  int pending;       /* a non-blocking collective is in flight */
  int valid;         /* parameters: gathered and current */
  int64_t seq;       /* gradients: when its reduction was launched (launch count) */
  MPI_Request req;
  uint64_t ticket;   /* device collectives: the call in flight */
  float *buf;        /* the largest unit this slot serves (parameters: of type o.pt) */
  float *recv;       /* gradients: this rank's part of the reduce-scatter */
  void *hbuf;        /* staging: host copy of buf (what MPI reads and writes) */
  void *hpart;       /* staging: host copy of this rank's part: gradients the share
                        received (of recv), parameters the part sent */
  int64_t recv_off;  /* where recv goes in the gradient shard */
  int recv_n;
  int last;          /* gradients: launched in the step's last micro-batch (its share is final) */
} slot;

/* Stages 0–1: a reduction in flight and, when staging, the copy back to the
 * device that its completion allows: n floats from host to dev (n 0: none). */
typedef struct {
  MPI_Request req;
  uint64_t ticket; /* device collectives: the call (req unused) */
  float *dev;
  const float *host;
  int64_t n;
} reduction;

/* What the engine allocates, by kind (td_zero_bytes). */
enum { ZB_PARAM, ZB_GRAD, ZB_OPTIM, ZB_WORK, ZB_HOST, ZB_KINDS };

struct td_zero {
  td_zero_opts o;
  td_zero_tensor *tensors;
  int64_t *ub, *ue;
  td_kernels *k;
  td_coll_stats *stats;
  struct td_dcomm *dc;  /* device collectives over dp_comm, or NULL (MPI) */
  uint64_t last_ticket; /* the newest device call (0: none) */
  int *scounts, *sdispls; /* (dp) S and r·S: the parameter all-gather of stages 1–2 */
  int dp, rank;
  int64_t S, npad, own_b, own_e;
  float *params, *grads, *gshard, *m, *v;
  void *p16;         /* bf16 working copy of params (o.pt = TD_DTYPE_BF16), else NULL */
  size_t psz;        /* bytes per handed-out parameter */
  slot pslots[2 + TD_ZERO_BLOCK_SLOTS], gslots[2 + TD_ZERO_BLOCK_SLOTS];
  int nslots;
  /* stage 0/1: outstanding reductions */
  reduction reqs[MAX_REQ];
  int nreq;
  /* staging (k->host_memory 0): host copies MPI works on, allocated once */
  int staged;
  float *hfull;   /* (npad) stages 0–2, dp > 1: the gradient buffer's reductions
                     (stages 0–1), the parameter all-gather (stages 1–2) */
  float *hgshard; /* (S) stage 1, dp > 1: the reduce-scatter's receive side */
  int64_t bucket_lo, bucket_hi; /* stage 0: released range not yet launched */
  int last_micro;
  int step_started; /* the step unit's (opts.step_accum) buffer holds this step's sums */
  int64_t micro;
  int64_t bytes[ZB_KINDS];  /* allocated (or, for a size query, planned) */
  int64_t launches;         /* gradient reductions launched (slot ages) */
  int64_t reuse_min;        /* smallest launches − seq of a reused block slot */
  /* offload (o.offload): host state over the local range [hb, hb + hn) */
  int off;
  td_kernels *hk;  /* the CPU back-end doing the host's arithmetic (o.host) */
  int64_t hb, hn;
  float *hp, *hm, *hv, *hg; /* fp32 masters, moments, the owned gradients' copy */
  void *h16;                /* bf16: the working copy of the owned range, uploaded */
  int streamed;             /* stages 2–3: this step's owned gradients are on their way to hg,
                               unit by unit (k->to_host_async), as their last reduction lands */
  /* overlap_gather: the per-unit parameter all-gathers in flight */
  int ogather;           /* this engine gathers unit by unit after the optimizer */
  MPI_Request *ureq;     /* (nunits) MPI_REQUEST_NULL when none */
  uint64_t *uticket;     /* (nunits) device calls, 0 when none */
  char *upend;           /* (nunits) unit u's gather is in flight */
  int npend;
  int *ucounts;  /* (nunits, dp): elements of unit u in dp rank r's shard */
  int *udispls;  /* (nunits, dp): where they start inside the unit */
};

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

static int unit_empty(const td_zero *z, int u) { return z->ub[u] >= z->ue[u]; }

/* Intersection of unit u with dp rank r's shard: [lo, hi) (lo ≥ hi: empty). */
static void unit_part(const td_zero *z, int u, int r, int64_t *lo, int64_t *hi) {
  *lo = imax(z->ub[u], (int64_t)r * z->S);
  *hi = imin(z->ue[u], (int64_t)(r + 1) * z->S);
}

/* Counts and displacements of unit u over the dp shards (for the v-collectives). */
static td_status unit_counts(td_zero *z, int u) {
  for (int r = 0; r < z->dp; ++r) {
    int64_t lo, hi;
    unit_part(z, u, r, &lo, &hi);
    int64_t c = hi > lo ? hi - lo : 0;
    if (c > INT_MAX) TD_FAIL(TD_ERR_INTERNAL, "unit %d too large for MPI counts", u);
    z->ucounts[(size_t)u * z->dp + r] = (int)c;
    z->udispls[(size_t)u * z->dp + r] = (int)(c > 0 ? lo - z->ub[u] : 0);
  }
  return TD_OK;
}
#define UCOUNTS(z, u) ((z)->ucounts + (size_t)(u) * (z)->dp)
#define UDISPLS(z, u) ((z)->udispls + (size_t)(u) * (z)->dp)

static void count_stats(td_zero *z, td_coll_kind kind, double bytes) {
  if (!z->stats) return;
  z->stats->bytes[kind] += bytes;
  z->stats->calls[kind]++;
}

/* Wait on request *r, charging the wait to the stats. */
static td_status wait_req(td_zero *z, MPI_Request *r, td_coll_kind kind) {
  double t0 = td_now();
  const char *op = kind == TD_COLL_ALLGATHER ? "MPI_Wait (ZeRO-3 all-gather of a unit's parameters)"
                                             : "MPI_Wait (ZeRO reduce-scatter of a unit's gradients)";
  TD_MPI_CHECK(td_watchdog_wait(op, z->o.dp_comm, r));
  if (z->stats) z->stats->ms[kind] += 1e3 * (td_now() - t0);
  return TD_OK;
}

/* Allocate bytes of kind `kind`, counting them; a size query (no back-end)
 * only counts. The one place where the engine's memory is decided. */
static td_status zalloc(td_zero *z, float **p, size_t bytes, int kind, const char *what) {
  z->bytes[kind] += (int64_t)bytes;
  if (!z->k) return TD_OK;
  return z->k->alloc(z->k, (void **)p, bytes, what);
}

/* A host staging buffer (z->staged only), counted as working memory. */
static td_status halloc(td_zero *z, void **p, size_t bytes, const char *what) {
  z->bytes[ZB_WORK] += (int64_t)bytes;
  if (!z->k) return TD_OK;
  return td_alloc(p, bytes, what);
}

/* Offload: host memory for the optimizer's state (pinned when the back-end
 * has it), counted apart from the back-end's memory (ZB_HOST). */
static td_status oalloc(td_zero *z, float **p, size_t bytes, const char *what) {
  z->bytes[ZB_HOST] += (int64_t)bytes;
  if (!z->k) return TD_OK;
  if (z->k->host_alloc) return z->k->host_alloc(z->k, (void **)p, bytes, what);
  return td_alloc((void **)p, bytes, what);
}

static void ofree(td_zero *z, void *p) {
  if (!p) return;
  if (z->k->host_alloc)
    z->k->host_free(z->k, p);
  else
    td_free(p);
}

/* The unit whose gradients accumulate over the step (opts.step_accum). */
static int is_step_unit(const td_zero *z, int u) {
  return z->o.step_accum && u == z->o.persistent_units[0];
}

static int is_persistent(const td_zero *z, int u) {
  return u == z->o.persistent_units[0] || u == z->o.persistent_units[1];
}

/* Elements of the largest unit slot i serves and the largest share of one
 * of them this rank receives in a reduce-scatter (slots 0, 1: persistent
 * units 0, 1; block slots: every other non-empty unit). */
static void slot_need(const td_zero *z, int i, int64_t *elems, int64_t *share) {
  *elems = 0, *share = 0;
  for (int u = 0; u < z->o.nunits; ++u) {
    if (unit_empty(z, u)) continue;
    int serves = i < 2 ? u == z->o.persistent_units[i] : !is_persistent(z, u);
    if (!serves) continue;
    *elems = imax(*elems, z->ue[u] - z->ub[u]);
    *share = imax(*share, UCOUNTS(z, u)[z->rank]);
  }
}

/* Let outstanding non-blocking collectives progress. */
static td_status progress(td_zero *z) {
  int flag = 0;
  if (z->dc) return z->last_ticket ? td_dcomm_test(z->dc, z->last_ticket, &flag) : TD_OK;
  for (int i = 0; i < z->nreq; ++i)
    if (z->reqs[i].req != MPI_REQUEST_NULL)
      TD_MPI_CHECK(MPI_Test(&z->reqs[i].req, &flag, MPI_STATUS_IGNORE));
  for (int u = 0; z->npend > 0 && u < z->o.nunits; ++u)
    if (z->upend[u] && z->ureq[u] != MPI_REQUEST_NULL)
      TD_MPI_CHECK(MPI_Test(&z->ureq[u], &flag, MPI_STATUS_IGNORE));
  for (int i = 0; i < z->nslots; ++i) {
    if (z->pslots[i].pending) TD_MPI_CHECK(MPI_Test(&z->pslots[i].req, &flag, MPI_STATUS_IGNORE));
    if (z->gslots[i].pending) TD_MPI_CHECK(MPI_Test(&z->gslots[i].req, &flag, MPI_STATUS_IGNORE));
  }
  return TD_OK;
}

td_status td_zero_create(const td_zero_opts *o, td_kernels *k, td_coll_stats *stats, td_zero **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_zero *z = calloc(1, sizeof *z);
  if (!z) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  z->o = *o;
  z->k = k, z->stats = stats;
  z->dc = o->dcomm;
  z->staged = o->dcomm ? 0 : k ? !k->host_memory : o->staged;
  if (o->dp_comm == MPI_COMM_NULL && !k && o->group_size > 0) { /* virtual grid: a size query */
    z->dp = o->group_size, z->rank = o->group_rank;
  } else if (MPI_Comm_size(o->dp_comm, &z->dp) != MPI_SUCCESS ||
             MPI_Comm_rank(o->dp_comm, &z->rank) != MPI_SUCCESS) {
    TD_FAIL_GOTO(TD_ERR_MPI, "ZeRO engine: the data-parallel communicator is not usable");
  }
  z->tensors = malloc((size_t)(o->ntensors + 1) * sizeof *z->tensors);
  z->ub = malloc((size_t)(o->nunits + 1) * sizeof(int64_t));
  z->ue = malloc((size_t)(o->nunits + 1) * sizeof(int64_t));
  if (!z->tensors || !z->ub || !z->ue) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  memcpy(z->tensors, o->tensors, (size_t)o->ntensors * sizeof *z->tensors);
  memcpy(z->ub, o->unit_begin, (size_t)o->nunits * sizeof(int64_t));
  memcpy(z->ue, o->unit_end, (size_t)o->nunits * sizeof(int64_t));
  z->o.tensors = z->tensors, z->o.unit_begin = z->ub, z->o.unit_end = z->ue;
  /* shards of S elements, a multiple of 16 floats (64 bytes) */
  z->S = ((o->n + z->dp - 1) / z->dp + 15) / 16 * 16;
  if (z->S == 0) z->S = 16;
  z->npad = z->S * z->dp;
  z->own_b = imin((int64_t)z->rank * z->S, o->n);
  z->own_e = imin((int64_t)(z->rank + 1) * z->S, o->n);
  z->ucounts = calloc((size_t)o->nunits * z->dp + 1, sizeof(int));
  z->udispls = calloc((size_t)o->nunits * z->dp + 1, sizeof(int));
  if (!z->ucounts || !z->udispls) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  z->ureq = malloc((size_t)(o->nunits + 1) * sizeof *z->ureq);
  z->uticket = calloc((size_t)o->nunits + 1, sizeof *z->uticket);
  z->upend = calloc((size_t)o->nunits + 1, 1);
  if (!z->ureq || !z->uticket || !z->upend) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int u = 0; u < o->nunits; ++u) z->ureq[u] = MPI_REQUEST_NULL;
  for (int u = 0; u < o->nunits; ++u)
    if (!unit_empty(z, u)) TD_CHECK_GOTO(unit_counts(z, u));
  z->scounts = calloc((size_t)z->dp, sizeof(int));
  z->sdispls = calloc((size_t)z->dp, sizeof(int));
  if (!z->scounts || !z->sdispls) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int r = 0; r < z->dp; ++r) {
    TD_CHECK_GOTO(td_mpi_count(z->S, &z->scounts[r]));
    TD_CHECK_GOTO(td_mpi_count((int64_t)r * z->S, &z->sdispls[r]));
  }
  int stage = o->stage;
  size_t full = (size_t)z->npad * sizeof(float), shard = (size_t)z->S * sizeof(float);
  z->psz = td_dtype_size(o->pt);
  z->off = o->offload;
  z->ogather = o->overlap_gather && (o->stage == 1 || o->stage == 2) && !o->offload &&
               !z->staged && z->dp > 1 && k != NULL;
  z->hk = o->host;
  if (z->off && k && !z->hk)
    TD_FAIL_GOTO(TD_ERR_INTERNAL, "ZeRO engine: offload without a host back-end");
  /* offload in bf16: the device keeps only the bf16 working copy */
  if (!(z->off && o->pt == TD_DTYPE_BF16))
    TD_CHECK_GOTO(zalloc(z, &z->params, stage < 3 ? full : shard, ZB_PARAM, "parameters"));
  if (o->pt == TD_DTYPE_BF16)
    TD_CHECK_GOTO(zalloc(z, (float **)&z->p16, (stage < 3 ? full : shard) / 2, ZB_PARAM,
                         "bf16 working copy of the parameters"));
  if (stage < 2) TD_CHECK_GOTO(zalloc(z, &z->grads, full, ZB_GRAD, "gradients"));
  if (stage >= 1) TD_CHECK_GOTO(zalloc(z, &z->gshard, shard, ZB_GRAD, "gradient shard"));
  if (z->off) { /* stage 0: the whole local space; else the owned range */
    z->hb = stage == 0 ? 0 : z->own_b;
    z->hn = stage == 0 ? z->npad : z->S;
    size_t hbytes = (size_t)z->hn * sizeof(float);
    TD_CHECK_GOTO(oalloc(z, &z->hp, hbytes, "fp32 master parameters (host, offload)"));
    TD_CHECK_GOTO(oalloc(z, &z->hm, hbytes, "AdamW first moments (host, offload)"));
    TD_CHECK_GOTO(oalloc(z, &z->hv, hbytes, "AdamW second moments (host, offload)"));
    TD_CHECK_GOTO(oalloc(z, &z->hg, hbytes, "owned gradients (host, offload)"));
    if (o->pt == TD_DTYPE_BF16)
      TD_CHECK_GOTO(oalloc(z, (float **)&z->h16, hbytes / 2,
                           "bf16 parameters on their way to the device (host, offload)"));
  } else {
    TD_CHECK_GOTO(zalloc(z, &z->m, stage == 0 ? full : shard, ZB_OPTIM, "AdamW first moments"));
    TD_CHECK_GOTO(zalloc(z, &z->v, stage == 0 ? full : shard, ZB_OPTIM, "AdamW second moments"));
  }
  /* working buffers: slots 0 and 1 for the persistent units, then block slots */
  z->nslots = stage >= 2 ? 2 + TD_ZERO_BLOCK_SLOTS : 0;
  for (int i = 0; i < z->nslots; ++i) {
    slot *ps = &z->pslots[i], *gs = &z->gslots[i];
    ps->unit = gs->unit = -1;
    ps->req = gs->req = MPI_REQUEST_NULL;
    int64_t elems = 0, share = 0;
    slot_need(z, i, &elems, &share);
    size_t ub = (size_t)imax(elems, 1) * sizeof(float), rb = (size_t)imax(share, 1) * sizeof(float);
    if (stage == 3)
      TD_CHECK_GOTO(zalloc(z, &ps->buf, ub / sizeof(float) * z->psz, ZB_WORK,
                           "gathered unit parameters"));
    TD_CHECK_GOTO(zalloc(z, &gs->buf, ub, ZB_WORK, "unit gradients"));
    TD_CHECK_GOTO(zalloc(z, &gs->recv, rb, ZB_WORK, "gradient shard receive buffer"));
    if (!z->staged) continue;
    if (stage == 3) {
      TD_CHECK_GOTO(halloc(z, &ps->hbuf, ub / sizeof(float) * z->psz,
                           "host staging of gathered unit parameters"));
      TD_CHECK_GOTO(halloc(z, &ps->hpart, rb / sizeof(float) * z->psz,
                           "host staging of a unit's parameter shard"));
    }
    TD_CHECK_GOTO(halloc(z, &gs->hbuf, ub, "host staging of unit gradients"));
    TD_CHECK_GOTO(halloc(z, &gs->hpart, rb, "host staging of a gradient shard"));
  }
  if (z->staged && stage <= 2 && z->dp > 1)
    TD_CHECK_GOTO(halloc(z, (void **)&z->hfull, full, "host staging of gradients and parameters"));
  if (z->staged && stage == 1 && z->dp > 1)
    TD_CHECK_GOTO(halloc(z, (void **)&z->hgshard, shard, "host staging of the gradient shard"));
  z->reuse_min = INT64_MAX;
  z->bucket_lo = z->bucket_hi = -1;
done:
  if (st != TD_OK) {
    td_zero_destroy(&z);
    return st;
  }
  *out = z;
  return TD_OK;
}

void td_zero_destroy(td_zero **zp) {
  if (!zp || !*zp) return;
  td_zero *z = *zp;
  *zp = NULL;
  /* A rank failing alone is about to be aborted: waiting for its requests
   * would wait for ranks that never join, and freeing buffers that MPI may
   * still write into is worse. Leave everything to the process's end. */
  int inflight = z->nreq > 0;
  for (int i = 0; i < z->nslots; ++i) inflight |= z->pslots[i].pending || z->gslots[i].pending;
  if (inflight && td_error_alone()) return;
  /* device calls may still read or write the buffers about to be freed */
  if (z->dc && z->last_ticket)
    (void)td_dcomm_wait(z->dc, z->last_ticket, "device collectives (ZeRO engine's end)",
                        z->o.dp_comm, NULL, TD_COLL_ALLREDUCE);
  for (int i = 0; i < z->nreq; ++i)
    if (!z->dc && z->reqs[i].req != MPI_REQUEST_NULL) MPI_Wait(&z->reqs[i].req, MPI_STATUS_IGNORE);
  for (int i = 0; i < z->nslots; ++i) {
    slot *ss[2] = {&z->pslots[i], &z->gslots[i]};
    for (int j = 0; j < 2; ++j) {
      if (ss[j]->pending && !z->dc) MPI_Wait(&ss[j]->req, MPI_STATUS_IGNORE);
      if (z->k && ss[j]->buf) z->k->free(z->k, ss[j]->buf);
      if (z->k && ss[j]->recv) z->k->free(z->k, ss[j]->recv);
      td_free(ss[j]->hbuf);
      td_free(ss[j]->hpart);
    }
  }
  td_free(z->hfull);
  td_free(z->hgshard);
  void *bufs[] = {z->params, z->grads, z->gshard, z->m, z->v, z->p16};
  for (int i = 0; i < 6; ++i)
    if (z->k && bufs[i]) z->k->free(z->k, bufs[i]);
  void *hbufs[] = {z->hp, z->hm, z->hv, z->hg, z->h16};
  for (int i = 0; i < 5; ++i)
    if (z->k) ofree(z, hbufs[i]);
  free(z->ureq), free(z->uticket), free(z->upend);
  free(z->ucounts);
  free(z->udispls);
  free(z->scounts);
  free(z->sdispls);
  free(z->tensors);
  free(z->ub);
  free(z->ue);
  free(z);
}

/* The bf16 working copy after the masters changed (no-op in float32). */
static td_status refresh16(td_zero *z) {
  if (!z->p16 || !z->params) return TD_OK; /* offload in bf16: uploaded in bf16 */
  int64_t n = z->o.stage < 3 ? z->npad : z->S;
  return z->k->cast(z->k, z->p16, TD_DTYPE_BF16, z->params, TD_DTYPE_F32, n);
}

/* Offload in bf16: the device's working copy at element `at` (of its
 * buffer) = n floats of host src rounded to bf16 on the host, through h16 in
 * pieces of hn. */
static td_status upload16(td_zero *z, int64_t at, const float *src, int64_t n) {
  for (int64_t off = 0; off < n; off += z->hn) {
    int64_t c = imin(n - off, z->hn);
    TD_CHECK(z->hk->cast(z->hk, z->h16, TD_DTYPE_BF16, src + off, TD_DTYPE_F32, c));
    TD_CHECK(z->k->to_device(z->k, (char *)z->p16 + (size_t)(at + off) * 2, z->h16,
                             (size_t)c * 2));
    TD_CHECK(z->k->sync(z->k)); /* h16 is rewritten next: the copy may still read it */
  }
  return TD_OK;
}

/* Offload: elements of the owned range on the host (stage 0: all n) and where
 * its first one sits in the device's parameter buffers. */
static int64_t off_count(const td_zero *z) {
  return z->o.stage == 0 ? z->o.n : imax(z->own_e - z->own_b, 0);
}
static int64_t off_dev_at(const td_zero *z) {
  return z->o.stage < 3 ? z->hb : 0;
}

/* Offload: the owned masters to the device's working parameters (fp32, or
 * rounded to bf16 on the host); stages 1–2 gather the rest afterwards. */
static td_status offload_upload(td_zero *z) {
  int64_t c = off_count(z), at = off_dev_at(z);
  if (c == 0) return TD_OK;
  if (!z->params) return upload16(z, at, z->hp, c);
  TD_CHECK(z->k->to_device(z->k, z->params + at, z->hp, (size_t)c * sizeof(float)));
  return z->k->sync(z->k); /* hp is rewritten by the next step's AdamW */
}

td_status td_zero_set_params(td_zero *z, const float *host) {
  td_kernels *k = z->k;
  TD_CHECK(td_zero_settle(z)); /* no gather may land on what is set here */
  for (int i = 0; i < z->nslots; ++i) z->pslots[i].valid = 0; /* gathered copies are stale */
  if (z->off) {
    int64_t c = off_count(z);
    memset(z->hp, 0, (size_t)z->hn * sizeof(float));
    if (c > 0) memcpy(z->hp, host + z->hb, (size_t)c * sizeof(float));
    if (!z->params) { /* bf16: only the working copy on the device */
      if (z->o.stage < 3) return upload16(z, 0, host, z->o.n);
      TD_CHECK(k->zero(k, z->p16, (size_t)z->S * 2));
      return upload16(z, 0, host + z->own_b, off_count(z));
    }
  }
  if (z->o.stage < 3) {
    TD_CHECK(k->to_device(k, z->params, host, (size_t)z->o.n * sizeof(float)));
    return refresh16(z);
  }
  TD_CHECK(k->zero(k, z->params, (size_t)z->S * sizeof(float)));
  if (z->own_e > z->own_b)
    TD_CHECK(k->to_device(k, z->params, host + z->own_b, (size_t)(z->own_e - z->own_b) * sizeof(float)));
  return refresh16(z);
}

float *td_zero_params_full(td_zero *z) { return z->o.stage < 3 ? z->params : NULL; }
float *td_zero_grads_full(td_zero *z) { return z->o.stage < 2 ? z->grads : NULL; }
void td_zero_owned(const td_zero *z, int64_t *b, int64_t *e) { *b = z->own_b, *e = z->own_e; }
int td_zero_state_on_host(const td_zero *z) { return z->off || (z->k && z->k->host_memory); }
float *td_zero_owned_params(td_zero *z) {
  if (z->off) return z->o.stage == 0 ? z->hp + z->own_b : z->hp;
  return z->o.stage < 3 ? z->params + z->own_b : z->params;
}
float *td_zero_owned_grads(td_zero *z) { return z->o.stage == 0 ? z->grads + z->own_b : z->gshard; }
float *td_zero_owned_exp_avg(td_zero *z) {
  float *m = z->off ? z->hm : z->m;
  return z->o.stage == 0 ? m + z->own_b : m;
}
float *td_zero_owned_exp_avg_sq(td_zero *z) {
  float *v = z->off ? z->hv : z->v;
  return z->o.stage == 0 ? v + z->own_b : v;
}

void td_zero_moments(td_zero *z, float **m, float **v, int64_t *b, int64_t *e) {
  *m = z->off ? z->hm : z->m, *v = z->off ? z->hv : z->v;
  *b = z->o.stage == 0 ? 0 : z->own_b;
  *e = z->o.stage == 0 ? z->o.n : z->own_e;
}

void td_zero_bytes(const td_zero *z, int64_t *param, int64_t *grad, int64_t *optim, int64_t *work) {
  *param = z->bytes[ZB_PARAM], *grad = z->bytes[ZB_GRAD];
  *optim = z->bytes[ZB_OPTIM], *work = z->bytes[ZB_WORK];
}

int64_t td_zero_host_bytes(const td_zero *z) { return z->bytes[ZB_HOST]; }

int64_t td_zero_slot_reuse_min(const td_zero *z) { return z->reuse_min; }

/* ---- stage 3: gathering units ------------------------------------------------ */

static td_status start_gather(td_zero *z, int u, slot *s) {
  int64_t lo, hi;
  unit_part(z, u, z->rank, &lo, &hi);
  size_t at = (size_t)(hi > lo ? lo - (int64_t)z->rank * z->S : 0);
  const void *send = z->p16 ? (const void *)((const char *)z->p16 + at * 2) : z->params + at;
  MPI_Datatype t = z->p16 ? MPI_UINT16_T : MPI_FLOAT;
  s->unit = u;
  s->valid = 0;
  s->pending = 1;
  if (z->dc) {
    TD_CHECK(td_dcomm_allgatherv(z->dc, send, s->buf, UCOUNTS(z, u), UDISPLS(z, u), z->o.pt,
                                 z->stats, &s->ticket));
    z->last_ticket = s->ticket;
    return TD_OK;
  }
  TD_CHECK(z->k->sync(z->k));
  void *recv = s->buf;
  if (z->staged) { /* gather host copies; finish_slot_gather copies the unit back */
    int c = UCOUNTS(z, u)[z->rank];
    if (c > 0) TD_CHECK(z->k->to_host(z->k, s->hpart, send, (size_t)c * z->psz));
    send = s->hpart, recv = s->hbuf;
  }
  TD_MPI_CHECK(MPI_Iallgatherv(send, UCOUNTS(z, u)[z->rank], t, recv, UCOUNTS(z, u),
                              UDISPLS(z, u), t, z->o.dp_comm, &s->req));
  count_stats(z, TD_COLL_ALLGATHER,
              (double)(z->ue[u] - z->ub[u]) * (double)z->psz * (double)(z->dp - 1) / z->dp);
  return TD_OK;
}

static td_status finish_slot_gather(td_zero *z, slot *s) {
  if (s->pending) {
    if (z->dc)
      TD_CHECK(td_dcomm_join(z->dc, s->ticket));
    else
      TD_CHECK(wait_req(z, &s->req, TD_COLL_ALLGATHER));
    s->pending = 0;
    if (z->staged) /* the gathered unit back to the device */
      TD_CHECK(z->k->to_device(z->k, s->buf, s->hbuf,
                               (size_t)(z->ue[s->unit] - z->ub[s->unit]) * z->psz));
    s->valid = 1;
  }
  return TD_OK;
}

/* The parameter slot for unit u (stage 3): its dedicated one if persistent,
 * else the block slot holding it or a free block slot. */
static td_status param_slot(td_zero *z, int u, int start, slot **out) {
  *out = NULL;
  if (is_persistent(z, u)) {
    *out = &z->pslots[u == z->o.persistent_units[0] ? 0 : 1];
  } else {
    for (int i = 2; i < z->nslots; ++i)
      if (z->pslots[i].unit == u) *out = &z->pslots[i];
    if (!*out) {
      if (!start) return TD_OK;
      for (int i = 2; i < z->nslots && !*out; ++i)
        if (!z->pslots[i].busy && !z->pslots[i].pending) *out = &z->pslots[i];
      if (!*out) return TD_OK; /* no free slot to prefetch into */
    }
  }
  slot *s = *out;
  if (s->unit != u || (!s->valid && !s->pending)) {
    if (!start) {
      *out = NULL;
      return TD_OK;
    }
    TD_CHECK(start_gather(z, u, s));
  }
  return TD_OK;
}

/* The next non-empty block unit after u in the order of the pass. */
static int next_unit(const td_zero *z, int u, int backward) {
  for (int v = backward ? u - 1 : u + 1; v >= 0 && v < z->o.nunits; v = backward ? v - 1 : v + 1)
    if (!unit_empty(z, v) && !is_persistent(z, v)) return v;
  return -1;
}

/* ---- gradients of stages 2–3 ----------------------------------------------------- */

static td_status finish_grad_slot(td_zero *z, slot *s) {
  if (!s->pending) return TD_OK;
  if (z->dc)
    TD_CHECK(td_dcomm_join(z->dc, s->ticket));
  else
    TD_CHECK(wait_req(z, &s->req, TD_COLL_REDUCE_SCATTER));
  s->pending = 0;
  if (s->recv_n > 0 && z->staged) /* the reduced share back to the device */
    TD_CHECK(z->k->to_device(z->k, s->recv, s->hpart, (size_t)s->recv_n * sizeof(float)));
  if (s->recv_n > 0)
    TD_CHECK(z->k->add(z->k, z->gshard + s->recv_off, z->gshard + s->recv_off, s->recv, s->recv_n));
  if (z->streamed && s->last && s->recv_n > 0) /* final: to the host while backward goes on */
    TD_CHECK(z->k->to_host_async(z->k, z->hg + s->recv_off, z->gshard + s->recv_off,
                                 (size_t)s->recv_n * sizeof(float)));
  return TD_OK;
}

static td_status grad_slot(td_zero *z, int u, slot **out) {
  slot *s = NULL;
  if (is_step_unit(z, u) && z->step_started) { /* accumulating over the step */
    *out = &z->gslots[0];
    return TD_OK;
  }
  if (is_step_unit(z, u)) z->step_started = 1;
  if (is_persistent(z, u)) {
    s = &z->gslots[u == z->o.persistent_units[0] ? 0 : 1];
  } else {
    /* a free block slot, else the one whose reduction was launched longest
     * ago (most likely complete): the others keep theirs in flight */
    for (int i = 2; i < z->nslots; ++i) {
      slot *c = &z->gslots[i];
      if (c->busy) continue;
      if (!s || c->unit < 0 || (s->unit >= 0 && c->seq < s->seq)) s = c;
      if (s->unit < 0) break;
    }
    if (!s) TD_FAIL(TD_ERR_INTERNAL, "no free gradient buffer for unit %d", u);
    if (s->unit >= 0 && z->launches - s->seq < z->reuse_min) z->reuse_min = z->launches - s->seq;
  }
  TD_CHECK(finish_grad_slot(z, s));
  s->unit = u;
  TD_CHECK(z->k->zero(z->k, s->buf, (size_t)(z->ue[u] - z->ub[u]) * sizeof(float)));
  *out = s;
  return TD_OK;
}

static td_status launch_grad_slot(td_zero *z, int u, slot *s) {
  int64_t lo, hi;
  unit_part(z, u, z->rank, &lo, &hi);
  s->recv_n = hi > lo ? (int)(hi - lo) : 0;
  s->recv_off = hi > lo ? lo - (int64_t)z->rank * z->S : 0;
  s->pending = 1;
  s->last = z->last_micro;
  s->seq = z->launches++;
  if (z->dc) {
    TD_CHECK(td_dcomm_reduce_scatterv(z->dc, s->buf, s->recv, UCOUNTS(z, u), UDISPLS(z, u),
                                      z->stats, &s->ticket));
    z->last_ticket = s->ticket;
    return TD_OK;
  }
  TD_CHECK(z->k->sync(z->k));
  float *send = s->buf, *recv = s->recv;
  if (z->staged) { /* reduce the host copy; finish_grad_slot copies the share back */
    TD_CHECK(z->k->to_host(z->k, s->hbuf, s->buf, (size_t)(z->ue[u] - z->ub[u]) * sizeof(float)));
    send = s->hbuf, recv = s->hpart;
  }
  TD_MPI_CHECK(MPI_Ireduce_scatter(send, recv, UCOUNTS(z, u), MPI_FLOAT, MPI_SUM,
                                   z->o.dp_comm, &s->req));
  count_stats(z, TD_COLL_REDUCE_SCATTER,
              (double)(z->ue[u] - z->ub[u]) * 4.0 * (double)(z->dp - 1) / z->dp);
  return TD_OK;
}

/* ---- stages 0–1: reductions of the full gradient buffer ---------------------------- */

/* Record request r; when staging, td_zero_finish_grads copies n floats from
 * host to dev once it is complete (n 0: nothing to copy). */
static td_status push_req(td_zero *z, MPI_Request r, float *dev, const float *host, int64_t n) {
  if (z->nreq == MAX_REQ) TD_FAIL(TD_ERR_INTERNAL, "too many outstanding reductions");
  reduction *x = &z->reqs[z->nreq++];
  x->req = r, x->dev = dev, x->host = host, x->n = z->staged ? n : 0;
  x->ticket = 0;
  return TD_OK;
}

/* Record device call `ticket` (stages 0–1), joined by td_zero_finish_grads. */
static td_status push_ticket(td_zero *z, uint64_t ticket) {
  if (z->nreq == MAX_REQ) TD_FAIL(TD_ERR_INTERNAL, "too many outstanding reductions");
  reduction *x = &z->reqs[z->nreq++];
  x->req = MPI_REQUEST_NULL, x->ticket = ticket, x->n = 0;
  z->last_ticket = ticket;
  return TD_OK;
}

static td_status launch_bucket(td_zero *z) {
  if (z->bucket_lo < 0 || z->bucket_hi <= z->bucket_lo) return TD_OK;
  int64_t lo = z->bucket_lo, n = z->bucket_hi - z->bucket_lo;
  z->bucket_lo = z->bucket_hi = -1;
  if (z->dc) {
    for (int64_t off = 0; off < n; off += INT_MAX) {
      uint64_t t = 0;
      TD_CHECK(td_dcomm_allreduce(z->dc, z->grads + lo + off, imin(n - off, INT_MAX), 0, z->stats,
                                  &t));
      TD_CHECK(push_ticket(z, t));
    }
    return TD_OK;
  }
  TD_CHECK(z->k->sync(z->k));
  /* staging: the bucket's range of the host copy, reduced there */
  float *buf = z->staged ? z->hfull : z->grads;
  if (z->staged) TD_CHECK(z->k->to_host(z->k, buf + lo, z->grads + lo, (size_t)n * sizeof(float)));
  for (int64_t off = 0; off < n; off += INT_MAX) {
    int c = (int)imin(n - off, INT_MAX);
    MPI_Request r;
    TD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf + lo + off, c, MPI_FLOAT, MPI_SUM,
                                z->o.dp_comm, &r));
    TD_CHECK(push_req(z, r, z->grads + lo + off, buf + lo + off, c));
  }
  count_stats(z, TD_COLL_ALLREDUCE, 2.0 * (double)(z->dp - 1) / z->dp * (double)n * 4.0);
  return TD_OK;
}

/* Stage 1: reduce-scatter unit u of the full gradients straight into the shard. */
static td_status launch_unit_rs(td_zero *z, int u) {
  int64_t lo, hi;
  unit_part(z, u, z->rank, &lo, &hi);
  int64_t at = hi > lo ? lo - (int64_t)z->rank * z->S : 0;
  MPI_Request r = MPI_REQUEST_NULL;
  if (z->dc) {
    uint64_t t = 0;
    TD_CHECK(td_dcomm_reduce_scatterv(z->dc, z->grads + z->ub[u], z->gshard + at, UCOUNTS(z, u),
                                      UDISPLS(z, u), z->stats, &t));
    return push_ticket(z, t);
  }
  TD_CHECK(z->k->sync(z->k));
  /* staging: the unit's range of the host copy into the host shard */
  float *send = z->grads + z->ub[u], *recv = z->gshard + at;
  if (z->staged) {
    send = z->hfull + z->ub[u], recv = z->hgshard + at;
    TD_CHECK(z->k->to_host(z->k, send, z->grads + z->ub[u],
                           (size_t)(z->ue[u] - z->ub[u]) * sizeof(float)));
  }
  TD_MPI_CHECK(MPI_Ireduce_scatter(send, recv, UCOUNTS(z, u), MPI_FLOAT, MPI_SUM,
                                   z->o.dp_comm, &r));
  TD_CHECK(push_req(z, r, z->gshard + at, recv, UCOUNTS(z, u)[z->rank]));
  count_stats(z, TD_COLL_REDUCE_SCATTER,
              (double)(z->ue[u] - z->ub[u]) * 4.0 * (double)(z->dp - 1) / z->dp);
  return TD_OK;
}

/* ---- the parameters' gather, unit by unit (overlap_gather) -------------------------- */

/* After the optimizer (stages 1–2): every non-empty unit's all-gather of the
 * owned parts, in place, in unit order (the order the forward first uses
 * them: their launch order is their completion order on every rank). In
 * bf16 the working copy is what is gathered (the owned range rounded first:
 * the same bits a full gather and refresh16 give), at half the bytes; the
 * fp32 parameters outside the owned range are then not current, and nothing
 * reads them (the forward reads the working copy, the optimizer and the
 * checkpoints the owned range). */
static td_status launch_unit_gathers(td_zero *z) {
  td_kernels *k = z->k;
  int b16 = z->p16 != NULL;
  if (b16 && z->own_e > z->own_b)
    TD_CHECK(k->cast(k, (char *)z->p16 + (size_t)z->own_b * 2, TD_DTYPE_BF16,
                     z->params + z->own_b, TD_DTYPE_F32, z->own_e - z->own_b));
  TD_CHECK(k->sync(k)); /* AdamW's (and the cast's) writes are what is sent */
  size_t es = b16 ? 2 : 4;
  char *base = b16 ? (char *)z->p16 : (char *)z->params;
  for (int u = 0; u < z->o.nunits; ++u) {
    if (unit_empty(z, u)) continue;
    char *at = base + (size_t)z->ub[u] * es;
    if (z->dc) {
      uint64_t t = 0;
      TD_CHECK(td_dcomm_allgatherv(z->dc, at + (size_t)UDISPLS(z, u)[z->rank] * es, at,
                                   UCOUNTS(z, u), UDISPLS(z, u),
                                   b16 ? TD_DTYPE_BF16 : TD_DTYPE_F32, z->stats, &t));
      z->uticket[u] = t, z->last_ticket = t;
    } else {
      TD_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, at, UCOUNTS(z, u),
                                   UDISPLS(z, u), b16 ? MPI_UINT16_T : MPI_FLOAT,
                                   z->o.dp_comm, &z->ureq[u]));
      count_stats(z, TD_COLL_ALLGATHER,
                  (double)(z->ue[u] - z->ub[u]) * (double)es * (double)(z->dp - 1) / z->dp);
    }
    z->upend[u] = 1, z->npend++;
  }
  return TD_OK;
}

/* Unit u's gather has landed. */
static td_status finish_unit_gather(td_zero *z, int u) {
  if (z->dc) {
    TD_CHECK(td_dcomm_join(z->dc, z->uticket[u]));
    z->uticket[u] = 0;
  } else {
    double t0 = td_now();
    TD_MPI_CHECK(td_watchdog_wait("MPI_Wait (ZeRO all-gather of a unit's updated parameters)",
                                  z->o.dp_comm, &z->ureq[u]));
    if (z->stats) z->stats->ms[TD_COLL_ALLGATHER] += 1e3 * (td_now() - t0);
  }
  z->upend[u] = 0, z->npend--;
  return TD_OK;
}

td_status td_zero_settle(td_zero *z) {
  for (int u = 0; z->npend > 0 && u < z->o.nunits; ++u)
    if (z->upend[u]) TD_CHECK(finish_unit_gather(z, u));
  return TD_OK;
}

/* ---- the step ------------------------------------------------------------------------ */

td_status td_zero_begin_step(td_zero *z, int64_t micro) {
  td_kernels *k = z->k;
  if (z->grads) TD_CHECK(k->zero(k, z->grads, (size_t)z->npad * sizeof(float)));
  if (z->gshard) TD_CHECK(k->zero(k, z->gshard, (size_t)z->S * sizeof(float)));
  z->micro = micro;
  z->last_micro = micro <= 1;
  z->step_started = 0;
  /* offload at stages 2–3: each unit's owned gradients leave the device as
   * soon as they are final (finish_grad_slot), on the copy stream */
  z->streamed = z->off && z->o.stage >= 2 && k->to_host_async && k->host_wait;
  return TD_OK;
}

td_status td_zero_begin_micro(td_zero *z, int64_t j) {
  z->last_micro = j == z->micro - 1;
  return TD_OK;
}

td_status td_zero_acquire(td_zero *z, int u, int backward, void **param, float **grad) {
  int stage = z->o.stage;
  if (unit_empty(z, u)) return TD_OK;
  TD_CHECK(progress(z));
  if (!param) {
    /* gradients only (the W of a split backward) */
  } else if (stage < 3) {
    if (z->upend[u]) TD_CHECK(finish_unit_gather(z, u));
    *param = z->p16 ? (void *)((char *)z->p16 + (size_t)z->ub[u] * 2) : z->params + z->ub[u];
  } else {
    slot *s = NULL;
    TD_CHECK(param_slot(z, u, 1, &s));
    if (!s) TD_FAIL(TD_ERR_INTERNAL, "no working buffer for unit %d", u);
    TD_CHECK(finish_slot_gather(z, s));
    s->busy++;
    *param = s->buf;
    int nu = next_unit(z, u, backward);
    if (nu >= 0 && !is_persistent(z, u)) { /* prefetch the next block */
      slot *ns = NULL;
      TD_CHECK(param_slot(z, nu, 1, &ns));
    }
  }
  if (backward && grad) {
    if (stage < 2) {
      *grad = z->grads + z->ub[u];
    } else {
      slot *g = NULL;
      TD_CHECK(grad_slot(z, u, &g));
      g->busy = 1;
      *grad = g->buf;
    }
  }
  return TD_OK;
}

/* Unit u's gradients of this micro-batch are final: launch their reduction
 * (stages 2–3 every micro-batch, stages 0–1 after the last). */
static td_status release_grads(td_zero *z, int u) {
  int stage = z->o.stage;
  if (stage >= 2) {
    slot *g = NULL;
    for (int i = 0; i < z->nslots; ++i)
      if (z->gslots[i].unit == u && z->gslots[i].busy) g = &z->gslots[i];
    if (!g) TD_FAIL(TD_ERR_INTERNAL, "unit %d released without its gradient buffer", u);
    g->busy = 0;
    if (is_step_unit(z, u) && !z->last_micro) return TD_OK; /* reduced after the last */
    TD_CHECK(launch_grad_slot(z, u, g));
    TD_CHECK(td_test_fail_point("zero_release")); /* a reduction in flight */
  } else if (z->last_micro && z->dp > 1) {
    if (stage == 1) {
      TD_CHECK(launch_unit_rs(z, u));
    } else {
      if (z->bucket_lo >= 0 && z->ue[u] != z->bucket_lo) TD_CHECK(launch_bucket(z));
      if (z->bucket_lo < 0) z->bucket_hi = z->ue[u];
      z->bucket_lo = z->ub[u];
      if ((double)(z->bucket_hi - z->bucket_lo) * 4.0 >= z->o.bucket_bytes)
        TD_CHECK(launch_bucket(z));
    }
  }
  return TD_OK;
}

td_status td_zero_release(td_zero *z, int u, int backward) {
  int stage = z->o.stage;
  if (unit_empty(z, u)) return TD_OK;
  if (stage == 3) {
    for (int i = 0; i < z->nslots; ++i)
      if (z->pslots[i].unit == u && z->pslots[i].busy) z->pslots[i].busy--;
  }
  if (backward) TD_CHECK(release_grads(z, u));
  TD_CHECK(progress(z));
  return TD_OK;
}

td_status td_zero_release_grads(td_zero *z, int u) {
  if (unit_empty(z, u)) return TD_OK;
  TD_CHECK(release_grads(z, u));
  TD_CHECK(progress(z));
  return TD_OK;
}

td_status td_zero_progress(td_zero *z) { return progress(z); }

td_status td_zero_end_forward(td_zero *z) {
  for (int i = 0; i < z->nslots; ++i) TD_CHECK(finish_slot_gather(z, &z->pslots[i]));
  return TD_OK;
}

td_status td_zero_finish_grads(td_zero *z) {
  int stage = z->o.stage;
  if (stage <= 1) {
    TD_CHECK(launch_bucket(z));
    double t0 = td_now();
    for (int i = 0; i < z->nreq; ++i) {
      reduction *x = &z->reqs[i];
      if (z->dc) {
        TD_CHECK(td_dcomm_join(z->dc, x->ticket));
        continue;
      }
      TD_MPI_CHECK(td_watchdog_wait("MPI_Wait (data-parallel gradient reduction)", z->o.dp_comm,
                                    &x->req));
      if (x->n > 0) /* staging: the reduced host copy back to the device */
        TD_CHECK(z->k->to_device(z->k, x->dev, x->host, (size_t)x->n * sizeof(float)));
    }
    if (z->stats && z->nreq > 0) /* no collective, no time in one (one rank) */
      z->stats->ms[stage == 0 ? TD_COLL_ALLREDUCE : TD_COLL_REDUCE_SCATTER] +=
          1e3 * (td_now() - t0);
    z->nreq = 0;
    if (stage == 1 && z->dp == 1) /* one replica: the shard is the whole buffer */
      TD_CHECK(z->k->add(z->k, z->gshard, z->gshard, z->grads, z->o.n));
  }
  for (int i = 0; i < z->nslots; ++i) {
    TD_CHECK(finish_grad_slot(z, &z->gslots[i]));
    TD_CHECK(finish_slot_gather(z, &z->pslots[i]));
  }
  return TD_OK;
}

td_status td_zero_grad_sumsq(td_zero *z, double *out) {
  double s = 0.0;
  const float *g = td_zero_owned_grads(z);
  for (int i = 0; i < z->o.ntensors; ++i) {
    const td_zero_tensor *t = &z->tensors[i];
    int64_t lo = imax(t->offset, z->own_b), hi = imin(t->offset + t->numel, z->own_e);
    if (!t->in_norm || hi <= lo) continue;
    double x = 0.0;
    TD_CHECK(z->k->sumsq(z->k, g + (lo - z->own_b), hi - lo, &x));
    s += x;
  }
  TD_CHECK(td_coll_allreduce_f64(z->o.dp_comm, &s, 1, MPI_SUM, z->stats));
  *out = s;
  return TD_OK;
}

td_status td_zero_grad_sumsq_tensors(td_zero *z, double *per) {
  const float *g = td_zero_owned_grads(z);
  for (int i = 0; i < z->o.ntensors; ++i) {
    const td_zero_tensor *t = &z->tensors[i];
    int64_t lo = imax(t->offset, z->own_b), hi = imin(t->offset + t->numel, z->own_e);
    per[i] = 0.0;
    if (t->in_norm && hi > lo) TD_CHECK(z->k->sumsq(z->k, g + (lo - z->own_b), hi - lo, &per[i]));
  }
  if (z->o.ntensors > 0)
    TD_CHECK(td_coll_allreduce_f64(z->o.dp_comm, per, z->o.ntensors, MPI_SUM, z->stats));
  return TD_OK;
}

td_status td_zero_scale_grads(td_zero *z, float s) {
  if (z->streamed) { /* the copies read the shard: let them land, copy again after */
    TD_CHECK(z->k->host_wait(z->k));
    z->streamed = 0;
  }
  if (z->o.stage == 0) return z->k->scale(z->k, z->grads, s, z->npad);
  return z->k->scale(z->k, z->gshard, s, z->S);
}

#define OFFLOAD_PIECE ((int64_t)1 << 20) /* elements updated and uploaded at a time */

static td_status gather(td_zero *z, int upload);

/* Offload: the owned gradients to the host, AdamW there on the masters and
 * moments (the CPU back-end's kernel and threads, tensor by tensor as on the
 * device, in pieces), each piece's parameters sent back to the device in the
 * working precision as soon as it is updated: the copy of one piece (from
 * pinned memory, asynchronous) overlaps the update of the next, which writes
 * other bytes of hp and h16. Then the stage's gather. */
static td_status offload_adamw(td_zero *z, float gscale, float lr, float beta1, float beta2,
                               float eps, float wd, int64_t t) {
  td_kernels *k = z->k, *h = z->hk;
  int64_t c = off_count(z), dev = off_dev_at(z);
  if (z->streamed) /* stages 2–3: sent unit by unit during the backward pass */
    TD_CHECK(k->host_wait(k));
  else if (c > 0)
    TD_CHECK(k->to_host(k, z->hg, z->o.stage == 0 ? z->grads : z->gshard,
                        (size_t)c * sizeof(float)));
  z->streamed = 0;
  for (int i = 0; i < z->o.ntensors; ++i) {
    const td_zero_tensor *x = &z->tensors[i];
    int64_t lo = imax(x->offset, z->hb), hi = imin(x->offset + x->numel, z->hb + c);
    for (int64_t a = lo; a < hi; a += OFFLOAD_PIECE) {
      int64_t at = a - z->hb, n = imin(hi - a, OFFLOAD_PIECE);
      TD_CHECK(h->adamw(h, z->hp + at, z->hg + at, z->hm + at, z->hv + at, n, gscale, lr, beta1,
                        beta2, eps, x->decay ? wd : 0.0f, t));
      if (z->params) {
        TD_CHECK(k->to_device(k, z->params + dev + at, z->hp + at, (size_t)n * sizeof(float)));
      } else {
        uint16_t *b = (uint16_t *)z->h16 + at;
        TD_CHECK(h->cast(h, b, TD_DTYPE_BF16, z->hp + at, TD_DTYPE_F32, n));
        TD_CHECK(k->to_device(k, (uint16_t *)z->p16 + dev + at, b, (size_t)n * 2));
      }
    }
  }
  TD_CHECK(k->sync(k)); /* hp and h16 are rewritten by the next step */
  return gather(z, 0);
}

td_status td_zero_adamw(td_zero *z, float gscale, float lr, float beta1, float beta2, float eps,
                        float wd, int64_t t) {
  int stage = z->o.stage;
  td_kernels *k = z->k;
  TD_CHECK(td_zero_settle(z)); /* a unit no forward used: its gather still in flight */
  if (z->off) return offload_adamw(z, gscale, lr, beta1, beta2, eps, wd, t);
  for (int i = 0; i < z->o.ntensors; ++i) {
    const td_zero_tensor *x = &z->tensors[i];
    int64_t lo = x->offset, hi = x->offset + x->numel;
    if (stage > 0) lo = imax(lo, z->own_b), hi = imin(hi, z->own_e);
    if (hi <= lo) continue;
    int64_t base = stage == 0 ? 0 : z->own_b;
    float *p = stage < 3 ? z->params + lo : z->params + (lo - z->own_b);
    const float *g = stage == 0 ? z->grads + lo : z->gshard + (lo - base);
    TD_CHECK(k->adamw(k, p, g, z->m + (lo - base), z->v + (lo - base), hi - lo, gscale, lr, beta1,
                      beta2, eps, x->decay ? wd : 0.0f, t));
  }
  if (z->ogather)
    TD_CHECK(launch_unit_gathers(z)); /* waited for unit by unit as the forward uses them */
  else if (stage == 1 || stage == 2)
    TD_CHECK(td_zero_gather_params(z)); /* refreshes the working copy */
  else
    TD_CHECK(refresh16(z));
  for (int i = 0; i < z->nslots; ++i) z->pslots[i].valid = 0; /* parameters changed */
  return TD_OK;
}

/* Offload in bf16, stages 1–2: all-gather the bf16 working copy (each
 * rank's owned range was uploaded into it). Collective on dp_comm. */
static td_status gather16(td_zero *z) {
  int c = 0;
  TD_CHECK(td_mpi_count(z->S, &c));
  char *own = (char *)z->p16 + (size_t)z->rank * (size_t)z->S * 2;
  if (z->dc) {
    uint64_t t = 0;
    TD_CHECK(td_dcomm_allgatherv(z->dc, own, z->p16, z->scounts, z->sdispls, TD_DTYPE_BF16,
                                 z->stats, &t));
    z->last_ticket = t;
    return td_dcomm_join(z->dc, t);
  }
  TD_CHECK(z->k->sync(z->k));
  double t0 = td_now();
  MPI_Request r = MPI_REQUEST_NULL;
  /* staging: the owned range into the host copy (hfull holds npad floats:
   * room for npad bf16), gathered there, all copied back */
  char *buf = z->staged ? (char *)z->hfull : (char *)z->p16;
  if (z->staged)
    TD_CHECK(z->k->to_host(z->k, buf + (size_t)z->rank * (size_t)z->S * 2, own, (size_t)z->S * 2));
  TD_MPI_CHECK(td_watched(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c,
                                         MPI_UINT16_T, z->o.dp_comm, &r),
                          "MPI_Allgather (ZeRO bf16 parameters after the offloaded optimizer)",
                          z->o.dp_comm, &r));
  if (z->staged) TD_CHECK(z->k->to_device(z->k, z->p16, buf, (size_t)z->npad * 2));
  if (z->stats) {
    z->stats->ms[TD_COLL_ALLGATHER] += 1e3 * (td_now() - t0);
    count_stats(z, TD_COLL_ALLGATHER, (double)z->npad * 2.0 * (double)(z->dp - 1) / z->dp);
  }
  return TD_OK;
}

td_status td_zero_gather_params(td_zero *z) { return gather(z, 1); }

/* upload: offload's owned masters go to the device first (not when AdamW
 * has just sent them piece by piece). */
static td_status gather(td_zero *z, int upload) {
  int stage = z->o.stage;
  TD_CHECK(td_zero_settle(z));
  for (int i = 0; i < z->nslots; ++i) z->pslots[i].valid = 0; /* gathered copies are stale */
  if (z->off && upload) TD_CHECK(offload_upload(z)); /* the owned masters are the host's */
  if (z->dp == 1) return refresh16(z);
  if ((stage == 1 || stage == 2) && !z->params) {
    TD_CHECK(gather16(z));
  } else if ((stage == 1 || stage == 2) && z->dc) {
    uint64_t t = 0;
    float *own = z->params + (int64_t)z->rank * z->S;
    TD_CHECK(td_dcomm_allgatherv(z->dc, own, z->params, z->scounts, z->sdispls, TD_DTYPE_F32,
                                 z->stats, &t));
    z->last_ticket = t;
    TD_CHECK(td_dcomm_join(z->dc, t));
  } else if (stage == 1 || stage == 2) {
    TD_CHECK(z->k->sync(z->k));
    double t0 = td_now();
    int c = 0;
    TD_CHECK(td_mpi_count(z->S, &c));
    MPI_Request r = MPI_REQUEST_NULL;
    /* staging: the owned shard into the host copy, gathered there, all copied back */
    float *buf = z->staged ? z->hfull : z->params, *own = z->params + (int64_t)z->rank * z->S;
    if (z->staged)
      TD_CHECK(z->k->to_host(z->k, buf + (int64_t)z->rank * z->S, own,
                             (size_t)z->S * sizeof(float)));
    TD_MPI_CHECK(td_watched(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c,
                                           MPI_FLOAT, z->o.dp_comm, &r),
                            "MPI_Allgather (ZeRO parameters after the optimizer)", z->o.dp_comm,
                            &r));
    if (z->staged)
      TD_CHECK(z->k->to_device(z->k, z->params, buf, (size_t)z->npad * sizeof(float)));
    if (z->stats) {
      z->stats->ms[TD_COLL_ALLGATHER] += 1e3 * (td_now() - t0);
      count_stats(z, TD_COLL_ALLGATHER, (double)z->npad * 4.0 * (double)(z->dp - 1) / z->dp);
    }
  }
  for (int i = 0; i < z->nslots; ++i) z->pslots[i].valid = 0;
  return refresh16(z);
}

