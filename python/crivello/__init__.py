"""crivello: a durable frontier for web crawlers.

- `Sieve`: each distinct URL pushed comes out once, in first-appearance order, in bounded
  memory, across `kill -9`, power loss and damaged files.
- `Frontier`: per-host queues over the sieve, with politeness (delays, a ratio rule, one
  fetch per host at a time, blocks, limits) and leases that survive crashes.
- `crivello.scrapy`: Scrapy's scheduler and duplicate filter on them.

Every error of a store is a `crivello.Error` (see `crivello.errors`).
"""

from ._crivello import (
    DEFAULT_MAX_URL_LEN,
    DEFAULT_MEMORY,
    Frontier,
    Leased,
    Policy,
    Sieve,
    now,
)
from .errors import (
    ClosedError,
    CorruptError,
    Error,
    InvalidOptionError,
    InvalidUrlError,
    LockedError,
    NotAStoreError,
    PoisonedError,
    StorageError,
    WrongModeError,
)

__all__ = [
    "DEFAULT_MAX_URL_LEN",
    "DEFAULT_MEMORY",
    "ClosedError",
    "CorruptError",
    "Error",
    "Frontier",
    "InvalidOptionError",
    "InvalidUrlError",
    "Leased",
    "LockedError",
    "NotAStoreError",
    "Policy",
    "PoisonedError",
    "Sieve",
    "StorageError",
    "WrongModeError",
    "now",
]
