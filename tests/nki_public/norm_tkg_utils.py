# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/subkernels/norm_tkg_utils.py
# (load_input_to_sbuf, contiguous_load_transpose, load_gamma_to_sbuf) at commit
# d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this project, not copied: the same NKI
# calls and view chains on plain NkiTensors instead of the library's TensorView / SbufManager.
# The library passes `dge_mode=3`, a raw integer NKI 0.3.0 rejects ("Raw integer enum constants
# no longer accepted", SDK release-notes/components/nki.rst); this uses `nisa.dge_mode.none`.
"""Loads shared by the rmsnorm_tkg and layernorm_tkg fixtures: [BxS, H] rows in HBM to the
hidden-on-partitions layout [H0, BxS, H1] in SBUF, and the [1, H] weights to [H0, H1]."""
import nki.isa as nisa
import nki.language as nl

# norm_tkg_utils: up to this H, rows are loaded contiguously and transposed on chip (TensorE);
# above it, one strided DMA writes the transposed layout directly.
CONTIGUOUS_LOAD_H_THRESHOLD = 2048
PSUM_ALIGNMENT_BYTES = 4   # norm_tkg_utils: each transposed tile starts 4-byte aligned in PSUM


def check_and_shard_tokens(input, gamma, output, sharding_threshold):
    """The entry checks both norm kernels make, then their LNC token sharding: (H, lnc, t0, t1).

    With LNC=2 and more than `sharding_threshold` tokens (an even count), program c normalises tokens
    t0 .. t1 - 1, half of them; otherwise every program does all of them (the library's
    get_verified_program_sharding_info gives (1, 0) without a launch grid)."""
    H0 = nl.tile_size.pmax
    B, S, H = input.shape
    BxS, H1 = B * S, H // H0
    assert H % H0 == 0, f"input H must be a multiple of {H0}, got {H}"
    assert tuple(output.shape) == (H0, BxS, H1), f"output must be {(H0, BxS, H1)}, got {tuple(output.shape)}"
    assert tuple(gamma.shape) == (1, H), f"gamma must be (1, {H}), got {tuple(gamma.shape)}"
    lnc, shard_id = (nl.num_programs(axes=0), nl.program_id(axis=0)) if nl.program_ndim() != 0 else (1, 0)
    num_shards = lnc if lnc == 2 and BxS > sharding_threshold and BxS % lnc == 0 else 1
    if num_shards == 1:
        shard_id = 0
    shard_size = BxS // num_shards
    return H, lnc, shard_id * shard_size, (shard_id + 1) * shard_size


def load_input_to_sbuf(input_hbm, input_sb, num_H_shards, hidden_dim_tp=False):
    """[BxS, H] @ HBM into [H0, BxS, H1] @ SBUF.

    Layouts (h is the hidden index):
        hidden_dim_tp=False: h = (shard, h0, h2) -> input_sb[h0, bxs, shard * H2 + h2]
        hidden_dim_tp=True:  h = (h1, h0)        -> input_sb[h0, bxs, h1]   (one DMA transpose)
    """
    H0 = nl.tile_size.pmax
    BxS, H = input_hbm.shape
    H1 = H // H0
    H2 = H1 // num_H_shards
    if hidden_dim_tp:
        # [BxS, H] -> [BxS * H1, 1, 1, H0]; a 4-d DMA transpose permutes dims (3, 1, 2, 0).
        src = (input_hbm.reshape_dim(dim=1, shape=[H1, H0]).flatten_dims(start_dim=0, end_dim=1)
               .expand_dim(dim=1).expand_dim(dim=1))
        dst = input_sb.flatten_dims(start_dim=1, end_dim=2).expand_dim(dim=1).expand_dim(dim=1)
        nisa.dma_transpose(dst=dst, src=src)
    elif H <= CONTIGUOUS_LOAD_H_THRESHOLD:
        contiguous_load_transpose(input_hbm, input_sb, num_H_shards)
    else:
        src = input_hbm.reshape_dim(dim=1, shape=[num_H_shards, H0, H2]).permute(dims=[2, 0, 1, 3])
        dst = input_sb.reshape_dim(dim=2, shape=[num_H_shards, H2])
        nisa.dma_copy(dst=dst, src=src, dge_mode=nisa.dge_mode.none)
    return input_sb


