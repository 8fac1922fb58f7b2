"""taskbox for producers: submit tasks to a taskbox fleet, follow their
events, await their results, talk to interactive sessions.

    import taskbox
    with taskbox.Client() as client:          # the configuration `taskbox` finds
        task = client.submit(recipe="https://git.example.com/hello.git",
                             commit="0123...", prompt="Say hello")
        result = task.wait(timeout=600)
        print(result.outcome, [v.outcome for v in result.verdicts])

docs/python.md is the tour; schemas/ the wire formats it speaks.
"""
from ._version import version as _version
from .client import Client, Result, Task, Verdict, new_id
from .config import Config, load as load_config
from .errors import (ConfigError, InvalidMessage, KafkaFailure, LedgerError, NotFound,
                     StoreError, TaskboxError, TaskTimeout)
from .events import Event

__version__ = _version()

__all__ = [
    "Client", "Config", "ConfigError", "Event", "InvalidMessage", "KafkaFailure", "LedgerError",
    "NotFound", "Result", "StoreError", "Task", "TaskTimeout", "TaskboxError", "Verdict",
    "load_config", "new_id", "__version__",
]
