"""The host side of the serving forms (gdn_block_tkg_pool, gdn_layer_tkg): the check of their slot
indices before a launch.

The kernel cannot check index values: it reads them when its DMAs run, and skips an out-of-range
slot (the DGE's oob_mode.skip, how it skips padding rows) instead of failing. So a caller checks
them here, as a serving engine checks its block tables before a launch. Plain Python on the
indices' values (a few hundred at most), so that it imports nothing beside the kernels.
"""


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
    if (isinstance(slots, bool) or type(slots).__name__ == "bool_"
            or not hasattr(slots, "__index__")):
        raise TypeError(f"slots: expected an int (the pools' N), got {type(slots).__name__}")
    slots = slots.__index__()
    if slots < 1:
        raise ValueError(f"slots: expected at least 1 slot, got {slots}")
    _check_int32(read_indices, "read_indices")
    _check_int32(write_indices, "write_indices")
    if len(read_indices.shape) != 1:
        raise ValueError(f"read_indices: expected shape [B], got {list(read_indices.shape)}")
    B = read_indices.shape[0]
    shape = list(write_indices.shape)
    if len(shape) != 2 or shape[0] != B or shape[1] < 1:
        raise ValueError(f"write_indices: expected shape [B, T] = [{B}, T >= 1] (B of "
                         f"read_indices), got {shape}")
    read, write = read_indices.tolist(), write_indices.tolist()
    for b in range(B):
        if not -1 <= read[b] < slots:
            raise ValueError(f"read_indices: expected -1 (a padding row) or a slot 0 .. slots - 1 "
                             f"(slots = {slots}), got read_indices[{b}] = {read[b]}")
    kept = []                                  # (b, t) of every kept checkpoint, row by row
    for b in range(B):
        for t in range(shape[1]):
            if write[b][t] >= slots:
                raise ValueError(f"write_indices: expected a slot 0 .. slots - 1, or negative (not "
                                 f"kept) (slots = {slots}), got write_indices[{b}, {t}] = "
                                 f"{write[b][t]}")
            if write[b][t] >= 0:
                kept.append((b, t))
    for b, t in kept:
        if read[b] < 0:
            raise ValueError(f"write_indices: padding row {b} (read_indices[{b}] = -1) must write "
                             f"no slot, got write_indices[{b}, {t}] = {write[b][t]}")
    writers = {}                               # slot -> the [b, t] that write it
    for b, t in kept:
        writers.setdefault(write[b][t], []).append([b, t])
    twice = sorted(slot for slot, at in writers.items() if len(at) > 1)
    if twice:
        raise ValueError(f"write_indices: slot {twice[0]} is written more than once in one launch, "
                         f"at {writers[twice[0]]}")
    for b, t in kept:
        others = [c for c in range(B) if c != b and read[c] == write[b][t]]
        if others:
            raise ValueError(f"write_indices: write_indices[{b}, {t}] = {write[b][t]} is the slot "
                             f"sequence {others[0]} reads (read_indices[{others[0]}]); "
                             f"a sequence may write only its own read slot or a slot no one reads")


def _check_int32(x, arg):
    """x a NumPy or torch int32 array; TypeError for anything else."""
    kind = type(x).__module__.split(".")[0]
    if kind not in ("numpy", "torch") or not hasattr(x, "tolist"):
        raise TypeError(f"{arg}: expected a NumPy or torch int32 array, got {type(x).__name__}")
    if str(x.dtype) not in ("int32", "torch.int32"):
        raise TypeError(f"{arg}: expected dtype int32, got {x.dtype}")
