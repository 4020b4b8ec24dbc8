"""Stream a training log line by line, in constant memory, with the rank each line came from.

Logs are read as users have them: plain text or gzip (found by its magic bytes, not the name), any
encoding (undecodable bytes become U+FFFD), ``\\r`` progress updates, ANSI colours, and rank prefixes
(Slurm ``--label``, torch's ``[rankN]:`` excepthook, torchrun's ``[default3]:`` tee). Lines longer
than :data:`MAX_LINE` bytes are cut into pieces; a truncated or corrupt gzip stream ends the file
with a note instead of an exception.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from mbmem_lint.diagnose.formats import ANSI, GLOBAL_RANK, SLURM_LABEL, TORCHRUN_LOCAL
from mbmem_lint.records import dataclass

MAX_LINE = 64 * 1024  # a longer line is read in pieces (a log line is never that long)
SNIFF_BYTES = 8192
GZIP_MAGIC = b"\x1f\x8b"


class LogReadError(Exception):
    """A log that cannot be read at all (missing, a folder, a FIFO or device, unreadable, not text): exit 2."""


@dataclass
class LogLine:
    """One line of a log: where it is, the rank prefixes it carried, and its text without them."""

    path: str
    lineno: int
    text: str
    task: int | None = None  # Slurm task id (``srun --label``)
    rank: int | None = None  # global rank (``[rank3]:`` or a ``[3]:`` template)
    local_rank: int | None = None  # torchrun's ``[default3]:``


def split_prefixes(text: str) -> tuple[str, int | None, int | None, int | None]:
    """(text without rank prefixes, Slurm task, global rank, local rank)."""
    task = rank = local = None
    m = SLURM_LABEL.match(text)
    if m:
        task = int(m.group(1))
        text = text[m.end():]
    for _ in range(3):  # torchrun's tee and torch's excepthook can stack: "[default0]:[rank0]: ..."
        m = GLOBAL_RANK.match(text)
        if m:
            rank = int(m.group(1))
            text = text[m.end():]
            continue
        m = TORCHRUN_LOCAL.match(text)
        if m and not m.group(1).lower().startswith("rank"):
            local = int(m.group(2))
            text = text[m.end():]
            continue
        break
    return text, task, rank, local


class LogReader:
    """Iterate the lines of one log. ``notes`` collects what went wrong part-way (truncated gzip)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.notes: list[str] = []
        self.compressed = False
        self._raw: BinaryIO | None = None

    def _open(self) -> BinaryIO:
        from mbmem_lint.diagnose.inputs import InputFileError, open_regular

        try:
            raw = open_regular(self.path, "log")  # a FIFO or a device is refused, not read forever
        except InputFileError as exc:
            raise LogReadError(str(exc)) from None
        try:
            head = raw.read(SNIFF_BYTES)
            raw.seek(0)
        except OSError as exc:
            raw.close()
            raise LogReadError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        if head.startswith(GZIP_MAGIC):
            self.compressed = True
            self._raw = raw  # GzipFile does not close the file object it was given
            return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
        if b"\x00" in head:
            raw.close()
            raise LogReadError(f"{self.path}: not a text log (binary content); gzip-compressed logs are read as is")
        return raw

    def __iter__(self) -> Iterator[LogLine]:
        fh = self._open()
        try:
            yield from self._read(fh)
        finally:
            fh.close()
            if self._raw is not None:
                self._raw.close()

    def _read(self, fh: BinaryIO) -> Iterator[LogLine]:
        lineno = 0
        while True:
            try:
                chunk = fh.readline(MAX_LINE)
            except (EOFError, OSError, zlib.error) as exc:
                # gzip.BadGzipFile is an OSError; a cut-off stream is an EOFError.
                what = "truncated" if isinstance(exc, EOFError) else f"corrupt ({exc})"
                if lineno == 0:
                    raise LogReadError(f"{self.path}: gzip stream {what}: nothing could be read") from None
                self.notes.append(f"{self.path}: compressed stream {what} after line {lineno}; "
                                  "the lines before it were read")
                break
            if not chunk:
                break
            if lineno == 0 and self.compressed and b"\x00" in chunk:
                raise LogReadError(f"{self.path}: not a text log (binary content inside gzip)")
            lineno += 1  # a piece of an over-long line counts as a line of its own
            yield from self._lines(chunk, lineno)

    def _lines(self, chunk: bytes, lineno: int) -> Iterator[LogLine]:
        text = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
        if "\x1b" in text:
            text = ANSI.sub("", text)
        # "\r" rewrites the terminal line (progress bars): each piece is a line of its own.
        for piece in text.split("\r") if "\r" in text else (text,):
            if not piece:
                continue
            body, task, rank, local = split_prefixes(piece)
            yield LogLine(self.path, lineno, body, task, rank, local)
