"""Public NKI kernels, rewritten small: proof that nkicpu runs kernels written the way AWS writes them.

Each module here mirrors one public kernel: a kernel of the NKI library (aws-neuron/nki-library:
rmsnorm_tkg, layernorm_tkg and the norm_tkg_utils loads they share, rope_hf, depthwise_conv1d,
the bn_stats / bn_aggr normalisation of mlp_cte_norm, cumsum, the top-K step of router_topk) or an
example of the Neuron SDK (aws-neuron/aws-neuron-sdk nki/examples: matrix multiplication, tensor
addition, transpose2d; the indirect gather of the dma_copy docs).
They were written for this project, not copied: each uses the same NKI calls, keyword forms,
access patterns and idioms as its public original (explicit `.ap()` patterns with stride-0
broadcasts, an all-ones or 1/H stationary for cross-partition sums, `[P, 1]` bias and scale tiles,
view chains, `memset(tile, 0)`, an output buffer passed in and returned, `nl.program_id`
sharding), at small realistic shapes, without the library's allocator and TensorView machinery.
Each names the public file and commit it mirrors in its first lines.

They import only `nki`, `nki.language` and `nki.isa` (the two norm kernels also their shared
loads, as the library's do), so like `kernels/` they are meant to run unchanged on the Neuron SDK
(not checked against the SDK: it is not installable here).
tests/test_nki_public_kernels.py and tests/test_nki_public_isa.py run each under `nki.simulate` against NumPy.
"""
