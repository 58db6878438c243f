#!/usr/bin/env bash
# broken_build.sh WORKDIR — a compile error stops everything (jobs/deps.sh
# td_build, used by the README's two commands):
#  1. incremental: a small tree built once by td_build, then broken — the
#     rebuild returns non-zero, shows the compiler's error with its file and
#     line, and says the build FAILED (the old binary is still there, and
#     nothing may run it as new);
#  2. the real scripts on a broken copy of this repository (git's files, one
#     syntax error in common/log.c): `bash jobs/quickstart.sh` and
#     `TD_TEST_STAGES=main bash tests/run.sh` both exit non-zero with the
#     compiler's error shown, before training or testing anything.
set -uo pipefail
work=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

# 1. incremental, on a small tree with the same jobs/deps.sh
mkdir -p small/jobs
cp "$src/jobs/deps.sh" small/jobs/
cat >small/CMakeLists.txt <<'CM'
cmake_minimum_required(VERSION 3.20)
project(small C)
add_executable(trident main.c)
CM
printf 'int main(void) { return 0; }\n' >small/main.c
(cd small && source jobs/deps.sh && td_build build) >small1.log 2>&1 ||
  { cat small1.log; bad "the small tree does not build"; }
printf 'int main(void) {\n  int x = ;\n  return x;\n}\n' >small/main.c
rc=0
(cd small && source jobs/deps.sh && td_build build) >small2.log 2>&1 || rc=$?
if [ $rc != 0 ] && grep -q "main.c:2:[0-9]*: error" small2.log && grep -q "build: FAILED" small2.log &&
   [ -x small/build/trident ]; then
  ok "an incremental build that stops at a compile error fails (exit $rc), the error shown: $(grep -m1 'main.c:2' small2.log)"
else
  bad "incremental build of a broken tree: exit $rc"
  tail -5 small2.log
fi

# 2. the README's commands on a broken copy of the repository
mkdir -p tree
(cd "$src" && git ls-files -z | xargs -0 tar cf -) | (cd tree && tar xf -) ||
  { bad "cannot copy the repository's files"; echo "$pass passed, $fail failed"; exit 1; }
printf '\nstatic int td_broken_on_purpose = ;\n' >>tree/common/log.c
line=$(wc -l <tree/common/log.c)
# tests/run.sh first: it configures build/ (the slow part, once); the
# quickstart then finds the configuration and fails at the same compile
for cmd in "env TD_TEST_STAGES=main bash tests/run.sh" "bash jobs/quickstart.sh"; do
  rc=0
  (cd tree && timeout 600 $cmd) >run.log 2>&1 </dev/null || rc=$?
  if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "common/log.c:$line:[0-9]*: error" run.log &&
     ! grep -qE "== quickstart: train|== tests/run.sh: ctest" run.log; then
    ok "$cmd on a broken tree: exit $rc before training or testing, the error shown: $(grep -m1 "log.c:$line" run.log | sed 's|.*/common/|common/|')"
  else
    bad "$cmd on a broken tree: exit $rc"
    tail -8 run.log
  fi
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
