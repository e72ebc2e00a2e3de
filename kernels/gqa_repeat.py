"""Stage 3 of the GDN decode step: split conv_out into q | k | v heads, q and k to the value heads.

GQA here is `repeat_interleave`: value head h reads key head h // G, G = nv / nk ("each key head
serves G consecutive value heads"), never `tile` (h % nk). On chip that is one view,
`value_heads_view`: the delta rule reads it directly, and the copies below are made from it.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from .checks import expect, expect_dtype, expect_rank


def value_heads_view(key_tile, G):
    """The value heads of a channel-major key-head tile: [d, nk, B] -> [d, nk, G, B], value head
    h = j * G + g reading key head j = h // G. A stride-0 view: nothing moves."""
    return key_tile.expand_dim(2).broadcast(2, G)


def expand_key_heads(dst, key_tile, h0, G):
    """Copy the key heads that value heads h0 .. h0 + nh - 1 read into one tile per value head.

    Dimensions:
        nh: value heads (dst.shape[1]); nkh: key heads of key_tile, the first one h0 // G

    Args:
        dst (nl.ndarray): [d, nh, B] @ SBUF, written:
            dst[:, i] = key_tile[:, (h0 + i) // G - h0 // G].
        key_tile (nl.ndarray): [d, nkh, B] @ SBUF, same dtype.
        h0 (int): the first value head, any (a group may be cut at either end).
        G (int): value heads per key head.

    Returns:
        None; `dst` holds the result.

    Notes:
        - At most three VectorE copies from value_heads_view (a cut group at each end, the whole
          groups between); one when h0 and nh are multiples of G.

    Pseudocode:
        for i in range(nh):
            dst[:, i] = key_tile[:, (h0 + i) // G - h0 // G]
    """
    d, nh, B = dst.shape
    nkh = key_tile.shape[1]
    expect(key_tile.shape[0] == d and key_tile.shape[2] == B, "key_tile",
           f"shape [{d}, nkh, {B}] (as dst but for axis 1)", list(key_tile.shape))
    expect((h0 + nh - 1) // G - h0 // G < nkh, "key_tile",
           f"the key heads {h0 // G} .. {(h0 + nh - 1) // G} of value heads {h0} .. {h0 + nh - 1}",
           f"{nkh} heads")
    expect(dst.dtype == key_tile.dtype, "dst", f"dtype {key_tile.dtype} (as key_tile)", dst.dtype)
    g0 = h0 % G                               # dst[:, 0] is position g0 of key head 0's group
    head = min(nh, (G - g0) % G)              # value heads of a group cut at the start
    whole = (nh - head) // G
    j = 0
    if head:
        nisa.tensor_copy(dst[:, 0:head].expand_dim(1),
                         value_heads_view(key_tile[:, 0:1], G)[:, :, g0:g0 + head])
        j = 1
    if whole:
        nisa.tensor_copy(dst[:, head:head + whole * G].reshape_dim(1, (whole, G)),
                         value_heads_view(key_tile[:, j:j + whole], G))
    tail = nh - head - whole * G              # value heads of a group cut at the end
    if tail:
        nisa.tensor_copy(dst[:, nh - tail:nh].expand_dim(1),
                         value_heads_view(key_tile[:, j + whole:j + whole + 1], G)[:, :, 0:tail])


def heads_for_values(qk, h0, nh, G):
    """q and k as value heads h0 .. h0 + nh - 1 read them, from the conv output qk [d, 2, nkh, B]
    (q, then k, of key heads h0 // G ..): views of qk where those value heads are whole GQA groups
    (the delta rule reads key head h // G through value_heads_view: no copy), else one copy per
    value head each (expand_key_heads), [d, nh, B]."""
    if h0 % G == 0 and nh % G == 0:
        return qk[:, 0], qk[:, 1]
    copies = []
    for i in range(2):
        name = "q_rep"
        if i == 1:
            name = "k_rep"
        dst = nl.ndarray((qk.shape[0], nh, qk.shape[3]), qk.dtype, name=name)
        expand_key_heads(dst, qk[:, i], h0, G)
        copies.append(dst)
    return copies[0], copies[1]


