"""Stage 2 of the GDN decode step: one step of the depthwise causal conv1d, then SiLU.

Channel-major, like every stage: channels sit on partitions (tiled by 128), and the window of each
channel, [batch, K], lies in the free dim. A depthwise conv never mixes channels, so no TensorE and
no cross-partition traffic: the window slide is two copies, the conv one multiply and one reduce on
VectorE, the SiLU one ScalarE activation. Several channel tiles (nt of them, e.g. all q heads) can
sit side by side in the free dim and go through the same five instructions.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from .checks import expect, expect_dtype, expect_rank, expect_shape
from .layout import gather_channel_major, load_channel_major, scatter_rows, store_rows

# The conv windows this stage (and the fused kernel) supports: the widths causal-conv1d's
# causal_conv1d_update and vLLM's Triton kernel support; every Qwen3-Next / Qwen3.5 model uses 4.
K_MIN = 2
K_MAX = 4
WINDOW_FREE_MAX = 4096       # window elements (tiles * B * K) per partition per chunk


def conv1d_decode_tile(dst_out, dst_state, x, w, state):
    """One decode step of the depthwise causal conv1d + SiLU on channel-major SBUF tiles.

    The building block of stage 2, called by the standalone kernel and by the fused decode kernel.
    It writes `dst_out` and `dst_state` and allocates only its own fp32 temporaries.

    Dimensions:
        P: channels of one channel tile, on partitions (<= 128)
        nt: channel tiles side by side in the free dim (e.g. the heads of q, k or v); optional
        B: batch (tokens)
        K: conv window (kernel size), 2..4

    Args:
        dst_out (nl.ndarray): [P, nt, B] (or [P, B]) @ SBUF, bf16 (any float dtype), written:
            the conv output after SiLU.
        dst_state (nl.ndarray): [P, nt, B, K] (or [P, B, K]) @ SBUF, same dtype as `state`,
            written: the new window, oldest token in column 0, `x` in column K-1.
        x (nl.ndarray): [P, nt, B] (or [P, B]) @ SBUF, bf16, the new token (in_proj's mixed_qkv).
        w (nl.ndarray): [P, nt, K] (or [P, K]) @ SBUF, fp32, the conv weight of these channels.
        state (nl.ndarray): [P, nt, B, K] (or [P, B, K]) @ SBUF, bf16, the incoming window.

    Returns:
        None; `dst_out` and `dst_state` hold the results.

    Notes:
        - Channel c of tile t sits on partition p: the standalone kernel uses c = c0 + 128*t + p,
          the fused kernel c = (first channel of head t) + p, so a head is one channel tile.
        - `dst_state` must not overlap `state`. The new state IS the conv window (bit-exact
          copies), so the conv reads it instead of assembling another.
        - Five instructions for any nt and B: two copies (GpSimd, VectorE), multiply and reduce over
          K in fp32 (VectorE, w broadcast over B by a stride-0 view), SiLU (ScalarE, one rounding).
        - Temporaries: nt*B*K*4 + nt*B*4 bytes of SBUF per partition.

    Pseudocode:
        window = concatenate([state[..., 1:], x[..., None]], axis=-1)      # [P, nt, B, K]
        dst_state[...] = window
        acc = (window.astype(float32) * w[:, :, None, :]).sum(axis=-1)    # fp32, [P, nt, B]
        dst_out[...] = (acc * sigmoid(acc)).astype(dst_out.dtype)
    """
    if len(x.shape) == 2:  # one channel tile: [P, B] -> [P, 1, B]
        return conv1d_decode_tile(dst_out.expand_dim(1), dst_state.expand_dim(1), x.expand_dim(1),
                                  w.expand_dim(1), state.expand_dim(1))
    P, nt, B = x.shape
    K = w.shape[-1]
    expect(P <= nl.tile_size.pmax, "x", f"channels (partitions) <= {nl.tile_size.pmax}", P)
    expect(K_MIN <= K <= K_MAX, "w", f"a conv window K in {K_MIN}..{K_MAX}", K)
    expect_shape(w, "w", (P, nt, K))
    expect_shape(state, "state", (P, nt, B, K))
    expect_shape(dst_state, "dst_state", (P, nt, B, K))
    expect_shape(dst_out, "dst_out", (P, nt, B))
    expect_dtype(w, "w", nl.float32)
    expect(dst_state.dtype == state.dtype, "dst_state",
           f"dtype {state.dtype} (as state, for a bit-exact copy)", dst_state.dtype)

    # Slide the window: drop column 0, shift 1..K-1 left, append the new token (bit-exact copies).
    nisa.tensor_copy(dst_state[:, :, :, 0:K - 1], state[:, :, :, 1:K], engine=nisa.engine.gpsimd)
    nisa.tensor_copy(dst_state[:, :, :, K - 1], x)

    # conv: acc[p, t, b] = sum_j window[p, t, b, j] * w[p, t, j], in fp32
    prod = nl.ndarray((P, nt, B, K), nl.float32, name="conv_prod")
    nisa.tensor_tensor(prod, dst_state, w.expand_dim(2).broadcast(2, B), op=nl.multiply)
    acc = nl.ndarray((P, nt, B), nl.float32, name="conv_acc")
    nisa.tensor_reduce(acc, nl.add, prod, axis=3)

    # SiLU on ScalarE; the one rounding to the output dtype
    nisa.activation(dst_out, op=nl.silu, data=acc)


def conv1d_tokens_tile(dst_out, columns, x, w, state):
    """T decode steps of the conv + SiLU at once on channel-major SBUF tiles: a sequence's T
    tokens (a speculative-decoding verify step), token s's window the last K columns of
    [state, x_0 .. x_s].

    Args:
        dst_out (nl.ndarray): [P, nt, B * T] @ SBUF, written: token s of row b in column b * T + s.
        columns (nl.ndarray): [P, nt, B, K - 1 + T] @ SBUF, state's dtype, written:
            [state[..., 1:], x_0 .. x_S-1]; token s's window is columns[..., s:s + K].
        x (nl.ndarray): [P, nt, B * T] @ SBUF, bf16, the tokens (column b * T + s).
        w (nl.ndarray): [P, nt, K] @ SBUF, fp32.
        state (nl.ndarray): [P, nt, B, K] @ SBUF, the incoming window.

    Notes:
        - Each token's products and sum are conv1d_decode_tile's (bit for bit T single steps); the
          multiply runs once per window column j, over every token's column s + j at once.
        - Temporaries: nt * B * T * (K + 1) * 4 bytes of SBUF per partition.
    """
    P, nt, B, K = state.shape
    T = x.shape[2] // B
    nisa.tensor_copy(columns[:, :, :, 0:K - 1], state[:, :, :, 1:K], engine=nisa.engine.gpsimd)
    nisa.tensor_copy(columns[:, :, :, K - 1:K - 1 + T], x.reshape_dim(2, (B, T)))
    prod = nl.ndarray((P, nt, B, T, K), nl.float32, name="conv_prod")
    for j in range(K):
        nisa.tensor_tensor(prod[:, :, :, :, j], columns[:, :, :, j:j + T],
                           w[:, :, j:j + 1].expand_dim(3).broadcast(2, B).broadcast(3, T),
                           op=nl.multiply)
    acc = nl.ndarray((P, nt, B, T), nl.float32, name="conv_acc")
    nisa.tensor_reduce(acc, nl.add, prod, axis=4)
    nisa.activation(dst_out.reshape_dim(2, (B, T)), op=nl.silu, data=acc)


def conv1d_decode_channels(dst_out, new_conv_state, x, conv_weight, conv_state, c0):
    """The conv step of a group of channel tiles whose window and weight are still in HBM.

    Loads the window and the weight of channels c0 .. c0 + nt*P - 1, runs `conv1d_decode_tile` and
    stores the new window straight back to HBM, chunk by chunk. Called per channel chunk by the
    standalone kernel; the fused kernel calls its three phases (`load_windows`, `slide_windows`,
    `store_windows`) apart, to place them in its own program order.

    Args:
        dst_out (nl.ndarray): [P, nt, B] @ SBUF, written: silu(conv) of channel c0 + t*P + p.
        new_conv_state (nl.ndarray): [B, conv_dim, K] @ HBM, written at channels c0 ..
            c0 + nt*P - 1.
        x (nl.ndarray): [P, nt, B] @ SBUF, bf16, the new token of those channels, channel-major.
        conv_weight (nl.ndarray): [conv_dim, K] @ HBM, fp32.
        conv_state (nl.ndarray): [B, conv_dim, K] @ HBM, bf16, read only.
        c0 (int): the first channel.

    Notes:
        - The window moves as rows [B, nt*P*K] and the weight as rows [nt, P*K] through
          kernels.layout (contiguous row DMAs, TensorE transposes), the new window back the same
          way.
        - The tiles go in chunks of at most WINDOW_FREE_MAX window elements per partition (all of
          them at once for every real shard up to B = 32), so SBUF stays bounded at any B.
    """
    P, nt, B = x.shape
    for t0, n in window_chunks(nt, B, conv_weight.shape[1]):
        loaded = load_windows(conv_weight, conv_state, c0 + t0 * P, P, n)
        windows = slide_windows(dst_out[:, t0:t0 + n], x[:, t0:t0 + n], loaded)
        store_windows(new_conv_state, windows)


def window_chunks(nt, B, K):
    """(first tile, tiles) of the chunks `conv1d_decode_channels` takes nt tiles of B windows in: at
    most WINDOW_FREE_MAX window elements per partition each (B: the tokens of the batch, B * S for
    S tokens per sequence)."""
    per = max(1, WINDOW_FREE_MAX // (B * K))
    chunks = []
    for t0 in range(0, nt, per):
        chunks.append((t0, min(per, nt - t0)))
    return chunks


def load_windows(conv_weight, conv_state, c0, P, nt, tokens=1, slots=None):
    """Phase 1 of the conv step: the weight and the incoming window of channels c0 .. c0 + nt*P - 1,
    channel-major, chunk by chunk (`window_chunks`, for `tokens` tokens per sequence). With slots
    (kernels.slots.Slots), conv_state is the pool and sequence b's window its row at slot
    read_indices[b]. Returns a list of (first channel, w [P, nt, K], state [P, nt, B, K]) @ SBUF,
    one per chunk."""
    B, _, K = conv_state.shape
    if slots is not None:
        B = slots.read.shape[1]
    loaded = []
    for t0, n in window_chunks(nt, B * tokens, K):
        a, z = c0 + t0 * P, c0 + (t0 + n) * P
        w = nl.ndarray((P, n, K), nl.float32, name="w")
        # rows [n, P*K] and [B, n*P*K]
        load_channel_major(w.expand_dim(1), conv_weight[a:z, :].reshape((n, P, K)))
        state = nl.ndarray((P, n, B, K), conv_state.dtype, name="state")
        if slots is None:
            load_channel_major(state, conv_state[:, a:z, :])
        else:
            gather_channel_major(state, conv_state, a, slots.read_rows, slots.read)
        loaded.append((a, w, state))
    return loaded


def slide_windows(dst_out, x, loaded):
    """Phase 2: `conv1d_decode_tile` on each chunk `load_windows` loaded; x and dst_out [P, nt, B]
    hold the chunks' tiles in order ([P, nt, B * T] for T tokens per sequence:
    `conv1d_tokens_tile`). Returns a list of (first channel, new window [P, nt, B, K - 1 + T]
    @ SBUF: token s's window is columns s .. s + K - 1), one per chunk."""
    windows = []
    t0 = 0
    for i in range(len(loaded)):
        a, w, state = loaded[i]
        P, nt, B, K = state.shape
        T = x.shape[2] // B
        window = nl.ndarray((P, nt, B, K - 1 + T), state.dtype, name="window")
        if T == 1:
            conv1d_decode_tile(dst_out[:, t0:t0 + nt], window, x[:, t0:t0 + nt], w, state)
        else:
            conv1d_tokens_tile(dst_out[:, t0:t0 + nt], window, x[:, t0:t0 + nt], w, state)
        windows.append((a, window))
        t0 += nt
    return windows


def store_windows(new_conv_state, windows, queue=None, slots=None):
    """Phase 3: the new windows `slide_windows` returned, stored as rows to their channels:
    new_conv_state [B, conv_dim, K] @ HBM takes the window after the last token, [B, T,
    conv_dim, K] (a verify step's) the window after each token; the row DMAs on `queue`'s
    hardware-DGE queue if given (store_rows). With slots, new_conv_state is the pool and token
    s's window of sequence b goes to slot write_indices[b, s] (scatter_rows), only the channels
    this program owns (_owned_runs)."""
    K = new_conv_state.shape[-1]
    for i in range(len(windows)):
        a, window = windows[i]
        P, nt = window.shape[0], window.shape[1]
        last = window.shape[3] - K                   # where the last token's window starts
        if slots is not None:
            runs = _owned_runs(a, nt, P, slots)
            for s in range(last + 1):
                for j in range(len(runs)):
                    t0, n = runs[j]
                    scatter_rows(new_conv_state, a + t0 * P, _column(slots.write_rows, s),
                                 slots.write[:, :, s], window[:, t0:t0 + n, :, s:s + K])
        elif len(new_conv_state.shape) == 3:
            store_rows(new_conv_state[:, a:a + nt * P, :], window[:, :, :, last:last + K], queue)
        else:
            for s in range(last + 1):
                store_rows(new_conv_state[:, s, a:a + nt * P, :], window[:, :, :, s:s + K], queue)


def _column(t, s):
    """Column s of a [B, T] tile as [B, 1], or None for None."""
    if t is None:
        return None
    return t[:, s:s + 1]


def _owned_runs(a, nt, P, slots):
    """(first tile, tiles) of the runs of a window group (nt tiles of P channels from channel a)
    this program writes to a pool: every v channel, and the q and k channels of key heads from
    slots.own_k0 on (a key head two programs read is written by the first)."""
    runs = []
    t = 0
    while t < nt:
        c = a + t * P
        if c < 2 * slots.key_dim and (c % slots.key_dim) // P < slots.own_k0:
            t = t + 1
            continue
        t1 = t + 1
        while t1 < nt and a + t1 * P != slots.key_dim:     # q and k apart
            t1 = t1 + 1
        runs.append((t, t1 - t))
        t = t1
    return runs


def channel_groups(qk_c, qk, v_c, v, k0, key_dim, v_c0):
    """The fused kernel's conv groups: (conv output tile, projected tile, first channel) of each
    channel range stage 2 runs for one program, q | k as one group where the program has every key
    head (one contiguous channel range), else q and k apart; then v.

    Args:
        qk_c: [dk, 2, nkh, B] @ SBUF, the conv outputs of the program's key heads (q, then k).
        qk: [dk, 2, nq, B] @ SBUF, the projected q | k heads (nq: nkh, or every key head).
        v_c, v: [dv, nh, B] @ SBUF, the conv output and the projection of its value heads.
        k0: the program's first key head, its first channel k0 * dk in q and in k.
        key_dim: channels of q (and of k); v_c0: the first channel of the program's v heads.
    """
    dk, _, nkh, B = qk_c.shape
    groups = []
    if nkh * dk == key_dim:     # every key head: q | k are one contiguous channel range
        groups.append((qk_c.reshape((dk, 2 * nkh, B)), qk.reshape((dk, 2 * nkh, B)), 0))
    else:
        q0 = 0
        if qk.shape[2] > nkh:   # the projection holds every key head: the program's are k0 ..
            q0 = k0
        for i in range(2):
            groups.append((qk_c[:, i], qk[:, i, q0:q0 + nkh], i * key_dim + k0 * dk))
    groups.append((v_c, v, v_c0))
    return groups


def load_group_windows(conv_weight, conv_state, groups, T, slots=None):
    """Phase 1 of the conv step for each channel group (channel_groups), T tokens per sequence:
    `load_windows` of its channels, in group order (from a pool's slots, if given)."""
    loaded = []
    for i in range(len(groups)):
        dst, _, c0 = groups[i]
        loaded.append(load_windows(conv_weight, conv_state, c0, dst.shape[0], dst.shape[1], T,
                                   slots))
    return loaded


def conv_groups(new_conv_state, groups, conv_weight, conv_state, loaded=None, queue=None,
                slots=None):
    """The conv step of each channel group (channel_groups): every window slid and its silu
    computed, then the new windows stored (store_windows, on `queue` if given).

    loaded: the groups' windows, loaded ahead (load_group_windows); None: each group loads its
    own here, and with one token per sequence and no pool goes load, conv, store chunk by chunk
    (conv1d_decode_channels).
    slots: the pool form's (kernels.slots.Slots): every window is read before any is written,
    and where two programs of an LNC grid read one key head's window, a core barrier orders
    both reads before its owner's write (the pool may be updated in place)."""
    T = groups[0][1].shape[2] // conv_state.shape[0]
    if slots is not None:
        T = slots.write.shape[2]
    windows = []
    for i in range(len(groups)):
        dst, x, c0 = groups[i]
        if loaded is not None:
            windows.append(slide_windows(dst, x, loaded[i]))
        elif T == 1 and slots is None:
            conv1d_decode_channels(dst, new_conv_state, x, conv_weight, conv_state, c0=c0)
        else:
            windows.append(slide_windows(dst, x, load_windows(conv_weight, conv_state, c0,
                                                              dst.shape[0], dst.shape[1], T,
                                                              slots)))
    if slots is not None and slots.barrier:
        nisa.core_barrier(new_conv_state, (0, 1))
    for i in range(len(windows)):
        store_windows(new_conv_state, windows[i], queue, slots)


def channel_chunks(conv_dim, B, K):
    """(first channel, partitions P, channel tiles nt) of each chunk the entry point loads at once.

    Full 128-channel tiles are grouped nt at a time so that a chunk's window holds at most
    WINDOW_FREE_MAX elements per partition; a partial last tile (conv_dim % 128 channels) is a
    chunk of its own.
    """
    pmax = nl.tile_size.pmax
    full = conv_dim // pmax
    per_chunk = max(1, min(full, WINDOW_FREE_MAX // (B * K)))
    chunks = []
    for t0 in range(0, full, per_chunk):
        chunks.append((t0 * pmax, pmax, min(per_chunk, full - t0)))
    if conv_dim % pmax:
        chunks.append((full * pmax, conv_dim % pmax, 1))
    return chunks


@nki.jit
def conv1d_decode_kernel(mixed_qkv, conv_weight, conv_state):
    """Stage 2 standalone, HBM to HBM: one depthwise causal conv1d decode step + SiLU.

    Dimensions:
        B: batch; conv_dim: channels (2*nk*dk + nv*dv); K: conv window, 2..4

    Args:
        mixed_qkv (nl.ndarray): [B, conv_dim] @ HBM, bf16, the new token (in_proj output).
        conv_weight (nl.ndarray): [conv_dim, K] @ HBM, fp32, conv1d.weight.squeeze(1).
        conv_state (nl.ndarray): [B, conv_dim, K] @ HBM, bf16, the last K tokens, oldest in column 0
            (the Hugging Face K-column convention).

    Returns:
        conv_out (nl.ndarray): [B, conv_dim] @ shared HBM, bf16, silu(conv) rounded once.
        new_conv_state (nl.ndarray): [B, conv_dim, K] @ shared HBM, bf16, the window
            [conv_state[..., 1:], mixed_qkv]: bit-exact copies, column 0 of the input dropped.

    Notes:
        - Rejects (an assertion naming the argument): wrong ranks; conv_weight rows or conv_state
          dims that disagree with mixed_qkv's conv_dim and B; K outside K_MIN..K_MAX or different
          in conv_weight and conv_state; dtypes other than the above. Inputs are never written.
        - conv_dim is tiled by 128 channels on partitions; a partial last tile is a chunk of its
          own. Several tiles go through each instruction together, at most WINDOW_FREE_MAX window
          elements per partition per chunk.
        - Every HBM transfer moves rows through kernels.layout (contiguous row DMAs, TensorE
          transposes), never a transposing DMA of 2-byte runs.

    Pseudocode:
        window = concatenate([conv_state[:, :, 1:], mixed_qkv[:, :, None]], axis=2)   # [B, C, K]
        acc = (window.astype(float32) * conv_weight[None]).sum(axis=2)                # fp32
        conv_out = (acc * sigmoid(acc)).astype(bfloat16)
        new_conv_state = window
    """
    expect_rank(mixed_qkv, "mixed_qkv", 2)
    expect_rank(conv_weight, "conv_weight", 2)
    expect_rank(conv_state, "conv_state", 3)
    B, conv_dim = mixed_qkv.shape
    K = conv_weight.shape[1]
    expect(conv_weight.shape[0] == conv_dim, "conv_weight",
           f"conv_dim = {conv_dim} rows (mixed_qkv.shape[1])", f"shape {list(conv_weight.shape)}")
    expect(K_MIN <= K <= K_MAX, "conv_weight",
           f"a conv window K = conv_weight.shape[1] in {K_MIN}..{K_MAX} (the widths "
           f"causal-conv1d supports)", K)
    expect_shape(conv_state, "conv_state", (B, conv_dim, K))
    expect_dtype(mixed_qkv, "mixed_qkv", nl.bfloat16)
    expect_dtype(conv_weight, "conv_weight", nl.float32)
    expect_dtype(conv_state, "conv_state", nl.bfloat16)

    conv_out = nl.ndarray((B, conv_dim), nl.bfloat16, buffer=nl.shared_hbm, name="conv_out")
    new_state = nl.ndarray((B, conv_dim, K), nl.bfloat16, buffer=nl.shared_hbm,
                           name="new_conv_state")
    conv1d_decode_hbm(conv_out, new_state, mixed_qkv, conv_weight, conv_state)
    return conv_out, new_state


def conv1d_decode_hbm(conv_out, new_state, mixed_qkv, conv_weight, conv_state):
    """The stage's HBM -> HBM body, chunk by chunk of channel tiles. Called by the standalone entry
    point and by the fused kernel of composition step 2 (HBM scratch)."""
    B, conv_dim = mixed_qkv.shape
    K = conv_weight.shape[1]
    for c0, P, nt in channel_chunks(conv_dim, B, K):
        # HBM rows [B, nt*P] -> channel-major tiles: channel c0 + P*t + p on partition p, tile t
        x = nl.ndarray((P, nt, B), nl.bfloat16, name="x")
        load_channel_major(x, mixed_qkv[:, c0:c0 + nt * P])
        out = nl.ndarray((P, nt, B), nl.bfloat16, name="out")
        conv1d_decode_channels(out, new_state, x, conv_weight, conv_state, c0)
        store_rows(conv_out[:, c0:c0 + nt * P], out)
