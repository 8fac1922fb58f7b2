"""What can go wrong, as exceptions that say it.

Every exception the package raises on purpose is a TaskboxError; the
subclasses say which part failed, so a caller can act on one (retry
Kafka, fix a field) without parsing messages. Each message names what it
was doing ("kafka: ...", "field 'recipe.commit': ...").
"""
from __future__ import annotations

from typing import Optional


class TaskboxError(Exception):
    """Anything the package reports."""


class ConfigError(TaskboxError):
    """The configuration cannot be read or names what cannot work
    (a misspelt key, kafka.brokers 'mock', ledger.url 'memory:')."""


class InvalidMessage(TaskboxError, ValueError):
    """A message that breaks its schema (schemas/*.md): refused before
    anything is sent, or on reading. ``field`` names the field when one
    is to blame ("recipe.commit", "inputs[0].name")."""

    def __init__(self, message: str, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.field = field


class KafkaFailure(TaskboxError):
    """Kafka did not take or give what was asked (not delivered, topic
    unknown, no broker answering)."""


class LedgerError(TaskboxError):
    """The ledger (Redis) did not answer or answered nonsense."""


class StoreError(TaskboxError):
    """The artifact store did not give an object."""


class NotFound(StoreError, LookupError):
    """The store has no object under the key asked for (or a task's
    record names no such artifact)."""


class ChecksumMismatch(StoreError):
    """What arrived is not what the store or the manifest says it is
    (its size, CRC-32C or SHA-256): nothing was kept."""


class UsageError(TaskboxError, ValueError):
    """An argument that cannot work (a share's lifetime out of range,
    replay_from with a recipe, a path that is not a file or a
    directory)."""


class TaskNotDone(TaskboxError, LookupError):
    """The task has no record to read: unknown to the ledger, not done
    yet, or dead-lettered (``state``: "unknown", "running" or
    "dead-lettered")."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class UploadError(TaskboxError):
    """A file could not be uploaded: it is not there, not a file or a
    directory, changed as it was read, or too many."""


class DeadLetterError(TaskboxError):
    """A dead letter that cannot be sent back: none at that place, it
    holds no task (fix it at its producer), or the ledger holds no dead
    letter for its task (``retry``: True when that may change in a
    moment, as a worker writes its marker just after the record)."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


class TaskTimeout(TaskboxError, TimeoutError):
    """The time given passed before the task was settled; it goes on."""
