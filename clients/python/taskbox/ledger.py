"""What a producer asks of the ledger (schemas/keys.md): whether a task
is done and how many attempts it has had, the next follow-up number, and
a dead letter's revival for `send_back`. Redis's protocol (RESP) is
spoken directly over a socket, for four commands, rather than adding a
dependency: ``GET <prefix>:task:{<id>}:done`` (and ``:attempts``),
``INCR <prefix>:task:{<id>}:followups`` and the revive script, each as
the C ledger does them.

``redis://host:port[/db]`` and ``redis-sentinel://h:p[,h:p...]/MASTER[/db]``
(the master the first answering sentinel names), as ledger.url allows.
Not here: writing anything else; the ledger is the workers'.
Calls to a master a failover demoted (``READONLY``) fail: the connection
is dropped, and the next call finds the new master.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from .errors import ConfigError, LedgerError

Reply = Union[None, int, bytes, List["Reply"]]
# ledger_redis.c's REVIVE_LUA, to the byte: KEYS attempts, done, base
REVIVE_LUA = ("local d = redis.call('GET', KEYS[2]) "
              "if not d then return 0 end "
              "if not string.match(d, '^%d+ $') then return -1 end "
              "redis.call('DEL', KEYS[2]) "
              "redis.call('SET', KEYS[3], redis.call('GET', KEYS[1]) or '0') "
              "return 1")
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Done:
    """A done-marker: the attempt that counts, and its manifest's key
    ("" for a dead letter)."""

    attempt: int
    manifest: str


def _hostport(text: str, url: str) -> Tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ledger.url '{url}': expected host:port, not '{text}'")
    return host, int(port)


class Ledger:
    """A connection to the fleet's ledger, opened on first use."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url, self.prefix = url, prefix
        self.db = 0
        self.sentinels: List[Tuple[str, int]] = []
        self.master = ""
        self.addr: Optional[Tuple[str, int]] = None
        self.sock: Optional[socket.socket] = None
        self.buf = b""
        if url.startswith("redis://"):
            rest = url[len("redis://"):]
            where, _, db = rest.partition("/")
            self.addr = _hostport(where, url)
        elif url.startswith("redis-sentinel://"):
            rest = url[len("redis-sentinel://"):]
            where, _, tail = rest.partition("/")
            self.master, _, db = tail.partition("/")
            self.sentinels = [_hostport(h, url) for h in where.split(",")]
            if not self.master or not self.sentinels:
                raise ConfigError(f"ledger.url '{url}': redis-sentinel://HOST:PORT[,...]/MASTER[/db]")
        elif url == "memory:":
            raise ConfigError("ledger.url is 'memory:', which lives inside one worker: point it "
                              "at the fleet's Redis (TASKBOX_LEDGER_URL)")
        else:
            raise ConfigError(f"ledger.url '{url}': expected redis:// or redis-sentinel://")
        if db and not db.isdigit():
            raise ConfigError(f"ledger.url '{url}': the database is a number, not '{db}'")
        self.db = int(db or 0)

    def _key(self, task: str, what: str) -> str:
        return f"{self.prefix}:task:{{{task}}}:{what}"

    def close(self) -> None:
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""

    def _dial(self, host: str, port: int, timeout: float) -> socket.socket:
        try:
            return socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise LedgerError(f"ledger redis://{host}:{port} unreachable: {e}") from None

    def _master(self) -> Tuple[str, int]:
        why = "no sentinel answered"
        for host, port in self.sentinels:
            try:
                s = self._dial(host, port, 0.5)
            except LedgerError as e:
                why = str(e)
                continue
            self.sock, self.buf = s, b""
            try:
                r = self._call("SENTINEL", "get-master-addr-by-name", self.master)
            except LedgerError as e:
                why = str(e)
                continue
            finally:
                self.close()
            if isinstance(r, list) and len(r) == 2 and isinstance(r[0], bytes) and isinstance(r[1], bytes):
                return r[0].decode(), int(r[1])
        raise LedgerError(f"ledger: no sentinel names master '{self.master}' ({why})")

    def _connect(self) -> None:
        host, port = self.addr if self.addr else self._master()
        self.sock, self.buf = self._dial(host, port, TIMEOUT_S), b""
        if self.db:
            self._call("SELECT", str(self.db))

    def _line(self) -> bytes:
        assert self.sock is not None
        while b"\r\n" not in self.buf:
            try:
                more = self.sock.recv(65536)
            except OSError as e:
                raise LedgerError(f"ledger {self.url}: {e}") from None
            if not more:
                raise LedgerError(f"ledger {self.url}: the connection closed")
            self.buf += more
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _reply(self) -> Reply:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise LedgerError(f"ledger {self.url}: {rest.decode(errors='replace')}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                assert self.sock is not None
                more = self.sock.recv(65536)
                if not more:
                    raise LedgerError(f"ledger {self.url}: the connection closed")
                self.buf += more
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise LedgerError(f"ledger {self.url}: unexpected reply {line[:40]!r}")

    def _call(self, *args: str) -> Reply:
        if self.sock is None:
            self._connect()
        assert self.sock is not None
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        try:
            self.sock.sendall(b"".join(out))
            return self._reply()
        except (LedgerError, OSError, ValueError) as e:
            self.close()  # redialled on the next call
            if isinstance(e, LedgerError):
                raise
            raise LedgerError(f"ledger {self.url}: {e}") from None

    def done(self, task: str) -> Optional[Done]:
        """The task's done-marker, or None while it is not done."""
        r = self._call("GET", self._key(task, "done"))
        if r is None:
            return None
        if not isinstance(r, bytes):
            raise LedgerError(f"ledger {self.url}: unexpected reply to GET: {r!r}")
        attempt, _, manifest = r.decode(errors="replace").partition(" ")
        return Done(int(attempt) if attempt.isdigit() else 0, manifest)

    def attempts(self, task: str) -> int:
        """The attempts begun on the task so far (0: unknown to the ledger)."""
        r = self._call("GET", self._key(task, "attempts"))
        if r is None:
            return 0
        if not isinstance(r, bytes) or not r.isdigit():
            raise LedgerError(f"ledger {self.url}: unexpected reply to GET: {r!r}")
        return int(r)

    def revive(self, task: str) -> int:
        """`taskbox dlq send`'s revive (keys.md): a dead letter's marker
        ("<attempt> ", no manifest) removed and ``base`` set to
        ``attempts``, in one script. 1 revived, 0 no marker (not dead
        yet, or sent back already), -1 done with a record."""
        keys = [self._key(task, k) for k in ("attempts", "done", "base")]
        r = self._call("EVAL", REVIVE_LUA, "3", *keys)
        if not isinstance(r, int):
            raise LedgerError(f"ledger {self.url}: unexpected reply to the revive: {r!r}")
        return r

    def next_followup(self, task: str) -> int:
        """The next follow-up number of the task, as `taskbox send` takes it."""
        r = self._call("INCR", self._key(task, "followups"))
        if not isinstance(r, int):
            raise LedgerError(f"ledger {self.url}: unexpected reply to INCR: {r!r}")
        return r
