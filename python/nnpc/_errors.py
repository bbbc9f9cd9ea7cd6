"""The exceptions nnpc raises (the Rust core raises these classes)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class Error(Exception):
    """Base class of nnpc's own errors. ``str(e)`` is the message, ending in ``; help: FIX``
    where the error names a fix; ``e.help`` is that fix alone (``None`` when there is none)."""

    def __init__(self, message: str, help: Optional[str] = None):
        super().__init__(message if help is None else f"{message}; help: {help}")
        self.help = help


class FirmwareError(Error, ValueError):
    """The firmware does not check (or cannot be lowered).

    ``str(e)`` is the rendered diagnostic, as ``nnpc check`` prints it (source line and
    caret included). ``e.diagnostics`` is the structured list: one dict per diagnostic with
    ``code`` (e.g. ``"nnp::unknown-mnemonic"``), ``severity``, ``line`` and ``column``
    (1-based), ``message`` and ``help`` (``None`` when there is none).
    """

    def __init__(self, message: str, diagnostics: Optional[List[Dict[str, Any]]] = None):
        super().__init__(message)
        self.message = message
        self.diagnostics: List[Dict[str, Any]] = list(diagnostics or [])

    def __str__(self) -> str:
        return self.message


class DataError(Error, ValueError):
    """Weights, inputs or hardware arrays that the program cannot use: a missing tensor, a
    wrong shape, a non-finite value, batches that disagree. The message names the tensor and
    the fix, as the command line's does."""


class ArgumentError(DataError, TypeError):
    """An argument that is not a value the parameter takes (``batch=-1``, ``seed="7"``,
    ``axis=3`` of a 2-d array): the message names the parameter, the value and the accepted
    range. Both a :class:`DataError` (``ValueError``) and a ``TypeError``, so either
    ``except`` catches it."""


class ExecutionError(Error, RuntimeError):
    """A run failed: a runtime error of the firmware (a NaN or infinity the target forbids,
    a read of an unwritten register on the emulator), with the firmware line it points at."""
