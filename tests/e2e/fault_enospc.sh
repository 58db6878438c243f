#!/usr/bin/env bash
# fault_enospc.sh TRIDENT WORKDIR PRELOAD [--preload] — the disk fills up
# during a checkpoint save.
#
# checkpoint.dir is on a 16 MiB tmpfs the test mounts (one 10 MB checkpoint of
# the tiny deck fits, two do not). A 2-rank training saves every 2 steps: the
# save of step 2 commits, the save of step 4 runs out of space. The job must
# end with exit 3 and a message naming the file; `latest` must still name
# step 2, whose checksums verify, and no .tmp may be left. After more space is
# given (remount), the same command resumes from step 2 and finishes, and its
# final parameters are bit-identical to an uninterrupted run's.
#
# Where mounting is not possible (not root, no tmpfs), or with --preload,
# PRELOAD (tests/fault/enospc_preload.c, a test-only library, never part of
# trident) makes every write to step_00000004.h5.tmp fail with ENOSPC instead.
# If neither works the test is skipped (exit 77) with the reason.
#
# With --async the run saves with checkpoint.async: true, and the save of
# step 4 must fail in its background writer (its log says it was being
# written in the background), be reported on every rank at a later step
# boundary with the same exit 3 and message, and leave the same state.
# MPIEXEC (default mpiexec).
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 TRIDENT WORKDIR PRELOAD [--preload] [--async]" >&2
  exit 2
fi
preload=$3
force_preload="" async=0
for a in "${@:4}"; do
  case $a in
    --preload) force_preload=--preload ;;
    --async) async=1 ;;
    *) echo "usage: $0 TRIDENT WORKDIR PRELOAD [--preload] [--async]" >&2; exit 2 ;;
  esac
done
if mountpoint -q "$2/small" 2>/dev/null; then umount "$2/small"; fi # a run killed before
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$1" "$2"
mnt=$work/small
mkdir -p "$mnt"
mounted=0
rb_on_exit() { if [ $mounted = 1 ]; then umount "$mnt" 2>/dev/null; fi; }
mode=""
if [ "$force_preload" != --preload ] && mount -t tmpfs -o size=16m tmpfs "$mnt" 2>"$work/mount.err"; then
  mounted=1
  mode="a 16 MiB tmpfs"
elif [ -f "$preload" ]; then
  mode="LD_PRELOAD $(basename "$preload") (writes to step_00000004.h5.tmp fail)"
else
  echo "SKIP: cannot mount a small file system ($(cat "$work/mount.err" 2>/dev/null)) and the" \
    "preload library $preload is missing"
  exit 77
fi
echo "fault_enospc: a full disk through $mode"
fail=0
args=("$src/inputs/tiny.yaml" --set "data.train=$corpus" --set training.steps=6 --set checkpoint.every=2
      --set checkpoint.keep=3 --set checkpoint.resume=auto --set parallel.dp=2 --set parallel.zero=1)
if [ $async = 1 ]; then
  args+=(--set checkpoint.async=true)
  echo "fault_enospc: asynchronous saves (checkpoint.async: true)"
fi

# the full disk
env_full=()
[ $mounted = 0 ] && env_full=(LD_PRELOAD="$preload" TD_ENOSPC_FILE=step_00000004.h5.tmp)
# asynchronous: the metadata (main thread) fits, the background writer's data does not
[ $mounted = 0 ] && [ $async = 1 ] && env_full+=(TD_ENOSPC_THREADS=other)
env "${env_full[@]}" timeout -s KILL 120 "$mpiexec" -n 2 "$trident" train "${args[@]}" \
  --set "checkpoint.dir=$mnt/ckpt" --set "run.out_dir=$work/full" >"$work/full.log" 2>&1 </dev/null
rc=$?
why=""
if [ $rc != 3 ]; then
  why="exit $rc, expected 3"
elif ! grep -q "trident: error: .*step_00000004.h5.tmp" "$work/full.log"; then
  why="the error does not name the checkpoint file"
elif [ $async = 1 ] && ! grep -q "checkpoint: step 4 being written in the background" "$work/full.log"; then
  why="the save of step 4 did not fail in the background (no 'being written in the background' line)"
elif [ $async = 1 ] && ! grep -q "trident: error: .*step_00000004.h5.tmp: cannot write tensor /.*: No space left on device" "$work/full.log"; then
  why="the error is not the background writer's ('cannot write tensor ...: No space left on device')"
elif [ $async = 1 ] && grep -q "failed alone" "$work/full.log"; then
  why="a rank failed alone: the failure was not agreed by every rank"
fi
if [ -n "$why" ]; then
  echo "FAIL full disk: $why"; tail -12 "$work/full.log" | sed 's/^/     | /'; fail=1
else
  echo "ok   full disk: the save of step 4 failed with exit 3:"
  grep -m1 "trident: error:" "$work/full.log" | cut -c1-240 | sed 's/^/     /'
fi
why=""
if [ "$(cat "$mnt/ckpt/latest" 2>/dev/null)" != step_00000002.h5 ]; then
  why="latest is '$(cat "$mnt/ckpt/latest" 2>/dev/null)', expected step_00000002.h5"
elif ls "$mnt/ckpt" | grep -q "\.tmp$"; then
  why="a .tmp was left: $(ls "$mnt/ckpt" | tr '\n' ' ')"
elif ! "$trident" ckpt info "$mnt/ckpt/step_00000002.h5" >"$work/info.log" 2>&1; then
  why="step_00000002.h5 does not verify"
fi
if [ -n "$why" ]; then
  echo "FAIL previous checkpoint: $why"; fail=1
else
  echo "ok   previous checkpoint: latest names step_00000002.h5, which verifies; no .tmp left"
fi

# more space: the same command resumes from step 2 and finishes
[ $mounted = 1 ] && mount -o remount,size=64m "$mnt"
timeout -s KILL 120 "$mpiexec" -n 2 "$trident" train "${args[@]}" --set "checkpoint.dir=$mnt/ckpt" \
  --set "run.out_dir=$work/full" >"$work/resume.log" 2>&1 </dev/null
rc=$?
timeout -s KILL 120 "$mpiexec" -n 2 "$trident" train "${args[@]}" --set "checkpoint.dir=$work/ref/ckpt" \
  --set "run.out_dir=$work/ref" >"$work/ref.log" 2>&1 </dev/null
rc_ref=$?
if [ $rc != 0 ] || ! grep -q "resuming at step 2" "$work/resume.log"; then
  echo "FAIL resume: exit $rc"; tail -8 "$work/resume.log" | sed 's/^/     | /'; fail=1
elif [ $rc_ref != 0 ]; then
  echo "FAIL reference run: exit $rc_ref"; tail -8 "$work/ref.log" | sed 's/^/     | /'; fail=1
elif ! /usr/bin/python3 - "$mnt/ckpt/step_00000006.h5" "$work/ref/ckpt/step_00000006.h5" <<'EOF'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n.startswith(("model/", "optim/")) else None)
bad = [n for n in names if a[n][()].tobytes() != b[n][()].tobytes()]
print(f"     {len(names)} tensors compared, {len(bad)} differ {bad[:3]}")
sys.exit(1 if bad or not names else 0)
EOF
then
  echo "FAIL resume: the resumed run's final tensors differ from an uninterrupted run's"; fail=1
else
  echo "ok   resume: after more space the same command resumed at step 2; final model and moments bit-identical to an uninterrupted run"
fi
exit $fail