def gqa_repeat(dst, src):
    """Materialise the GQA expansion: dst[:, h] = src[:, h // G] along axis 1 (heads), G = nv / nk.

    The building block of stage 3 for consumers that want one tensor per value head. Axis 1 is the
    head axis both in HBM ([B, heads, d]) and on chip ([d, heads, B]), so one block serves both.

    Dimensions:
        nk: key heads (src.shape[1]); nv: value heads (dst.shape[1]), a multiple of nk; G = nv / nk

    Args:
        dst (nl.ndarray): [B, nv, d] @ HBM or [d, nv, B] @ SBUF, written.
        src (nl.ndarray): [B, nk, d] @ HBM or [d, nk, B] @ SBUF, same dtype and other dims as dst.

    Returns:
        None; `dst` holds the result.

    Notes:
        - HBM (either side): G DMAs; DMA g writes position g of every group of dst viewed as
          [B, nk, G, d] (value heads g, g+G, ...), from all nk key heads. Stride-0 DMA sources
          are not documented (engine operands are), so no single DMA reads value_heads_view.
        - On chip: one VectorE copy from value_heads_view (expand_key_heads).

    Pseudocode:
        G = dst.shape[1] // src.shape[1]
        for h in range(dst.shape[1]):
            dst[:, h] = src[:, h // G]
    """
    expect_rank(dst, "dst", 3)
    expect_rank(src, "src", 3)
    nk, nv = src.shape[1], dst.shape[1]
    expect(nv % nk == 0, "dst",
           f"value heads dst.shape[1] a multiple of key heads src.shape[1] = {nk}", nv)
    expect(dst.shape[0] == src.shape[0] and dst.shape[2] == src.shape[2], "dst",
           f"shape [{src.shape[0]}, nv, {src.shape[2]}] (as src but for axis 1)",
           f"{list(dst.shape)}")
    expect(dst.dtype == src.dtype, "dst", f"dtype {src.dtype} (as src)", dst.dtype)
    G = nv // nk
    if nl.is_hbm(dst.buffer) or nl.is_hbm(src.buffer):
        groups = dst.reshape_dim(1, (nk, G))           # [B, nk, G, d]: value head j * G + g
        for g in range(G):
            nisa.dma_copy(groups[:, :, g, :], src)
    else:
        expand_key_heads(dst, src, 0, G)


