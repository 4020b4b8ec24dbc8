"""What the tool prints of its inputs, made inert for the programs that read it.

Recipe values, YAML keys, file and function names reach every output. Two readers execute text:

* a terminal runs control sequences (``ESC ]0;title BEL`` retitles the window, ``ESC [2J`` clears it,
  a carriage return overwrites the line; C1 controls such as U+009B are escape sequences too);
* GitHub Actions reads every line of a step's output as a possible workflow command: a line that
  starts with ``::`` after leading whitespace (``::error file=…::…`` becomes an annotation,
  ``::add-mask::`` hides text, ``::stop-commands::`` turns command processing off) and the older
  ``##[command]`` form anywhere in a line. The runner splits lines at ``\\r`` as well as ``\\n``.

So a printed value gets its control characters escaped the way Python's ``repr`` writes them
(``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\u2028``; an undecodable byte of a file name, which Python holds
as a lone surrogate, as ``\\xff``), bidirectional formatting controls escaped (they reorder what is
shown: CVE-2021-42574), ``##[`` written ``##\\u005b`` and a ``::`` that would start a line ``\\u003a:``
(``\\u`` escapes: valid inside JSON strings too, where they read back as the same character).

One function per use, each applied where a format puts values together (see the format modules):
:func:`printable` for a value on one line, :func:`printable_lines` for a text of many lines that
the tool composed (the other commands' outputs, error messages), :func:`escape_controls` for the
parts of a workflow command (``--format github``), :func:`json_text` for a serialised JSON document. Nothing in the shipped corpora contains any of these characters: outputs of ordinary
inputs are unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Besides the C0 controls (0x00-0x1f): DEL and the C1 controls; Unicode line and paragraph separators;
# bidirectional formatting controls (ALM, LRM, RLM, LRE..RLO, LRI..PDI); surrogates (a lone one is a
# file name's undecodable byte).
_OTHER_CONTROLS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_COMMAND = "##["  # the runner's older command form, recognised anywhere in a line
_COMMAND_ESCAPED = "##\\u005b"


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape: the byte that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ESCAPERS: dict[tuple[str, bool], Callable[[str], str]] = {}


def _escaper(keep: str, commands: bool) -> Callable[[str], str]:
    """The escaping function that leaves the characters of ``keep`` (some of ``\\n\\r\\t``) as they
    are and, with ``commands``, neutralises workflow commands (with ``\\n`` kept, at every line's
    start, not only the text's)."""
    fn = _ESCAPERS.get((keep, commands))
    if fn is not None:
        return fn
    c0 = "".join(f"\\x{c:02x}" for c in range(0x20) if chr(c) not in keep)
    alternatives = rf"[{c0}{_OTHER_CONTROLS}]" + (r"|##\[|^[^\S\n]*::" if commands else "")
    pattern = re.compile(alternatives, re.MULTILINE if "\n" in keep else 0)

    def replace(m: re.Match[str]) -> str:
        s = m.group()
        if s == _COMMAND:
            return _COMMAND_ESCAPED
        if s.endswith("::"):  # a line's leading whitespace (its controls escaped), then the colons
            lead = "".join(_escape_char(ch) if ch not in keep and _is_control(ch) else ch for ch in s[:-2])
            return lead + "\\u003a:"
        return _escape_char(s)

    def escape(text: str) -> str:
        return pattern.sub(replace, text) if pattern.search(text) else text

    _ESCAPERS[keep, commands] = escape
    return escape


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return (code < 0x20 or 0x7F <= code <= 0x9F or code in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029)
            or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069 or 0xD800 <= code <= 0xDFFF)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`printable` escapes as a control character."""
    return not text.isprintable() and any(_is_control(ch) for ch in text)


def _plain(text: str, keep: str) -> bool:
    """No control character outside ``keep`` (a superset of them: ``str.isprintable`` is also false
    for other format and space characters, which the regular expression then looks at). A check at C
    speed, so that ordinary output compiles no regular expression."""
    for ch in keep:
        text = text.replace(ch, "")
    return text.isprintable()


def _inert(text: str, keep: str) -> bool:
    """Nothing to escape: no control character (outside ``keep``), no ``##[``, no line that starts
    with ``::``."""
    if not _plain(text, keep) or "##[" in text:
        return False
    if "::" not in text:
        return True
    lines = text.split("\n") if "\n" in keep else (text,)
    return not any(line.lstrip().startswith("::") for line in lines)


def printable(text: str, *, keep: str = "") -> str:
    """``text`` as one inert line: every control character escaped (but those in ``keep``, a subset
    of ``"\\n\\r\\t"``, which the caller encodes itself), ``##[`` and a leading ``::`` neutralised."""
    return text if _inert(text, keep) else _escaper(keep, True)(text)


def escape_controls(text: str, *, keep: str = "") -> str:
    """``text`` with its control characters escaped (but those in ``keep``), nothing else changed: for
    the parts of a workflow command, which GitHub reads as data and must match file names exactly."""
    return text if _plain(text, keep) else _escaper(keep, False)(text)


def printable_lines(text: str) -> str:
    """A text of many lines (composed by the tool, holding values) made inert: newlines and tabs
    kept, every other control character escaped, ``##[`` and each line's leading ``::`` neutralised."""
    return text if _inert(text, "\n\t") else _escaper("\n\t", True)(text)


# JSON escapes C0 controls itself; these it leaves raw (with ensure_ascii=False). A pattern string: `re`
# compiles it on first use (and caches it), so a run whose output needs none of this compiles nothing.
_JSON_RAW = r"[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]|##\["


def _json_escape(m: re.Match[str]) -> str:
    s = m.group()
    return _COMMAND_ESCAPED if s == _COMMAND else f"\\u{ord(s):04x}"


def json_text(serialised: str) -> str:
    """A JSON document (``json.dumps(..., ensure_ascii=False)``) with the characters JSON leaves raw
    written as ``\\u`` escapes: the document reads back to the same values (a lone surrogate of an
    undecodable file name included: ``os.fsencode`` turns it back into the byte) and is valid UTF-8."""
    if _plain(serialised, "\n") and "##[" not in serialised:  # indented JSON: spaces and newlines only
        return serialised
    return re.sub(_JSON_RAW, _json_escape, serialised)
