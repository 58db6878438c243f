#!/usr/bin/env bash
# dataset_change.sh TRIDENT WORKDIR
#
# The dataset changed while a 2-rank training reads it (issue 12, "Injected
# faults"; docs/architecture.md invariants 3 and 5). A trident dataset prepared from the
# license texts (4,196 windows of 65 tokens) is trained on at dp 2 with
# logging every step; after step 3 is logged the file is
#   1. truncated to 30 % of its size (truncate -s);
#   2. overwritten in place: (a) random bytes over the stored tokens of every
#      chunk but the first and last (dd conv=notrunc; HDF5's own metadata is
#      left alone), (b) `cp` of a different, smaller dataset over it (the
#      same inode, truncated and rewritten);
#   3. replaced by rename (mv of another dataset onto its name): the open
#      file handles still read the old file (a new inode), so the run must
#      finish normally;
#   4. a nanoGPT .bin token file truncated (the pread path).
# Cases 1, 2 and 4 must end within $limit s of the change with exit 2 and
# one "trident: error:" line naming the file and the window: the ranks agree
# on a window one of them could not read before the step's collectives, so
# no rank fails alone (an MPI_Abort's exit code is the launcher's to choose:
# MPICH's hydra reported 1 when the other rank died of its SIGHUP); case 3 with
# exit 0 and every step trained. Never a hang (a timeout kills the job and
# fails the case), never a crash (no "Segmentation", "core dumped" or
# sanitizer text).
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
limit=${TD_CHANGE_LIMIT:-30}
t_start=$SECONDS
echo "dataset_change: the dataset truncated, overwritten or replaced under a 2-rank training"

# another dataset: the license texts reversed line by line, only the first
# third (a different and smaller file)
other=$work/other.h5
if [ ! -f "$other" ]; then
  find /usr/share/common-licenses -type f | LC_ALL=C sort | xargs cat | tac >"$work/other.txt"
  head -c 120000 "$work/other.txt" >"$work/other_part.txt"
  "$trident" prepare --out "$other.tmp" --val-fraction 0.1 "$work/other_part.txt" >/dev/null &&
    mv -f "$other.tmp" "$other" || ck_abort "cannot prepare $other"
fi

# change_case NAME STEPS EXPECT ACTION — train a fresh copy of the corpus
# (or of a .bin made from it: NAME bin_*) for STEPS steps at dp 2; after step
# 3 run ACTION (a function given the file); judge the end.
change_case() {
  local name=$1 steps=$2 expect=$3 action=$4
  local dir=$work/$name data
  rm -rf "$dir"
  mkdir -p "$dir"
  case $name in
    bin_*)
      data=$dir/tokens.bin
      "$py" -c '
import sys, h5py, numpy as np
np.asarray(h5py.File(sys.argv[1], "r")["tokens"][()], dtype="<u2").tofile(sys.argv[2])
' "$corpus" "$data" || ck_abort "cannot write $data" ;;
    *)
      data=$dir/data.h5
      cp "$corpus" "$data" ;;
  esac
  local log=$dir/log
  local cmd=("$mpiexec" -n 2 "$trident" train "$deck" --set "data.train=$data"
             --set "data.val=$corpus" --set parallel.dp=2 --set "training.steps=$steps"
             --set schedule.warmup=1 --set logging.every=1 --set eval.every=0
             --set checkpoint.every=0 --set checkpoint.resume=never --set "run.out_dir=$dir/run")
  echo "+ ${cmd[*]}" >"$log"
  timeout -k 5 $((limit + 60)) "${cmd[@]}" >>"$log" 2>&1 </dev/null &
  local pid=$! waited=0
  while ! grep -qE "^step +3/" "$log" && kill -0 $pid 2>/dev/null && [ $waited -lt 600 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if ! grep -qE "^step +3/" "$log"; then
    wait $pid
    fail "$name: the run did not reach step 3 (exit $?)"
    ck_show_log "$log"
    return
  fi
  local t0
  t0=$(date +%s.%N)
  "$action" "$data" || { fail "$name: the change itself failed"; kill $pid; wait $pid; return; }
  # wait for the end, at most $limit s after the change
  local rc=0 killed=0
  while kill -0 $pid 2>/dev/null; do
    if [ "$(echo "$(date +%s.%N) - $t0 > $limit" | bc)" = 1 ]; then
      killed=1
      kill -TERM $pid 2>/dev/null # timeout(1) passes it on, and KILLs 5 s later
      break
    fi
    sleep 0.1
  done
  wait $pid || rc=$?
  local dt why=() line
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  [ $killed = 0 ] || why+=("still running ${limit} s after the change (hang?): killed")
  grep -qiE "segmentation|core dumped|AddressSanitizer|LeakSanitizer|runtime error:|stack smashing|double free" \
    "$log" && why+=("crash or sanitizer text in the output")
  line=$(grep -m1 "trident: error:" "$log")
  local last
  last=$(grep -oE "^step +[0-9]+/" "$log" | tail -n1 | tr -dc '0-9')
  if [ "$expect" = 0 ]; then
    [ $rc = 0 ] || why+=("exit $rc, expected 0")
    [ "$last" = "$steps" ] || why+=("last step logged ${last:-none}, expected $steps")
    [ -z "$line" ] || why+=("an error was reported")
  else
    [ $rc = 2 ] || why+=("exit $rc, expected 2")
    grep -q "this rank failed alone" "$log" && why+=("a rank failed alone (the error was not agreed)")
    [ -n "$line" ] || why+=("no 'trident: error:' line")
    grep -qF -- "$(basename "$data")" <<<"$line" || why+=("the error does not name the file")
    grep -qiE "window [0-9]+" <<<"$line" || why+=("the error does not name the window")
  fi
  if [ ${#why[@]} = 0 ]; then
    pass "$name: exit $rc $(printf '%.1f' "$dt") s after the change (step ${last:-?} was the last logged)${line:+: ${line#*trident: error: }}"
  else
    fail "$name: $(printf '%s; ' "${why[@]}")"
    grep -v "^+ " "$log" | tail -n 12 | sed 's/^/     | /'
  fi
}

act_truncate() { truncate -s $(($(stat -c %s "$1") * 3 / 10)) "$1"; }
act_garbage() {
  # random bytes over the stored tokens of the middle chunks
  "$py" - "$1" <<'EOF'
import os, sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    d = f["tokens"]
    n = d.id.get_num_chunks()
    spans = [(i.byte_offset, i.size) for i in (d.id.get_chunk_info(k) for k in range(1, n - 1))]
fd = os.open(path, os.O_WRONLY)
for off, size in spans:
    os.pwrite(fd, os.urandom(size), off)
os.close(fd)
EOF
}
act_cp_other() { cp "$other" "$1"; }
act_rename() { cp "$other" "$1.new" && mv -f "$1.new" "$1"; }

change_case truncate 1000 2 act_truncate
change_case garbage 1000 2 act_garbage
change_case cp_other 1000 2 act_cp_other
change_case rename 30 0 act_rename
change_case bin_truncate 1000 2 act_truncate
info "total $((SECONDS - t_start)) s"
ck_finish
