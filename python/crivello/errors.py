"""The errors of crivello: each failure of the store is an instance of `Error`.

The message is the library's: a corruption names the file and the offset, a locked store its
directory, an invalid URL why it was refused.
"""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Anything that went wrong in a store."""


class LockedError(Error):
    """Another process (or another handle in this process) uses the directory.

    `path` is the directory.
    """

    path: Optional[str] = None


class CorruptError(Error):
    """A file's content failed a check: the data on disk is damaged, and nothing was guessed.

    `file` is the file's name inside the store, `offset` the byte offset of the damage.
    """

    file: Optional[str] = None
    offset: Optional[int] = None


class InvalidUrlError(Error, ValueError):
    """A URL was refused (empty, longer than the store's maximum, or holding a newline);
    nothing was changed."""


class InvalidOptionError(Error, ValueError):
    """An option, or a key, is out of range; nothing was changed.

    `option` names it.
    """

    option: Optional[str] = None


class PoisonedError(Error):
    """An earlier I/O error left the state in memory unknown: the store refuses writes until
    it is opened again, from what is durable."""


class NotAStoreError(Error):
    """The directory holds something that is not a crivello store, or a store of a format
    version this build does not read. `path` is the directory."""

    path: Optional[str] = None


class WrongModeError(Error):
    """The store is used the other way: a plain sieve opened as a frontier, or the reverse.
    `path` is the directory."""

    path: Optional[str] = None


class StorageError(Error, OSError):
    """An operation of the file system failed (`filename` and `errno` say which and why).
    After a failed write or fsync, the store is poisoned: open it again."""

    def __str__(self) -> str:
        # The library's message, which names the operation, the file and the cause
        # (OSError's own would print its errno and a strerror the library does not set).
        return str(self.args[0]) if self.args else super().__str__()


class ClosedError(Error, ValueError):
    """The handle was closed."""


__all__ = [
    "ClosedError",
    "CorruptError",
    "Error",
    "InvalidOptionError",
    "InvalidUrlError",
    "LockedError",
    "NotAStoreError",
    "PoisonedError",
    "StorageError",
    "WrongModeError",
]
