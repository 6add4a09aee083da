"""Reading a policy, config or faults file from disk the way the daemon reads it from a commit.

A pull request can carry a symbolic link (to ``/dev/zero``, to a FIFO, out of the repository)
or a FIFO. The daemon reads a link's text from the commit, never its target, so every reader
here refuses links instead of following them, refuses anything but a regular file, and never
reads more than the size limit: the size is checked with ``fstat`` before reading and the read
itself stops at ``limit + 1`` bytes (a file growing meanwhile cannot get past it). The file is
opened with ``O_NONBLOCK`` so a FIFO cannot hang the open.

Also: :func:`printable`, which escapes control characters of file content and names before
they reach a terminal or a CI log.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path
from typing import Literal

# one limit for a file on disk, a blob in a commit and the parser
#: A policy file is a few kilobytes; anything far larger is a mistake or an attack.
MAX_FILE_BYTES = 1024 * 1024

Problem = Literal["symlink", "not-regular-file", "file-too-large", "unreadable-file"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefused(Exception):
    """The file is not read; ``problem`` is the rule name findings use."""

    def __init__(self, path: str, problem: Problem, reason: str) -> None:
        super().__init__(path, problem, reason)
        self.path = path
        self.problem: Problem = problem
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def describe_mode(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def link_refusal(path: str, target: str) -> FileRefused:
    return FileRefused(
        path, "symlink",
        f"a symbolic link (to '{target}'), not followed: the reconciler reads a link's text "
        "from the commit, not the file it points to; commit the file itself",
    )


def too_large(path: str, size: int, limit: int) -> FileRefused:
    return FileRefused(
        path, "file-too-large",
        f"file is {size} bytes, more than the limit of {limit} bytes for a policy file",
    )


def read_bounded(path: Path | str, *, limit: int = MAX_FILE_BYTES,
                 follow_links: bool = False) -> bytes:
    """The bytes of the regular file ``path``; raises :class:`FileRefused` for a symbolic link,
    anything that is not a regular file, a file over ``limit`` bytes, or an OS error.
    ``follow_links``: a secret's file, which a mounted Secret volume makes a link (a FIFO or a
    device behind it is still refused, never waited on)."""
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(name, flags)
    except OSError as exc:
        raise _refusal(name, exc) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(name, "not-regular-file",
                              f"{describe_mode(info.st_mode)}, not a regular file; only regular "
                              "files are read")
        if info.st_size > limit:
            raise too_large(name, info.st_size, limit)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise too_large(name, len(data), limit)
        return data
    except OSError as exc:
        raise _refusal(name, exc) from None
    finally:
        os.close(fd)


def _refusal(name: str, exc: OSError) -> FileRefused:
    # O_NOFOLLOW on a link fails with ELOOP; say what the link is, not "too many levels"
    try:
        if os.path.islink(name):
            return link_refusal(name, os.readlink(name))
    except OSError:
        pass
    return FileRefused(name, "unreadable-file", f"cannot read the file: {exc.strerror or exc}")


def check_entry(path: Path) -> FileRefused | None:
    """Why the directory entry ``path`` cannot be a policy file without reading it (a link, a
    FIFO, a device), or None for a regular file."""
    try:
        info = path.lstat()
    except OSError as exc:
        return FileRefused(str(path), "unreadable-file",
                           f"cannot read the file: {exc.strerror or exc}")
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return link_refusal(str(path), target)
    if not stat.S_ISREG(info.st_mode):
        return FileRefused(str(path), "not-regular-file",
                           f"{describe_mode(info.st_mode)}, not a regular file; only regular files "
                           "are read")
    return None


# -- output ------------------------------------------------------------------------------------

_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\e", "\b": "\\b", "\f": "\\f", "\v": "\\v",
          "\0": "\\0", "\x7f": "\\x7f"}


def _escape_char(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def unsafe(char: str) -> bool:
    if char == "\t":
        return False
    # controls (C0, DEL, C1: ESC and CSI start terminal sequences), line/paragraph separators,
    # and format characters such as the bidirectional overrides that reorder what is shown
    # and lone surrogates (file names that are not UTF-8), which no terminal can be sent
    return unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def printable(text: str) -> str:
    """``text`` with every control character (CR, LF, ESC, C1, bidi overrides) written as a
    visible escape (``\\r``, ``\\n``, ``\\e``, ``\\x9b``, ``\\u202e``), so file content and
    names cannot move the cursor, rewrite a line, or forge a CI annotation; the backslash itself
    is kept as is."""
    if text.isprintable():
        return text
    return "".join(_escape_char(c) if unsafe(c) else c for c in text)
