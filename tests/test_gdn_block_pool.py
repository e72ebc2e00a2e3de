"""The pool form, `gdn_block_tkg_pool`: states read and written in place by slot.

Each launch is held against `gdn_block_tkg_verify` run on copies of the rows it gathers (the same
arithmetic: bit for bit): every live row's output, every kept checkpoint in its write slot, padding
rows' outputs exactly 0, every other slot untouched bit for bit, the other inputs never written.
Then the host-side index check, error by error.
"""
import numpy as np
import pytest
import torch

import kernels  # noqa: F401  registers `nki`
import nki
import nkicpu
from nkicpu.profile import capture_slots, profile_capture
from kernels import check_pool_indices, gdn_block_tkg_pool, gdn_block_tkg_verify
from kernels.configs import GDNShape, model_shard
from tests.gdn_testing import pool_case, shape_id

NEXT_TP4 = model_shard("Qwen3-Next-80B", 4)
SHARED_KEY_HEAD = model_shard("Qwen3.5-397B-A17B", 16)     # nk 1, nv 4: both programs read it
TINY = GDNShape(B=1, H=256, nk=2, nv=6, dk=16, dv=32, name="tiny G3")


def launch(kernel, lnc):
    return nki.simulate(kernel[lnc] if lnc > 1 else kernel)


def same_bits(a, b):
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


def run_pool(shape, T, N, read, write, lnc=1, seed=0):
    """Launch the pool form and check it against the verify form on the gathered copies."""
    x, args, read, write = pool_case(shape, T, N, read, write, seed)
    check_pool_indices(read, write, N)
    before = {k: np.copy(v) for k, v in args.items()}
    conv_pool, state_pool = args["conv_state"], args["recurrent_state"]
    out, conv_back, state_back = launch(gdn_block_tkg_pool, lnc)(*args.values(), read, write)
    assert same_bits(conv_back, conv_pool) and same_bits(state_back, state_pool)  # returned pools
    want_out, windows, states = launch(gdn_block_tkg_verify, lnc)(*x.values())
    live = read >= 0
    assert same_bits(out[live], want_out[live]), "live rows' outputs"
    assert np.all(out[~live] == 0) and not np.signbit(out[~live].astype(np.float32)).any()
    written = np.zeros(N, bool)
    for b, t in np.argwhere(write >= 0):
        assert same_bits(conv_pool[write[b, t]], windows[b, t]), f"window of ({b}, {t})"
        assert same_bits(state_pool[write[b, t]], states[b, t]), f"state of ({b}, {t})"
        written[write[b, t]] = True
    assert same_bits(conv_pool[~written], before["conv_state"][~written]), "untouched windows"
    assert same_bits(state_pool[~written], before["recurrent_state"][~written]), "untouched states"
    for name in args:
        if name not in ("conv_state", "recurrent_state"):
            assert same_bits(args[name], before[name]), f"{name} was written"
    return out


@pytest.mark.parametrize("lnc", (1, 2))
@pytest.mark.parametrize("shape", [TINY, NEXT_TP4], ids=shape_id)
def test_decode_step_in_place_with_a_padding_row(shape, lnc):
    """T = 1, each sequence writes the slot it read; row 2 is padding."""
    run_pool(shape, 1, 8, [5, 0, -1, 3], [[5], [0], [-1], [3]], lnc)


@pytest.mark.parametrize("lnc", (1, 2))
@pytest.mark.parametrize("shape", [TINY, NEXT_TP4], ids=shape_id)
def test_verify_step_keeps_every_draft_checkpoint(shape, lnc):
    """T = 4: every token's window and state in its own slot (one not kept), a padding row."""
    run_pool(shape, 4, 16, [2, -1, 9], [[2, 4, 6, 7], [-1, -1, -1, -1], [10, -1, 12, 13]], lnc)


def test_shared_key_head_on_two_cores_in_place():
    """Both programs read the one key head's window; the first writes it after a core barrier,
    so the second reads the old window even in place."""
    run_pool(SHARED_KEY_HEAD, 1, 4, [1, 3], [[1], [3]], lnc=2)
    run_pool(SHARED_KEY_HEAD, 2, 6, [1, 3], [[0, 1], [2, 3]], lnc=2)


def test_states_through_hbm_between_tokens():
    """B = 32 at T = 2: the ring cannot hold the state between tokens, which goes through a
    scratch tensor and is copied to the kept checkpoints' slots."""
    B = 32
    read = np.arange(B, dtype=np.int32) * 2
    write = np.stack([read + 1, read], axis=1)
    write[5, 0] = -1
    run_pool(NEXT_TP4, 2, 2 * B, read, write)


def test_pool_of_one_slot_and_untouched_large_pool():
    run_pool(TINY, 1, 1, [0], [[0]])
    run_pool(TINY, 1, 64, [40], [[7]])


# -- bad indices: the host-side check ------------------------------------------------------------

def idx(*rows):
    return np.asarray(rows, dtype=np.int32)


BAD = [
    ("read_indices", ValueError, "expected -1 (a padding row) or a slot", idx(8), idx([0])),
    ("read_indices", ValueError, "got read_indices[0] = -2", idx(-2), idx([-1])),
    ("write_indices", ValueError, "got write_indices[1, 0] = 8", idx(0, 1), idx([0], [8])),
    ("write_indices", ValueError, "padding row 1", idx(0, -1), idx([0], [3])),
    ("write_indices", ValueError, "slot 4 is written more than once", idx(0, 1), idx([4], [4])),
    ("write_indices", ValueError, "the slot sequence 1 reads", idx(0, 1), idx([1], [2])),
    ("write_indices", ValueError, "expected shape [B, T] = [2, T >= 1]", idx(0, 1), idx([0])),
    ("read_indices", ValueError, "expected shape [B]", idx([0, 1]), idx([0], [1])),
]


