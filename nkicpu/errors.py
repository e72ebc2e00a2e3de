"""Errors nkicpu raises, and the one helper that words them.

A broken hardware rule raises `NkiValidationError` (the SDK's name for it) with the rule's short
name in brackets first, so a reader sees at once which rule a kernel broke and where.
"""


class NkiValidationError(Exception):
    """A kernel broke a documented NKI / trn2 hardware rule."""


def rule_error(rule, where, message):
    return NkiValidationError(f"[{rule}] {where}: {message}")


def not_modeled(what):
    return NotImplementedError(f"nkicpu does not model {what}; it runs only the NKI subset this project uses")
