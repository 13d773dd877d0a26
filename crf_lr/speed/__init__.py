"""The same values, faster (each switchable; rows of crf_lr.patches where they replace another
library's code): batched attention (`attention`), the closed-form layer norm (`layer_norm`), the
C++ kernels (`fused_kernels`, built by `native_build` from `kernels/*.cc`), light graph options
(`graph_optimisation`), steps traced once (`tracing`), per-thread switches (`switches`), thread
pools sized to a CPU quota (`threads`), oneDNN's kernel cache sized for training or serving
(`primitive_cache`).
"""
