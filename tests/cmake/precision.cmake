# precision.cmake — training.precision: bf16 (docs/architecture.md, "Precision").
#
# bf16_grid_*: grid invariance in bf16 (tests/e2e/grid_invariance.sh, the
# tiny deck 20 steps, both sides bf16). The rounding points are the same on
# every grid, but the float32 values rounded there are not bit-identical
# (dp sums gradients in another order, tp splits matmul sums), and a value
# one float32 ulp from a bf16 rounding boundary rounds the other way: a
# 2^-8 relative step that float32 never takes. Measured (dp 2, ZeRO 0/1/3,
# pp 2, tp 2, dp 2 × tp 2 ZeRO-3, against the single rank): loss ≤ 3.7e-5
# (dp, pp, ZeRO) and 7.9e-5 (tp), grad_norm ≤ 1.3e-3 (dp, pp, ZeRO) and
# 3.2e-3 (tp), final parameters ≤ 4.8e-3 (dp, pp, ZeRO) and 1.6e-2 (tp) of
# each tensor's max|p| — against bf16 vs fp32 on ONE grid: loss 1.2e-3,
# grad_norm 4.5e-2, parameters 1.0e-1. Bounds: loss 1e-4 (dp, pp, ZeRO) and
# 1e-3 (tp); grad_norm 3e-3 and 1e-2; parameters 1.5e-2 and 5e-2. The same
# grid twice is bit-identical (bf16_twice_dp2_zero3).
set(BF16 --set training.precision=bf16)
set(BF16_TOL --norm-rtol 3e-3 --param-rtol 1.5e-2)
set(BF16_TOL_TP --loss-rtol 1e-3 --norm-rtol 1e-2 --param-rtol 5e-2)
foreach(g "dp2_zero1;2,1,1,1" "dp2_zero3;2,1,1,3" "pp2_1f1b;1,1,2,0")
  list(GET g 0 name)
  list(GET g 1 grid)
  td_add_grid_test(NAME bf16_grid_${name} LABELS precision
    ARGS ${BF16_TOL} ${TD_GRID_BIN} ${TD_GRID_WORK} bf16_grid_${name} ${TD_GRID_REF} ${grid} ${BF16})
endforeach()
foreach(g "tp2;1,2,1,0" "dp2_tp2_zero3;2,2,1,3")
  list(GET g 0 name)
  list(GET g 1 grid)
  td_add_grid_test(NAME bf16_grid_${name} LABELS precision
    ARGS ${BF16_TOL_TP} ${TD_GRID_BIN} ${TD_GRID_WORK} bf16_grid_${name} ${TD_GRID_REF} ${grid} ${BF16})
endforeach()
td_add_grid_test(NAME bf16_twice_dp2_zero3 LABELS precision
  ARGS --twice ${TD_GRID_BIN} ${TD_GRID_WORK} bf16_twice_dp2_zero3 2,1,1,3 ${BF16})

# precision_train: the quickstart model 300 steps in bf16 and fp32 (mean
# relative loss difference over the last 100 steps ≤ 2%, final validation
# loss within 1.5%, bf16 act_bytes below fp32's), fp32 masters in the
# checkpoints, and resumption across precisions and grids.
add_test(NAME precision_train
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/precision.sh $<TARGET_FILE:trident>
          ${CMAKE_CURRENT_BINARY_DIR}/precision_train 300)
set_tests_properties(precision_train PROPERTIES TIMEOUT 900 PROCESSORS 2
  LABELS "e2e;mpi;precision" ENVIRONMENT "${TD_GRID_ENV}")

# reference_autocast: trident bf16 against PyTorch's torch.autocast bf16
# training of the same model on the same windows (tests/reference/
# check_autocast.py), the tiny deck for 20 steps: PyTorch's bf16 matmul
# runs ~6x slower than its fp32 on a CPU without AVX512_BF16 (measured
# 6.7 s against 1.2 s per quickstart step), so 300 steps do not fit CI.
add_test(NAME reference_autocast
  COMMAND bash -c "set -e; mkdir -p '${CMAKE_CURRENT_BINARY_DIR}/reference_autocast'; \
cd '${CMAKE_CURRENT_BINARY_DIR}/reference_autocast'; \
[ -f corpus.h5 ] || '$<TARGET_FILE:trident>' prepare --out corpus.h5 --val-fraction 0.1 /usr/share/common-licenses >/dev/null; \
rm -rf run; OMP_NUM_THREADS=2 '$<TARGET_FILE:trident>' train '${PROJECT_SOURCE_DIR}/inputs/tiny.yaml' \
--set data.train=corpus.h5 --set run.out_dir=run --set training.precision=bf16 --dump dump.h5 >train.log; \
/usr/bin/python3 '${CMAKE_CURRENT_SOURCE_DIR}/reference/check_autocast.py' dump.h5")
set_tests_properties(reference_autocast PROPERTIES TIMEOUT 300 PROCESSORS 2
  LABELS "reference;precision")
