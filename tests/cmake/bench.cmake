# bench.cmake — benchmark helpers (not tests).
# gemm_rate: the CPU back-end's matmul rate on a GPT-2 model's own shapes
# (linear layers fwd + both bwd, and the LM head), one JSON line; used by
# tests/bench/cpu_vs_torch.sh for trident's utilisation.
td_add_unit(gemm_rate ${CMAKE_CURRENT_SOURCE_DIR}/bench/gemm_rate.c)

# attention_rate: the materialised and the fused attention kernels side by
# side on one shape (seconds and ratios, one JSON line).
td_add_unit(attention_rate ${CMAKE_CURRENT_SOURCE_DIR}/bench/attention_rate.c)
