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


class NotFound(StoreError):
    """The store has no object under the key asked for."""


class TaskTimeout(TaskboxError, TimeoutError):
    """The time given passed before the task was settled; it goes on."""