@pytest.mark.parametrize("arg, error, text, read, write", BAD, ids=[b[2] for b in BAD])
def test_bad_indices_are_named(arg, error, text, read, write):
    with pytest.raises(error, match=arg) as e:
        check_pool_indices(read, write, 8)
    assert text in str(e.value)


def test_index_types_are_named():
    with pytest.raises(TypeError, match="read_indices: expected dtype int32, got int64"):
        check_pool_indices(np.zeros(2, np.int64), idx([0], [1]), 8)
    with pytest.raises(TypeError, match="write_indices: expected dtype int32, got torch.int64"):
        check_pool_indices(torch.zeros(2, dtype=torch.int32), torch.zeros((2, 1), dtype=torch.int64),
                           8)
    with pytest.raises(TypeError, match="read_indices: expected a NumPy or torch int32 array"):
        check_pool_indices([0, 1], idx([0], [1]), 8)
    with pytest.raises(TypeError, match="slots: expected an int"):
        check_pool_indices(idx(0, 1), idx([0], [1]), 8.0)


def test_good_indices_pass():
    """In place, checkpoints to fresh slots, padding, an unkept draft: no error, nothing
    returned; torch tensors too."""
    assert check_pool_indices(idx(3, -1, 0), idx([3, 5], [-1, -1], [-1, 0]), 8) is None
    check_pool_indices(torch.tensor([3, 0], dtype=torch.int32),
                       torch.tensor([[3], [0]], dtype=torch.int32), 4)


def test_kernel_names_bad_index_arguments():
    """What the kernel can check when it is traced (shapes, dtypes) it names."""
    x, args, read, write = pool_case(TINY, 1, 4, [0, 1], [[0], [1]])
    with pytest.raises(AssertionError, match=r"write_indices: expected shape \[2, 1\]"):
        launch(gdn_block_tkg_pool, 1)(*args.values(), read, write.reshape(1, 2))
    with pytest.raises(AssertionError, match="read_indices: expected dtype int32"):
        launch(gdn_block_tkg_pool, 1)(*args.values(), read.astype(np.uint32), write)
    args["conv_state"] = args["conv_state"][:3]
    with pytest.raises(AssertionError, match=r"conv_state_pool: expected slots conv_state_pool"):
        launch(gdn_block_tkg_pool, 1)(*args.values(), read, write)


def test_cost_does_not_depend_on_the_pool_size():
    """A pool of B slots and one of 1024: the same HBM bytes moved and the same modeled times."""
    profiles = []
    for N in (4, 1024):
        x, args, read, write = pool_case(TINY, 1, N, [N - 1, 0, -1, 2], [[N - 1], [0], [-1], [2]])
        cap = nkicpu.capture(gdn_block_tkg_pool)(*args.values(), read, write)
        profiles.append(profile_capture(cap))
    a, b = profiles
    assert (a.hbm_read_bytes, a.hbm_write_bytes) == (b.hbm_read_bytes, b.hbm_write_bytes)
    assert (a.best_us, a.total_us) == (b.best_us, b.total_us)


@pytest.mark.parametrize("shape, lnc", [(NEXT_TP4, 1), (SHARED_KEY_HEAD, 2)],
                         ids=["one core", "shared key head"])
def test_every_pool_read_ends_before_a_write_of_that_pool_starts(shape, lnc):
    """In place, on the modeled timeline: on each core the pool's reads end before any DMA writes
    that pool (rule 2's waits), and where two cores read one key head's window every window read
    of either core ends before any window write starts (the core barrier)."""
    x, args, read, write = pool_case(shape, 1, 4, [1, 3], [[1], [3]])
    kernel = gdn_block_tkg_pool[lnc] if lnc > 1 else gdn_block_tkg_pool
    cap = nkicpu.capture(kernel)(*args.values(), read, write)
    slots = capture_slots(cap)
    for position in (6, 10):                               # conv_state_pool, recurrent_state_pool
        pool = cap.arguments[position]
        last_read, first_write = {}, {}
        for i in cap.instructions:
            s = slots[i.index]
            if any(a.alloc == pool for a in i.reads):
                last_read[i.core] = max(last_read.get(i.core, 0.0), s.end_us)
            if i.opcode == "dma_copy" and any(a.alloc == pool for a in i.writes):
                first_write[i.core] = min(first_write.get(i.core, float("inf")), s.start_us)
        assert sorted(last_read) == sorted(first_write) == list(range(lnc))
        for c in range(lnc):
            assert last_read[c] <= first_write[c]
        if lnc > 1 and position == 6:
            assert max(last_read.values()) <= min(first_write.values())


def test_two_programs_never_write_the_same_pool_element():
    """On two cores sharing a key head (its window read by both), every element of either pool is
    written by one program only: the first owns the shared head's window."""
    x, args, read, write = pool_case(SHARED_KEY_HEAD, 2, 6, [1, 3], [[0, 1], [2, 3]])
    cap = nkicpu.capture(gdn_block_tkg_pool[2])(*args.values(), read, write)
    for position in (6, 10):
        pool = cap.arguments[position]
        written = {0: set(), 1: set()}
        for i in cap.instructions:
            for a in i.writes:
                if a.alloc == pool and i.opcode == "dma_copy":     # a barrier writes none
                    written[i.core].update(int(e) for e in a.indices())
        assert written[0] and written[1] and not written[0] & written[1]