@nki.jit
def gqa_repeat_kernel(conv_out, num_k_heads, head_k_dim, head_v_dim):
    """Stage 3 standalone, HBM to HBM: q, k, v heads from conv_out, q and k repeated to nv heads.

    Dimensions:
        B: batch; nk = num_k_heads; dk = head_k_dim; dv = head_v_dim;
        conv_dim = 2*nk*dk + nv*dv; nv = (conv_dim - 2*nk*dk) / dv; G = nv / nk

    Args:
        conv_out (nl.ndarray): [B, conv_dim] @ HBM, bf16, the conv1d stage output, channels
            ordered q (nk*dk) | k (nk*dk) | v (nv*dv), head-major inside each.
        num_k_heads (int): nk, a compile-time constant.
        head_k_dim (int): dk <= 128, a compile-time constant.
        head_v_dim (int): dv <= 128, a compile-time constant.

    Returns:
        q (nl.ndarray): [B, nv, dk] @ shared HBM, bf16; q[:, h] = conv_out q head h // G.
        k (nl.ndarray): [B, nv, dk] @ shared HBM, bf16; k[:, h] = conv_out k head h // G.
        v (nl.ndarray): [B, nv, dv] @ shared HBM, bf16; the v heads, unchanged.

    Notes:
        - conv_out's shape alone cannot tell nk, dk and dv apart (a conv_dim has many
          decompositions), so they are explicit compile-time integer arguments; nv follows.
          The fused kernel needs none: it reads dk, dv, nv from recurrent_state and A_log.
        - Rejects (AssertionError naming the argument): conv_out not 2-d or not bf16; nk, dk, dv not
          positive ints; dk or dv > 128 (a head is one partition tile in the fused kernel);
          conv_dim - 2*nk*dk not a positive multiple of dv; nv not a multiple of nk.
        - HBM to HBM, no SBUF: 2*G + 1 DMAs (G each for q and k through `gqa_repeat`, one for v),
          each moving runs of dk or dv contiguous elements.

    Pseudocode:
        key_dim = nk * dk
        q = conv_out[:, :key_dim].reshape(B, nk, dk).repeat(G, axis=1)       # repeat_interleave
        k = conv_out[:, key_dim:2 * key_dim].reshape(B, nk, dk).repeat(G, axis=1)
        v = conv_out[:, 2 * key_dim:].reshape(B, nv, dv)
    """
    B, nv = check_split_args(conv_out, num_k_heads, head_k_dim, head_v_dim)
    nk, dk, dv = num_k_heads, head_k_dim, head_v_dim

    q = nl.ndarray((B, nv, dk), nl.bfloat16, buffer=nl.shared_hbm, name="q")
    k = nl.ndarray((B, nv, dk), nl.bfloat16, buffer=nl.shared_hbm, name="k")
    v = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="v")
    split_heads_hbm(q, k, v, conv_out, nk)
    return q, k, v


def check_split_args(conv_out, num_k_heads, head_k_dim, head_v_dim):
    """Stage 3's input contract: conv_out [B, 2 * nk * dk + nv * dv] bf16 with nv a multiple of
    nk, head dims <= 128; returns (B, nv)."""
    expect_rank(conv_out, "conv_out", 2)
    expect_dtype(conv_out, "conv_out", nl.bfloat16)
    pmax = nl.tile_size.pmax
    for arg, value in (("num_k_heads", num_k_heads), ("head_k_dim", head_k_dim),
                       ("head_v_dim", head_v_dim)):
        expect(isinstance(value, int) and not isinstance(value, bool) and value >= 1, arg,
               "a positive Python int (compile-time constant)", repr(value))
    expect(head_k_dim <= pmax, "head_k_dim", f"<= {pmax} (one head per partition tile)", head_k_dim)
    expect(head_v_dim <= pmax, "head_v_dim", f"<= {pmax} (one head per partition tile)", head_v_dim)
    B, conv_dim = conv_out.shape
    nk, dk, dv = num_k_heads, head_k_dim, head_v_dim
    key_dim = nk * dk
    value_dim = conv_dim - 2 * key_dim
    expect(value_dim > 0 and value_dim % dv == 0, "conv_out",
           f"conv_dim = 2*nk*dk + nv*dv = 2*{nk}*{dk} + nv*{dv} with an integer nv >= 1",
           f"conv_dim = {conv_dim}")
    nv = value_dim // dv
    expect(nv % nk == 0, "conv_out",
           f"num_v_heads nv = (conv_dim - 2*nk*dk) / dv a multiple of num_k_heads = {nk}",
           f"nv = {nv}")
    return B, nv


def split_heads_hbm(q, k, v, conv_out, nk):
    """The stage's HBM -> HBM body: conv_out [B, conv_dim] split into q, k [B, nv, dk] (each a
    repeat of nk key heads) and v [B, nv, dv]. Called by the standalone entry point and by the
    one-kernel step with HBM scratch (composition step 2)."""
    dk, dv = q.shape[2], v.shape[2]
    key_dim = nk * dk
    gqa_repeat(q, conv_out[:, 0:key_dim].reshape_dim(1, (nk, dk)))
    gqa_repeat(k, conv_out[:, key_dim:2 * key_dim].reshape_dim(1, (nk, dk)))
    nisa.dma_copy(v, conv_out[:, 2 * key_dim:].reshape_dim(1, (v.shape[1], dv)))
