"""Errors and warnings nkicpu raises, and the one helper that words the errors.

A broken hardware rule raises `NkiValidationError` (the SDK's name for it) with the rule's short
name in brackets first, so a reader sees at once which rule a kernel broke and where. Where the
hardware computes something all the same, only not what the function means, nkicpu warns instead.
"""


class NkiValidationError(Exception):
    """A kernel broke a documented NKI / trn2 hardware rule."""


class ActivationRangeWarning(UserWarning):
    """A ScalarE function got an input outside its documented valid range: the engine extrapolates
    its polynomial there, so the result is not the function's value. This project's tests turn it
    into an error (pyproject.toml, filterwarnings)."""


def rule_error(rule, where, message):
    return NkiValidationError(f"[{rule}] {where}: {message}")


def not_modeled(what):
    return NotImplementedError(f"nkicpu does not model {what}; it runs only the NKI subset this project uses")
