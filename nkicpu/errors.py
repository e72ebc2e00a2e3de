"""Errors and warnings nkicpu raises, and the one helper that words the errors.

A broken hardware rule raises `NkiValidationError` (the SDK's name for it) with the rule's short
name in brackets first, so a reader sees at once which rule a kernel broke and where. Where the
hardware computes something all the same, only not what the function means, nkicpu warns instead,
and so it does where a rule rests on a reported compile error the documentation does not back.
"""


class NkiValidationError(Exception):
    """A kernel broke a documented NKI / trn2 hardware rule."""


class DmaIndexError(IndexError):
    """A DMA's dynamic index (`.ap(scalar_offset=...)` / `vector_offset=`) is out of range under
    `oob_mode=error`, the default: "out-of-bound address checking is turned on automatically during
    execution. By default a runtime error is raised" (SDK isa stub, dma_copy). An IndexError, so code
    that catches IndexError still does. `instruction`, `argument` ("src" / "dst"), `index`,
    `partition` (vector_offset; None for scalar_offset) and `valid` (first, last valid index, or None
    when none is) say which index failed."""

    def __init__(self, message, instruction, argument, index, partition, valid):
        super().__init__(message)
        self.instruction, self.argument, self.index, self.partition, self.valid = (
            instruction, argument, index, partition, valid)


class ActivationRangeWarning(UserWarning):
    """A ScalarE function got an input outside its documented valid range: the engine extrapolates
    its polynomial there, so the result is not the function's value. This project's tests turn it
    into an error (pyproject.toml, filterwarnings)."""


class NkiRuleWarning(UserWarning):
    """A kernel did what a rule would refuse, but the rule's only evidence is a compile error
    reported to this project while the documentation allows it (and the NKI library may ship it):
    nkicpu runs it as documented and warns, naming the rule and its evidence. This project's tests
    turn it into an error (pyproject.toml), so its own kernels keep to the rule."""


class NkiDeprecationWarning(DeprecationWarning):
    """A kernel used a name NKI 0.8 deprecates (nkicpu/versions.py): it still runs as in NKI 0.7."""


def rule_warning(rule, where, message):
    return NkiRuleWarning(f"[{rule}] {where}: {message}")


def rule_error(rule, where, message):
    return NkiValidationError(f"[{rule}] {where}: {message}")


def not_modeled(what):
    return NotImplementedError(f"nkicpu does not model {what}; it runs only the NKI subset this project uses")
