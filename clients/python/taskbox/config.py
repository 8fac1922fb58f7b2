"""The configuration, found and read as the taskbox command does.

Which file (schemas/config.md, "Which file"): the one named by the
caller (``--config``), else ``$TASKBOX_CONFIG``, else
``$XDG_CONFIG_HOME/taskbox/config.json`` (``~/.config/...``) if it is
there, else ``/etc/taskbox/worker.json`` if it is there, else none (the
defaults). The ``TASKBOX_*`` variables win over the file. Files are
strict, as the worker's: ``v`` must be 1 and an unknown key is an error,
so a file the command refuses is refused here too, naming the key.

Only what a producer needs is kept (Kafka, the ledger, the store); the
worker's own settings are checked for their names and left alone.
Credentials never come from here: S3 keys are AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY in the environment, as for the command.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from .errors import ConfigError

# Every key of the worker configuration (common/src/config.c) and its
# default; None: a key with no default (optional).
_DEFAULTS: Dict[str, Any] = {
    "worker_id": "", "slots": 4, "log_level": "info", "log_format": "logfmt",
    "kafka": {"brokers": "mock", "group": "taskbox-workers", "group_instance_id": None,
              "assignor": "cooperative-sticky", "tasks_topic": "taskbox.tasks",
              "events_topic": "taskbox.events", "dlq_topic": "taskbox.dlq",
              "properties": None},
    "ledger": {"url": "memory:", "prefix": "taskbox", "lease_ms": 15000},
    "store": {"url": "dir:///var/lib/taskbox/artifacts", "endpoint": None,
              "region": "us-east-1"},
    "runtimes_dir": "/etc/taskbox/runtimes", "work_dir": "/var/lib/taskbox/work",
    "cache_dir": "/var/cache/taskbox", "image_cache_mb": 20480, "input_cache_mb": 10240,
    "image_stall_seconds": 30, "image_lazy": False, "metrics_listen": "",
    "drain_seconds": 120,
}
_INTEGERS = {"slots", "image_cache_mb", "input_cache_mb", "image_stall_seconds",
             "drain_seconds", "ledger.lease_ms"}

# librdkafka settings taskbox sets itself (config.c, owned_props)
_OWNED = {
    "bootstrap.servers": "it is kafka.brokers",
    "metadata.broker.list": "it is kafka.brokers",
    "group.id": "it is kafka.group",
    "group.instance.id": "it is kafka.group_instance_id",
    "enable.auto.commit": "offsets are committed only after a task's teardown",
    "enable.auto.offset.store": "offsets are committed only after a task's teardown",
    "auto.offset.reset": "a new group reads every task from the start",
    "partition.assignment.strategy": "it is kafka.assignor",
    "enable.idempotence": "each task's events are delivered once each, in order",
}


@dataclass(frozen=True)
class Config:
    """What a producer needs from the fleet's configuration."""

    brokers: str = "mock"
    tasks_topic: str = "taskbox.tasks"
    events_topic: str = "taskbox.events"
    dlq_topic: str = "taskbox.dlq"
    kafka_properties: Mapping[str, str] = field(default_factory=dict)
    ledger_url: str = "memory:"
    ledger_prefix: str = "taskbox"
    store_url: str = "dir:///var/lib/taskbox/artifacts"
    store_endpoint: Optional[str] = None
    store_region: str = "us-east-1"
    file: Optional[str] = None  # the file read, if any


