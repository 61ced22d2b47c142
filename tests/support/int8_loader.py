"""The INT8 loader fix of issue 35 as test data, shaped like vllm-gaudi's 88eab1e9 (#1659):
two loaders share an FP8 wrapper; the fix removes it from the INT8 loader only, so the lines it
removes still exist elsewhere (in the FP8 loader) once upstream takes it."""

WRAP = (
    "    weights = gaudi_weight_wrapper(weights)\n"
    "    weights = convert_to_fp8_layout(weights)\n"
    "    scales = collect_fp8_scales(weights)\n"
    "    apply_fp8_scales(layer, scales)\n"
)
LOADER = (
    "def load_int8(layer, weights):\n"
    + WRAP
    + "    return layer.finish(weights)\n\n"
    + "def load_fp8(layer, weights):\n"
    + WRAP
    + "    return layer.finish(weights)\n"
)
FIXED = LOADER.replace(
    WRAP, "    weights = keep_int8_layout(weights)\n    layer.int8_weights = weights\n", 1
)
TITLE = "Fix #1612: don't wrap INT8 loader with FP8-only wrapper"
# A later upstream helper that wraps INT8 weights again: it adds the removed lines back.
READDED = "\n\ndef prepare_int8(layer, weights):\n" + WRAP + "    return weights\n"
