# robust_lib.sh — what the robustness tests (fault_*.sh, memory_model.sh,
# mpmd_env.sh) share; sourced, not run.
#
#   rb_init TRIDENT WORKDIR   checks the arguments, sets trident, work (emptied,
#                             absolute), src, mpiexec, corpus (the licenses
#                             prepared into WORKDIR/corpus.h5), exports one
#                             OpenMP thread per rank, and on exit kills every
#                             process whose command line names WORKDIR (the
#                             ranks of jobs started there) and runs the
#                             function rb_on_exit if the script defines one
#   rb_elapsed START          seconds since START (date +%s.%N), one decimal
#   rb_rank_pid LOG JOB STEP DIR RANK
#                             wait (60 s at most) until LOG shows step STEP or
#                             the job (pid JOB) ends, then print the pid of
#                             rank RANK of the job whose run.out_dir is DIR
#                             (MPICH's PMI_RANK or Open MPI's
#                             OMPI_COMM_WORLD_RANK in its environment), or
#                             nothing

rb_cleanup() {
  local p
  for p in $(pgrep -f -- "$work/" 2>/dev/null); do
    [ "$p" = $$ ] && continue
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  if declare -F rb_on_exit >/dev/null; then rb_on_exit; fi
}

rb_init() {
  if [ $# -lt 2 ]; then
    echo "usage: $0 TRIDENT WORKDIR" >&2
    exit 2
  fi
  trident=$1
  work=$2
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mpiexec=${MPIEXEC:-mpiexec}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  export HWLOC_PLUGINS_BLACKLIST=${HWLOC_PLUGINS_BLACKLIST:-hwloc_pci}
  rm -rf "$work"
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
  trap rb_cleanup EXIT
  corpus=$work/corpus.h5
  "$trident" prepare --out "$corpus" --val-fraction 0.1 /usr/share/common-licenses >/dev/null ||
    exit 1
}

rb_elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

rb_rank_pid() {
  local log=$1 job=$2 step=$3 dir=$4 rank=$5 p
  for _ in $(seq 600); do
    grep -q "^step *$step/" "$log" 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  for p in $(pgrep -f -- "run.out_dir=$dir"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
        grep -qxE "(PMI_RANK|OMPI_COMM_WORLD_RANK)=$rank"; then echo "$p"; fi
  done | head -1
}
