"""Files a user names (a config.json, a profile, a plan, a recorded output): regular files only
and of bounded size, checked before they are read, so that a device (/dev/zero), a FIFO or a
folder given by mistake is one line and exit 2 instead of a hang or unbounded memory."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from nodeledger.errors import InputError
from nodeledger.units import MiB

USER_FILE_LIMIT = 64 * MiB  # far above any real config, profile, plan or tool output


def special_kind(mode: int) -> str | None:
    """What a non-regular file is, in words ("a directory", "a FIFO (named pipe)", ...); None
    for a regular file (``mode`` is ``os.stat(...).st_mode``)."""
    if stat.S_ISREG(mode):
        return None
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return words
    return "not a regular file"


def check_user_file(path: str | Path, what: str, limit: int = USER_FILE_LIMIT) -> None:
    """Raise InputError when ``path`` exists but is not a regular file, or is larger than
    ``limit`` bytes; a missing path is left to the caller (its own "not found" line)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    kind = special_kind(st.st_mode)
    if kind == "a directory":
        raise InputError(f"{path}: is a folder, not a {what}")
    if kind is not None:
        raise InputError(f"{path}: not a regular file ({kind}): a {what} is read from a file")
    if st.st_size > limit:
        raise InputError(
            f"{path}: {st.st_size:,} B is larger than any {what} ({limit // MiB} MiB at most)"
        )


def read_stdin(what: str, limit: int = USER_FILE_LIMIT) -> str:
    """Standard input as text, at most ``limit`` characters (more is one line, exit 2)."""
    text = sys.stdin.read(limit + 1)
    if len(text) > limit:
        raise InputError(f"standard input: more than {limit // MiB} MiB, larger than any {what}")
    return text


def read_user_text(path: str, what: str, limit: int = USER_FILE_LIMIT) -> str:
    """The text of a user-named file (``-``: standard input), checked and bounded as above; a
    file that cannot be read is InputError naming it and why."""
    if path == "-":
        return read_stdin(what, limit)
    check_user_file(path, what, limit)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(text) > limit:  # it grew after the size check (a live log)
        raise InputError(f"{path}: more than {limit // MiB} MiB, larger than any {what}")
    return text


def _is_digit_limit(exc: ValueError) -> bool:
    """Python refuses to turn a run of more than ``sys.get_int_max_str_digits()`` digits into
    an int (CVE-2020-10735); json and tomllib let that bare ValueError out."""
    return type(exc) is ValueError and "integer string conversion" in str(exc)


def _number_too_long(where: str, error: type[InputError]) -> InputError:
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    return error(
        f"{where}: holds an integer of more than {limit:,} digits, not a value any field takes"
    )


def loads_json(text: str | bytes, where: str, error: type[InputError] = InputError) -> Any:
    """``json.loads`` of user-supplied text.  An integer too long for Python (over 4,300 digits)
    is ``error`` naming ``where`` (one line, exit 2); a JSONDecodeError or RecursionError is left
    to the caller, which words it for its file."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if not _is_digit_limit(exc):  # JSONDecodeError, UnicodeDecodeError: the caller's
            raise
        raise _number_too_long(where, error) from None


def loads_toml(text: str, where: str, error: type[InputError] = InputError) -> Any:
    """``tomllib.loads`` of user-supplied text, with the same rule as :func:`loads_json` for an
    integer too long for Python; a TOMLDecodeError is left to the caller."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except ValueError as exc:
        if not _is_digit_limit(exc):  # TOMLDecodeError: the caller's
            raise
        raise _number_too_long(where, error) from None


LOG_END_BYTES = (
    8 * MiB
)  # a server's start-up lines fit in a log's first (or, after a restart, last) 8 MiB


def read_log_ends(path: str, what: str, end_bytes: int = LOG_END_BYTES) -> tuple[str, bool]:
    """(text, cut) of a log that may be large and still growing (a running server's): a
    regular file of any size, read as its first and last ``end_bytes`` bytes (the whole file
    when it is smaller than both together; the tail starts at a line boundary), so memory stays
    bounded whatever the log has grown to.  ``cut`` says the middle was skipped."""
    check_user_file(path, what, limit=1 << 62)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= 2 * end_bytes:
                raw, cut = fh.read(2 * end_bytes), False
            else:
                head = fh.read(end_bytes)
                fh.seek(size - end_bytes)
                tail = fh.read(end_bytes)
                tail = tail[tail.find(b"\n") + 1 :]
                raw, cut = head + b"\n" + tail, True
    except OSError as exc:
        if not os.path.exists(path):
            raise InputError(f"{path}: no such {what}") from None
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return raw.decode("utf-8", errors="replace"), cut
