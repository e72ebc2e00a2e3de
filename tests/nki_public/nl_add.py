# Mirrors aws-neuron/aws-neuron-sdk nki/examples/simulate/nki_simulate_example.py (add_kernel; the
# same kernel is nki_tensor_add_kernel in nki/examples/getting_started_baremetal.py) and
# nki/test/test_nki_simulate_kernel.py (print_kernel) at commit
# 81ce03ae261e12925e53437a0f690478e6366155. Written for this project, not copied.
# print_kernel's source imports the legacy neuronxcc.nki and allocates its output with
# buffer=nl.hbm; here the output is nl.shared_hbm, which kernel outputs need in the current API.
"""The SDK's first kernels in the experimental nl wrappers: nl.load, nl.add, nl.store, nl.empty_like."""
import nki
import nki.language as nl


@nki.jit
def add_kernel(a_ptr, b_ptr):
    """a + b for inputs of at most 128 rows, in one tile each."""
    a = nl.load(a_ptr)
    b = nl.load(b_ptr)
    result = nl.add(a, b)
    out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=result)
    return out


@nki.jit
def print_kernel(a_tensor):
    """Copy a_tensor through SBUF, printing the tile on the way."""
    b = nl.empty_like(a_tensor, buffer=nl.shared_hbm)
    a = nl.load(a_tensor)
    nl.device_print("value of a:", a)
    nl.store(b, value=a)
    return b
