#!/usr/bin/env python3
"""fleet_forward.py: the wire between a test "host" (a network namespace)
and the services on the real host's loopback, for tests/fault/test_fleet.py.

  fleet_forward.py host DIR PORT...   on the host: DIR/pPORT.sock -> 127.0.0.1:PORT
  fleet_forward.py ns DIR PORT...     in a namespace: 127.0.0.1:PORT -> DIR/pPORT.sock

Unix sockets cross network namespaces (they are files), so a namespace
reaches the host's Kafka, Redis and S3 at the same 127.0.0.1 addresses
they advertise, and nothing else. Killing a namespace's forwarder cuts
that host off; starting it again heals it. Prints "ready" once listening.
"""
import asyncio
import os
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


async def relay(reader, writer, connect):
    try:
        r2, w2 = await connect()
    except (ConnectionError, OSError):
        writer.close()
        return
    await asyncio.gather(pipe(reader, w2), pipe(r2, writer))


async def main(mode, d, ports):
    servers = []
    for port in ports:
        sock = os.path.join(d, f"p{port}.sock")
        if mode == "host":
            if os.path.exists(sock):
                os.unlink(sock)
            servers.append(await asyncio.start_unix_server(
                lambda r, w, p=port: relay(r, w, lambda: asyncio.open_connection("127.0.0.1", p)),
                path=sock))
        else:
            servers.append(await asyncio.start_server(
                lambda r, w, s=sock: relay(r, w, lambda: asyncio.open_unix_connection(s)),
                "127.0.0.1", port, reuse_address=True))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("host", "ns"):
        sys.exit("usage: fleet_forward.py host|ns DIR PORT...")
    asyncio.run(main(sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]))