def contiguous_load_transpose(input_hbm, input_sb, num_H_shards):
    """Rows of 128 tokens DMA'd contiguously, then each [tokens, H0] column block transposed by
    TensorE into a PSUM bank (in the input dtype) and copied out in one strided tensor_copy."""
    H0 = nl.tile_size.pmax
    BxS, H = input_hbm.shape
    H2 = H // H0 // num_H_shards
    n_h_tiles = num_H_shards * H2
    out4 = input_sb.reshape_dim(dim=2, shape=[num_H_shards, H2])      # [H0, BxS, shards, H2]
    itemsize = 2 if input_hbm.dtype in (nl.float16, nl.bfloat16) else 4
    for b0 in range(0, BxS, H0):
        nb = min(H0, BxS - b0)
        rows = nl.ndarray((nb, H), dtype=input_hbm.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=input_hbm.slice(dim=0, start=b0, end=b0 + nb), dst=rows, dge_mode=nisa.dge_mode.none)
        rows4 = rows.reshape_dim(dim=1, shape=[num_H_shards, H0, H2])    # [nb, shards, H0, H2]
        padded = -(-nb * itemsize // PSUM_ALIGNMENT_BYTES) * PSUM_ALIGNMENT_BYTES // itemsize
        per_bank = nl.tile_size.psum_fmax // padded
        for t0 in range(0, n_h_tiles, per_bank):
            nt = min(per_bank, n_h_tiles - t0)
            tp = nl.ndarray((H0, nt * padded), dtype=input_hbm.dtype, buffer=nl.psum)
            for i in range(nt):
                shard, h2 = divmod(t0 + i, H2)
                block = (rows4.slice(dim=1, start=shard, end=shard + 1).squeeze_dim(dim=1)
                         .slice(dim=2, start=h2, end=h2 + 1).squeeze_dim(dim=2))    # [nb, H0]
                nisa.nc_transpose(dst=tp[0:H0, i * padded:i * padded + nb], data=block)
            dst = (out4.slice(dim=1, start=b0, end=b0 + nb).flatten_dims(start_dim=2, end_dim=3)
                   .permute(dims=[0, 2, 1]).slice(dim=1, start=t0, end=t0 + nt))     # [H0, nt, nb]
            src = tp.reshape_dim(dim=1, shape=[nt, padded]).slice(dim=2, start=0, end=nb)
            nisa.tensor_copy(dst=dst, src=src)


def load_gamma_to_sbuf(gamma_hbm, gamma_sb, num_H_shards, hidden_dim_tp=False):
    """[1, H] @ HBM into [H0, H1] @ SBUF, in the same hidden layout as load_input_to_sbuf."""
    H0 = nl.tile_size.pmax
    H = gamma_hbm.shape[1]
    H1 = H // H0
    flat = gamma_hbm.flatten_dims(start_dim=0, end_dim=1)                     # [H]
    if hidden_dim_tp:
        src = flat.reshape_dim(dim=0, shape=[H1, H0]).expand_dim(dim=1).expand_dim(dim=1)
        nisa.dma_transpose(dst=gamma_sb.expand_dim(dim=1).expand_dim(dim=1), src=src)
    else:
        src = flat.reshape_dim(dim=0, shape=[num_H_shards, H0, H1 // num_H_shards]).permute(dims=[1, 0, 2])
        dst = gamma_sb.reshape_dim(dim=1, shape=[num_H_shards, H1 // num_H_shards])
        nisa.dma_copy(dst=dst, src=src, dge_mode=nisa.dge_mode.none)
    return gamma_sb