def find_file(given: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The configuration file the command would read, or None."""
    env = os.environ if env is None else env
    if given:
        return given
    if env.get("TASKBOX_CONFIG"):
        return env["TASKBOX_CONFIG"]
    xdg, home = env.get("XDG_CONFIG_HOME", ""), env.get("HOME", "")
    user = (f"{xdg}/taskbox/config.json" if xdg.startswith("/")
            else f"{home}/.config/taskbox/config.json" if home.startswith("/") else "")
    if user and os.path.exists(user):
        return user
    if os.path.exists("/etc/taskbox/worker.json"):
        return "/etc/taskbox/worker.json"
    return None


def _merge(defaults: Dict[str, Any], doc: Mapping[str, Any], origin: str, path: str) -> Dict[str, Any]:
    out = dict(defaults)
    for k, v in doc.items():
        key = f"{path}{k}"
        if k not in defaults:
            raise ConfigError(f"{origin}: unknown key '{key}'")
        if isinstance(defaults[k], dict):
            if not isinstance(v, dict):
                raise ConfigError(f"{origin}: field '{key}': expected an object")
            out[k] = _merge(defaults[k], v, origin, key + ".")
        else:
            out[k] = v
    return out


def _apply_env(cfg: Dict[str, Any], env: Mapping[str, str], path: str) -> None:
    for k, v in list(cfg.items()):
        key = f"{path}{k}"
        if isinstance(v, dict) or (k == "properties" and path == "kafka."):
            if isinstance(v, dict) and k != "properties":
                _apply_env(v, env, key + ".")
            continue  # kafka.properties is file-only
        var = "TASKBOX_" + key.upper().replace(".", "_")
        if var not in env:
            continue
        text = env[var]
        if key in _INTEGERS:
            if not text.isdigit():
                raise ConfigError(f"environment {var}: expected a non-negative integer, got '{text}'")
            cfg[k] = int(text)
        elif isinstance(v, bool):
            if text not in ("true", "false", "1", "0"):
                raise ConfigError(f"environment {var}: expected true or false, got '{text}'")
            cfg[k] = text in ("true", "1")
        else:
            cfg[k] = text


def _str(cfg: Mapping[str, Any], section: str, key: str, origin: str, empty: bool = False) -> str:
    v = cfg[section][key]
    if not isinstance(v, str) or (not v and not empty):
        raise ConfigError(f"{origin}: field '{section}.{key}': expected a non-empty string, got {v!r}")
    return v


def load(path: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Config:
    """The configuration the taskbox command would use (``path``: its
    ``--config``). Raises ConfigError naming the file and the key."""
    env = os.environ if env is None else env
    file = find_file(path, env)
    origin = file or "configuration"
    doc: Dict[str, Any] = {}
    if file:
        try:
            with open(file, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{file}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{file}: {e}") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{file}:{e.lineno}:{e.colno}: {e.msg}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{file}: expected a JSON object")
        v = doc.pop("v", None)
        if not isinstance(v, int) or isinstance(v, bool):
            raise ConfigError(f"{file}: key 'v': required integer version missing")
        if v != 1:
            raise ConfigError(f"{file}: key 'v': version {v} is not supported (this reads 1)")
    cfg = _merge(_DEFAULTS, doc, origin, "")
    _apply_env(cfg, env, "")
    if file is None and any(k.startswith("TASKBOX_") for k in env):
        origin = "configuration (with TASKBOX_* overrides)"
    props = cfg["kafka"]["properties"] or {}
    if not isinstance(props, dict) or not all(isinstance(x, str) for x in props.values()):
        raise ConfigError(f"{origin}: field 'kafka.properties': expected a map of strings")
    for k in props:
        if k in _OWNED:
            raise ConfigError(f"kafka.properties: '{k}' is set by taskbox and cannot be changed: "
                              f"{_OWNED[k]}")
    endpoint = cfg["store"]["endpoint"]
    if endpoint is not None and not isinstance(endpoint, str):
        raise ConfigError(f"{origin}: field 'store.endpoint': expected a string")
    return Config(
        brokers=_str(cfg, "kafka", "brokers", origin),
        tasks_topic=_str(cfg, "kafka", "tasks_topic", origin),
        events_topic=_str(cfg, "kafka", "events_topic", origin),
        dlq_topic=_str(cfg, "kafka", "dlq_topic", origin),
        kafka_properties=dict(props),
        ledger_url=_str(cfg, "ledger", "url", origin),
        ledger_prefix=_str(cfg, "ledger", "prefix", origin),
        store_url=_str(cfg, "store", "url", origin),
        store_endpoint=endpoint or None,
        store_region=_str(cfg, "store", "region", origin),
        file=file,
    )
