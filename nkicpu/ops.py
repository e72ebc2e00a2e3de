"""ALU operators and activation functions: the `nl.*` objects passed as `op=` to `nisa` calls.

Each is an `Op` with its fp32 NumPy semantics. `alu` ops run on Vector/GpSimd (binary, or unary
with operand0 None/0); `act` ops are ScalarE activation functions. Calling one, `nl.add(x, y)`, is
the experimental wrapper over nisa (nkicpu/language_wrappers.py).
"""
import math

import numpy as np

F32 = np.float32


class Op:
    def __init__(self, name, fn, alu=False, act=False, unary=False, reduce=None, bitvec=False):
        self.name, self.fn = name, fn
        self.alu, self.act, self.unary, self.bitvec = alu, act, unary, bitvec
        self.reduce = reduce  # the NumPy ufunc that reduces with this op, if it is a legal reduction

    def __repr__(self):
        return f"nl.{self.name}"

    # What calling an operator does: the experimental nl wrapper (language_wrappers.call, which
    # sets it when imported; this module imports nothing of nkicpu, so every module may import it).
    wrapper = None

    def __call__(self, *args, **kwargs):
        return Op.wrapper(self, *args, **kwargs)


def _cmp(f):
    return lambda x, y: f(x, y).astype(F32)


def _silu(x):
    return x * _sigmoid(x)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(F32)


def _gelu_tanh(x):
    return (0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))).astype(F32)


_erf = np.vectorize(math.erf, otypes=[np.float64])  # NumPy has no erf


def _gelu(x):
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (the NKI library's reference of nl.gelu:
    LIB test/integration/nkilib/utils/test_kernel_common.py `gelu`)."""
    x = np.asarray(x, dtype=np.float64)
    return (0.5 * x * (1 + _erf(x / np.sqrt(2)))).astype(F32)


def _gelu_apprx_sigmoid(x):
    """x * sigmoid(1.702 x): the SDK docs name it only "GELU approximation using sigmoid"; the factor
    is the NKI library's (LIB test/integration/nkilib/utils/test_kernel_common.py `gelu_apprx_sigmoid`,
    core/moe/moe_cte/moe_cte_torch_utils.py) and Hendrycks & Gimpel's (arXiv:1606.08415)."""
    return (x * _sigmoid(F32(1.702) * x)).astype(F32)


def _silu_dx(x):
    s = _sigmoid(x)
    return (s * (1 + x * (1 - s))).astype(F32)


def _safe(f):
    def g(*a):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return f(*a)
    return g


BINARY = {
    "add": (np.add, np.add), "subtract": (np.subtract, np.subtract), "multiply": (np.multiply, np.multiply),
    "maximum": (np.maximum, np.maximum), "minimum": (np.minimum, np.minimum),
    "equal": (_cmp(np.equal), None), "not_equal": (_cmp(np.not_equal), None),
    "greater": (_cmp(np.greater), None), "greater_equal": (_cmp(np.greater_equal), None),
    "less": (_cmp(np.less), None), "less_equal": (_cmp(np.less_equal), None),
    "logical_and": (_cmp(np.logical_and), None), "logical_or": (_cmp(np.logical_or), None),
    "logical_xor": (_cmp(np.logical_xor), None), "power": (np.power, None),
}


def _logical_right_shift(x, n):
    """nl.right_shift is a logical shift (zero fill) on every integer type; NumPy's is arithmetic on signed ones."""
    x = np.asarray(x)
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.right_shift(u, np.asarray(n).astype(u.dtype)).view(x.dtype)


BITVEC = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": _logical_right_shift,
}
UNARY_ALU = {"abs": np.abs, "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x,
             "square": np.square, "relu": lambda x: np.maximum(x, 0)}
ACTIVATIONS = {
    "copy": lambda x: x, "square": np.square, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x, "sigmoid": _sigmoid,
    "silu": _silu, "silu_dx": _silu_dx, "softplus": lambda x: np.logaddexp(F32(0), x), "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0), "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": _gelu_apprx_sigmoid, "sign": np.sign, "abs": np.abs,
    "sin": np.sin, "arctan": np.arctan,
}

OPS = {}
for _name, (_fn, _red) in BINARY.items():
    OPS[_name] = Op(_name, _safe(_fn), alu=True, reduce=_red)
for _name, _fn in BITVEC.items():
    OPS[_name] = Op(_name, _fn, alu=True, bitvec=True, reduce=_fn if _name.startswith("bitwise") else None)
for _name in set(UNARY_ALU) | set(ACTIVATIONS):
    _fn = ACTIVATIONS.get(_name) or UNARY_ALU[_name]
    OPS[_name] = Op(_name, _safe(_fn), alu=_name in UNARY_ALU, act=_name in ACTIVATIONS, unary=True)
# No divide ALU op exists on the hardware (multiply by a reciprocal); it is named so it can be rejected.
OPS["divide"] = Op("divide", _safe(np.divide))
