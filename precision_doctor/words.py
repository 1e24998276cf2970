"""Words every layer writes (a base module: the emitted scripts' comments as much as the reports): `counted`."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, plural unless one: "1 sample", "3 held-out samples" (`plural`: where it is not noun + "s")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def repeat_words(label: str, earlier: str) -> str:
    """A sample that repeats an earlier one, in words."""
    return f"{label} is given twice" if label == earlier else f"{label} holds the same values as {earlier}"
