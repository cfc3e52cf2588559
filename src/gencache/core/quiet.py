"""Text made safe to print: anything a terminal cannot encode escaped, a warning on one line."""

from __future__ import annotations

__all__ = ["one_line", "printable"]


def printable(text: str) -> str:
    """``text`` with anything the terminal cannot encode (lone surrogates from a damaged file) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def one_line(message: Warning | str) -> str:
    """A warning's text on one line."""
    return printable(" ".join(str(message).split()))
