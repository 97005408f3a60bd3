"""RopeState's Triton kernels compiled for a CUDA GPU without one: whether
each compiles (`compile_for_gpu`) and the registers and spills of the step
kernel per launch shape (`registers`). bench/gpu_check.py prints both."""

from __future__ import annotations

import os

import triton

# Argument types of each kernel for `compile_for_gpu`: MRV2's dtypes (int64 idx_mapping, int32 counts)
_SIGNATURES = {
    "prepare_kernel": {
        "positions_ptr": "*i64",
        "positions_stride": "i32",
        "num_columns": "i32",
        "records_ptr": "*i32",
        "pool_ptr": "*i32",
        "arena_ptr": "*i32",
        "max_num_reqs": "i32",
        "idx_mapping_ptr": "*i64",
        "query_start_loc_ptr": "*i32",
        "prefill_lens_ptr": "*i32",
        "num_computed_tokens_ptr": "*i32",
    },
    "read_kernel": {
        "out_ptr": "*i32",
        "length": "i32",
        "records_ptr": "*i32",
        "pool_ptr": "*i32",
        "arena_ptr": "*i32",
        "slot": "i32",
    },
    "scatter_kernel": {"dst_ptr": "*i32", "src_ptr": "*i32", "headers_at": "i32"},
}


def compile_for_gpu(capability: int = 90) -> dict[str, str]:
    """Compile RopeState's kernels for a CUDA GPU of this compute capability
    (90: H100, H200) without one, through triton's ahead-of-time compiler:
    it catches what the interpreter lets through (types, shapes, constructs
    the compiler lacks). Returns each kernel's "ok" or its error. Needs
    TRITON_INTERPRET unset when the kernels were imported."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mrope_tracker.device import triton_step

    target = GPUTarget("cuda", capability, 32)
    out = {}
    for name, signature in _SIGNATURES.items():
        out[name] = "ok"
        # the position kernels once per number of axes (3: M-RoPE; 4: HunYuan-VL), the step kernel
        # with its prompt block the whole block (the default) and a quarter of it
        variants = [{}] if name == "scatter_kernel" else [{"NUM_DIMS": d} for d in (3, 4)]
        if name == "prepare_kernel":
            variants = [{**v, "PROMPT_BLOCK": p} for v in variants for p in (1024, 256)]
        for dims in variants:
            source = ASTSource(
                fn=getattr(triton_step, name),
                signature={**signature, "BLOCK_SIZE": "constexpr", **dict.fromkeys(dims, "constexpr")},
                constexprs={"BLOCK_SIZE": 1024, **dims},
            )
            try:
                triton.compile(source, target=target)
            except Exception as exc:  # a compile error of any kind is the finding
                out[name] = f"{dims}: {type(exc).__name__}: {exc}"
                break
    return out


def registers(
    capability: int = 90, blocks=(128, 256, 512, 1024), warps=(1, 2, 4, 8), prompt_blocks=(None, 128)
) -> list[dict]:
    """Registers and stack (spills) per thread of the step kernel for each block
    size, warp count and prompt block (None: the whole block; larger than the
    block: skipped), compiled for `capability` without a GPU and read from
    the cubin by the cuobjdump that triton ships. Registers bound how many
    programs an SM holds at once (65,536 per SM), so they predict how many
    waves a 1,024-request step takes; `--sweep` measures the time on a GPU."""
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mrope_tracker.device import triton_step

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    signature = {
        **_SIGNATURES["prepare_kernel"],
        **dict.fromkeys(("BLOCK_SIZE", "NUM_DIMS", "PROMPT_BLOCK"), "constexpr"),
    }
    out = []
    shapes = [(b, p or b, w) for b in blocks for p in prompt_blocks if (p or b) <= b for w in warps]
    for block, prompt_block, num_warps in dict.fromkeys(shapes):
        constexprs = {"BLOCK_SIZE": block, "NUM_DIMS": 3, "PROMPT_BLOCK": prompt_block}
        source = ASTSource(fn=triton_step.prepare_kernel, signature=signature, constexprs=constexprs)
        compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": num_warps})
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            usage = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True)
        found = dict(re.findall(r"(REG|STACK):(\d+)", usage.stdout))
        regs = int(found.get("REG", 0))
        out.append(
            {
                "block": block,
                "prompt_block": prompt_block,
                "warps": num_warps,
                "registers": regs,
                "stack_bytes": int(found.get("STACK", 0)),
                # programs per SM by registers alone (at most 32 blocks, 64 warps)
                "programs_per_sm": min(65536 // max(1, regs * 32 * num_warps), 32, 64 // num_warps),
            }
        )
    return out
