"""Opening the files ``diagnose`` and ``estimate`` read: regular files only. A FIFO would block the open (or
the read) forever and a device such as ``/dev/zero`` never ends, so both are refused with a message before
anything is read; a file read whole is read up to a size cap.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class InputFileError(Exception):
    """A path that cannot be read as a regular file (missing, a folder, a FIFO, a device, too large): exit 2."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str, what: str = "file") -> BinaryIO:
    """``path`` opened for binary reading; :class:`InputFileError` when it is not a regular file. The open
    itself does not block on a FIFO (``O_NONBLOCK``), and the type is checked on the opened descriptor (no
    window between a check and the open)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputFileError(f"{path}: is a directory") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(f"{path}: {_kind(mode)}, not a regular {what}: give a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str, max_bytes: int, what: str = "file") -> bytes | None:
    """The whole content of a regular file of at most ``max_bytes``; None when it does not exist."""
    try:
        fh = open_regular(path, what)
    except InputFileError:
        if not os.path.lexists(path):
            return None
        raise
    with fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputFileError(f"{path}: larger than {max_bytes // 2**20} MiB: not a {what}")
    return data
