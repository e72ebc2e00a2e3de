"""The host side of the serving forms (gdn_block_tkg_pool, gdn_layer_tkg): the check of their slot
indices before a launch, and their arguments for a benchmark row (pool_inputs, layer_inputs).

The kernel cannot check index values: it reads them when its DMAs run, and skips an out-of-range
slot (the DGE's oob_mode.skip, how it skips padding rows) instead of failing. So a caller checks
them here, as a serving engine checks its block tables before a launch.
"""
import numpy as np


def check_pool_indices(read_indices, write_indices, slots):
    """Check gdn_block_tkg_pool's indices against a pool of `slots` slots; return nothing.

    Args:
        read_indices: [B] int32 (NumPy or torch): the slot each sequence starts from, or -1 for a
            padding row.
        write_indices: [B, T] int32: the slot that takes sequence b's window and state after
            token t; negative where that checkpoint is not kept (every one of a padding row).
        slots: int, the pools' N.

    Raises:
        TypeError: an argument of the wrong type or dtype (int32 only: the kernel's index tiles).
        ValueError: naming the argument, the rule and the first offending entry: a shape that is
            not [B] and [B, T]; an index outside -1 .. slots - 1 (read) or above slots - 1
            (write); a padding row with a write slot; a write slot used twice in one launch; a
            write slot that another sequence reads (its new state would replace the one that
            sequence is about to read: the programs and DMAs of a launch give no order between
            two sequences).
    """
    if isinstance(slots, (bool, np.bool_)) or not isinstance(slots, (int, np.integer)):
        raise TypeError(f"slots: expected an int (the pools' N), got {type(slots).__name__}")
    if slots < 1:
        raise ValueError(f"slots: expected at least 1 slot, got {slots}")
    read = _int32_array(read_indices, "read_indices")
    write = _int32_array(write_indices, "write_indices")
    if read.ndim != 1:
        raise ValueError(f"read_indices: expected shape [B], got {list(read.shape)}")
    if write.ndim != 2 or write.shape[0] != read.shape[0] or write.shape[1] < 1:
        raise ValueError(f"write_indices: expected shape [B, T] = [{read.shape[0]}, T >= 1] (B of "
                         f"read_indices), got {list(write.shape)}")
    _in_range(read, -1, slots, "read_indices", "-1 (a padding row) or a slot 0 .. slots - 1")
    _in_range(write, None, slots, "write_indices", "a slot 0 .. slots - 1, or negative (not kept)")
    for b in np.flatnonzero(read < 0):
        if (write[b] >= 0).any():
            t = int(np.flatnonzero(write[b] >= 0)[0])
            raise ValueError(f"write_indices: padding row {b} (read_indices[{b}] = -1) must write "
                             f"no slot, got write_indices[{b}, {t}] = {write[b, t]}")
    kept = write[write >= 0]
    values, counts = np.unique(kept, return_counts=True)
    if (counts > 1).any():
        slot = int(values[counts > 1][0])
        where = [list(map(int, i)) for i in np.argwhere(write == slot)]
        raise ValueError(f"write_indices: slot {slot} is written more than once in one launch, at "
                         f"{where}")
    for b, t in np.argwhere(write >= 0):
        readers = np.flatnonzero(read == write[b, t])
        others = readers[readers != b]
        if others.size:
            raise ValueError(f"write_indices: write_indices[{b}, {t}] = {write[b, t]} is the slot "
                             f"sequence {int(others[0])} reads (read_indices[{int(others[0])}]); "
                             f"a sequence may write only its own read slot or a slot no one reads")


def _int32_array(x, arg):
    """x as a NumPy int32 array, from NumPy or torch; TypeError for anything else."""
    if type(x).__module__.startswith("torch"):
        if str(x.dtype) != "torch.int32":
            raise TypeError(f"{arg}: expected dtype int32, got {x.dtype}")
        return x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{arg}: expected a NumPy or torch int32 array, got {type(x).__name__}")
    if x.dtype != np.int32:
        raise TypeError(f"{arg}: expected dtype int32, got {x.dtype}")
    return x


def _in_range(x, low, slots, arg, expected):
    bad = x >= slots
    if low is not None:
        bad = bad | (x < low)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise ValueError(f"{arg}: expected {expected} (slots = {slots}), got {arg}{list(i)} = "
                         f"{x[i]}")


def pool_inputs(inputs):
    """The pool form's arguments for a step whose windows and states are inputs' (NumPy, by
    kernels.registry.POOL_ARGS name): pools of N = B * T slots, sequence b reading slot b in place
    and keeping token t's checkpoint at slot t * B + b (the sweep's rows; a pool's HBM bytes do not
    depend on N)."""
    B, T, _ = inputs["hidden"].shape
    conv, state = inputs["conv_state"], inputs["recurrent_state"]
    x = dict(inputs)
    x["conv_state_pool"] = np.concatenate([conv] * T)
    x["recurrent_state_pool"] = np.concatenate([state] * T)
    x["read_indices"] = np.arange(B, dtype=np.int32)
    x["write_indices"] = (np.arange(B, dtype=np.int32)[:, None]
                          + B * np.arange(T, dtype=np.int32)[None, :]).astype(np.int32)
    return x


def layer_inputs(inputs):
    """The layer form's two weights beside a step's inputs (NumPy, by kernels.registry.LAYER_ARGS
    name), drawn as kernels.reference.make_inputs draws the block's, from their own stream:
    input_norm_weight ~ 0.1 N(0, 1) (zero-centred, as transformers stores it) and
    W_out ~ N(0, 1 / value_dim), so that the partial sums are O(1)."""
    H = inputs["hidden"].shape[2]
    value_dim = inputs["W_in_z"].shape[1]
    rng = np.random.default_rng([H, value_dim])
    x = dict(inputs)
    x["input_norm_weight"] = (0.1 * rng.standard_normal(H)).astype(np.float32)
    x["W_out"] = (rng.standard_normal((value_dim, H), dtype=np.float32)
                  / np.sqrt(max(value_dim, 1))).astype(inputs["W_in_z"].dtype)
    return x
