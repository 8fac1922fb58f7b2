"""taskbox for producers: upload inputs, submit tasks to a taskbox fleet
(or replay them), follow their events (also with asyncio), await their
results, download and share their artifacts, talk to interactive
sessions, read the dead letters and send them back.

    import taskbox
    with taskbox.Client() as client:          # the configuration `taskbox` finds
        task = client.submit(recipe="https://git.example.com/hello.git",
                             commit="0123...", prompt="Say hello",
                             inputs=client.upload("notes.txt"))
        result = task.wait(timeout=600)
        print(result.outcome, [v.outcome for v in result.verdicts])
        for artifact in task.artifacts():
            artifact.download("out/")         # out/hello.txt ...

docs/python.md is the tour; schemas/ the wire formats it speaks.
"""
from ._version import version as _version
from .artifacts import Artifact
from .client import Client, Result, Task, Verdict, new_id
from .config import Config, load as load_config
from .dlq import DeadAttempt, DeadLetter
from .errors import (ChecksumMismatch, ConfigError, DeadLetterError, InvalidMessage,
                     KafkaFailure, LedgerError, NotFound, StoreError, TaskboxError, TaskNotDone,
                     TaskTimeout, UploadError, UsageError)
from .events import Event
from .uploads import Upload

__version__ = _version()

__all__ = [
    "Artifact", "ChecksumMismatch", "Client", "Config", "ConfigError", "DeadAttempt",
    "DeadLetter", "DeadLetterError", "Event", "InvalidMessage", "KafkaFailure", "LedgerError",
    "NotFound", "Result", "StoreError", "Task", "TaskNotDone", "TaskTimeout", "TaskboxError",
    "Upload", "UploadError", "UsageError", "Verdict", "load_config", "new_id", "__version__",
]
