"""Names from a model are untrusted text: which can be written into every consumer (a shell script, a
command line, a `#` comment, a list of one name per line, a report), and how to show any of them.

Shell arguments are quoted (`shlex.quote`) wherever a name lands in a command, so a name is unsafe only when
quoting cannot carry it everywhere: a character that breaks a line or a comment (newline, carriage return,
NUL and every other control character, Unicode's line and paragraph separators), the bidirectional controls
that make a line display otherwise than it runs, or bytes that are not UTF-8 (protobuf then hands over
`bytes`). `graph.model.name_nodes` renames such nodes; `shown` prints any text with them escaped.
"""

from __future__ import annotations

import unicodedata

# Bidirectional embedding, override and isolate controls ("Trojan Source", CVE-2021-42574).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_BREAKS = frozenset("\u2028\u2029\x85")


def _bad_char(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cs") or ch in _BIDI or ch in _BREAKS


def unsafe(name: object) -> str | None:
    """Why `name` cannot be written safely into every consumer (None: it can)."""
    if not isinstance(name, str):
        return "not UTF-8 text"
    bad = next((ch for ch in name if _bad_char(ch)), None)
    return None if bad is None else f"holds the control character {ascii(bad)[1:-1]}"


def shown(text: object) -> str:
    """`text` as one printable line: control characters and bytes that are not UTF-8 escaped as Python
    writes them (`\\n`, `\\x00`, `\\u202e`, `\\xff`)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="backslashreplace")
    return "".join(ascii(ch)[1:-1] if _bad_char(ch) else ch for ch in str(text))
