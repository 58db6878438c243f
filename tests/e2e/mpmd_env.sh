#!/usr/bin/env bash
# mpmd_env.sh TRIDENT WORKDIR — ranks launched with different environments
# (issue 12, defect 5: a decision that leads to a collective is made
# collectively, never from one rank's environment alone).
#
# An MPMD launch (mpiexec -n 1 A : -n 1 B, what a site wrapper or a
# heterogeneous job does) gives rank 0 OMP_NUM_THREADS=1 and
# TD_CKPT_COLLECTIVE_MB=0 (collective checkpoint I/O for every tensor) and
# rank 1 neither. Threads are chosen per rank, but the node split behind the
# default is made on every rank; the checkpoint mode is rank 0's, broadcast.
# Before, rank 0 skipped MPI_Comm_split_type that rank 1 entered and the
# ranks disagreed on collective vs independent writes: the job hung. Now the
# 2-rank job (dp 2, ZeRO-3, a checkpoint every 3 steps) must finish within
# 120 s with exit 0 and the same final checkpoint, bit for bit, as the same
# grid launched with one environment.  MPIEXEC (default mpiexec, MPICH's
# hydra: the `:` MPMD syntax).
set -uo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"
unset OMP_NUM_THREADS # each side of the launch sets its own
args=("$src/inputs/tiny.yaml" --set "data.train=$corpus" --set parallel.dp=2 --set parallel.zero=3
      --set training.steps=6 --set checkpoint.every=3 --set run.threads=0)
fail=0
start=$(date +%s.%N)
timeout -s KILL 120 "$mpiexec" \
  -n 1 env OMP_NUM_THREADS=1 TD_CKPT_COLLECTIVE_MB=0 "$trident" train "${args[@]}" --set "run.out_dir=$work/mpmd" : \
  -n 1 env -u OMP_NUM_THREADS -u TD_CKPT_COLLECTIVE_MB "$trident" train "${args[@]}" --set "run.out_dir=$work/mpmd" \
  >"$work/mpmd.log" 2>&1 </dev/null
rc=$?
secs=$(rb_elapsed "$start")
if [ $rc = 137 ]; then
  echo "FAIL mpmd: the job hung (killed after 120 s)"; tail -5 "$work/mpmd.log"; exit 1
elif [ $rc != 0 ]; then
  echo "FAIL mpmd: exit $rc"; tail -10 "$work/mpmd.log" | sed 's/^/     | /'; exit 1
fi
echo "ok   mpmd: ranks with different OMP_NUM_THREADS and TD_CKPT_COLLECTIVE_MB trained to the end in $secs s"
OMP_NUM_THREADS=1 timeout -s KILL 120 "$mpiexec" -n 2 "$trident" train "${args[@]}" \
  --set "run.out_dir=$work/same" >"$work/same.log" 2>&1 </dev/null || {
  echo "FAIL reference run"; tail -5 "$work/same.log"; exit 1; }
if /usr/bin/python3 "$src/tests/e2e/compare_runs.py" "$work/same" "$work/mpmd" --bitwise >"$work/compare.log"; then
  echo "ok   mpmd: losses, gradient norms and final parameters bit-identical to one environment"
else
  echo "FAIL mpmd: differs from the same grid with one environment"; tail -8 "$work/compare.log"; fail=1
fi
exit $fail
