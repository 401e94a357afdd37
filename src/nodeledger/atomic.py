"""Atomic text writes: an interrupted command leaves the old file or the new one, never half.

The text goes to a temporary file in the target's own folder (same file system), is flushed and
fsync'd, then ``os.replace``'d over the target; on any error the temporary file is removed and
the target is untouched.  A target that is a symbolic link is replaced by the new file (the
link's destination is never written).  Errors are ``OSError`` (the caller names the file in
its own message).  Layer 0: the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TextIO


class AtomicText:
    """A text handle (``.file``) on a temporary file beside ``path``; ``commit()`` puts it in
    place, ``discard()`` throws it away.  As a context manager: commit on success, discard on
    an exception."""

    def __init__(self, path: str | os.PathLike, encoding: str = "utf-8") -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(self.path))
        folder = self.path.parent
        mode = 0o666  # the umask applies, as for a plain open()
        with contextlib.suppress(OSError):
            mode = stat.S_IMODE(os.stat(self.path).st_mode)  # keep an existing file's mode
        for _ in range(100):
            tmp = folder / f".{self.path.name}.{os.urandom(4).hex()}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                continue
            break
        else:  # pragma: no cover - 100 random names taken
            raise FileExistsError(17, "no free temporary name", str(folder))
        self.tmp = tmp
        try:
            self.file: TextIO = os.fdopen(fd, "w", encoding=encoding)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        self.done = False

    def commit(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                self.file.close()
            _unlink(self.tmp)
            raise
        _fsync_dir(self.path.parent)

    def discard(self) -> None:
        if self.done:
            return
        self.done = True
        with contextlib.suppress(OSError):
            self.file.close()
        _unlink(self.tmp)

    def __enter__(self) -> TextIO:
        return self.file

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see the module docstring)."""
    with AtomicText(path, encoding) as fh:
        fh.write(text)


def _unlink(p: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(p)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (best effort: not every platform opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
