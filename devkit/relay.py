"""A TCP relay on loopback that can delay, hold and cut what it carries.

A network between a client and PostgreSQL, or between a primary and its standby,
that a test controls: ``delay`` holds every chunk for that many seconds in each
direction (a standby whose acknowledgements arrive late), :meth:`hold_replies`
stops the replies of the connections open now from reaching their clients (the
server still receives and executes: a reply lost after the commit), and
:meth:`cut` closes every connection it carries. New connections after a cut are
relayed normally.

    with TcpRelay(target_port=server.port, delay=0.002) as relay:
        ...  # connect to 127.0.0.1:relay.port

The relay runs its own asyncio loop in a daemon thread, so the process that owns
it (a test, a benchmark) stays free; nothing here imports pytest.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType

__all__ = ["TcpRelay"]

_CHUNK = 1 << 16
_START_WAIT = 10.0


@dataclass(eq=False)
class _Link:
    """One relayed connection: its two sockets' writers and whether replies flow."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    replies: asyncio.Event = field(default_factory=asyncio.Event)

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                transport = writer.transport
                if isinstance(transport, asyncio.Transport):
                    transport.abort()  # a reset, as a broken network gives, not a clean FIN
                else:
                    writer.close()


class TcpRelay:
    """Relay ``127.0.0.1:port`` to ``target_host:target_port``.

    :param target_port: where connections go.
    :param delay: seconds each chunk is held, in each direction (a round trip
        gains twice this); may be changed while running through :attr:`delay`.
    """

    def __init__(
        self, *, target_port: int, target_host: str = "127.0.0.1", delay: float = 0.0
    ) -> None:
        if delay < 0:
            raise ValueError("delay must be at least 0")
        self.target_host = target_host
        self.target_port = target_port
        self.delay = delay
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()

    # -- control, from any thread ---------------------------------------------------------

    def start(self) -> TcpRelay:
        if self._thread is not None:
            return self
        ready: Future[int] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name=f"tcp-relay->{self.target_port}", daemon=True
        )
        self._thread.start()
        self.port = ready.result(timeout=_START_WAIT)
        return self

    def hold_replies(self) -> int:
        """Stop delivering replies on the connections open now; returns how many there are.

        What the target sends them is kept, undelivered, until :meth:`cut` drops it
        with the connections; connections made later are not held.
        """
        return self._call(self._hold)

    def cut(self) -> int:
        """Reset every connection carried now; returns how many there were."""
        return self._call(self._cut)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop may have ended already
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=_START_WAIT)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=_START_WAIT)
        self._loop = self._thread = None

    def __enter__(self) -> TcpRelay:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the loop's side ------------------------------------------------------------------

    def _call(self, action: Callable[[], int]) -> int:
        if self._loop is None:
            raise RuntimeError("the relay is not running")

        async def run() -> int:
            return action()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=_START_WAIT)

    def _hold(self) -> int:
        for link in self._links:
            link.replies.clear()
        return len(self._links)

    def _cut(self) -> int:
        links = list(self._links)
        for link in links:
            link.close()
        return len(links)

    def _run(self, ready: Future[int]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            self._server = loop.run_until_complete(
                asyncio.start_server(self._relay, sock=listener, backlog=128)
            )
            ready.set_result(int(listener.getsockname()[1]))
        except BaseException as exc:
            ready.set_exception(exc)
            loop.close()
            return
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        """Stop listening, reset every connection and let their tasks end."""
        if self._server is not None:
            self._server.close()
        for link in self._links:
            link.replies.set()  # held replies are dropped with their connection
        self._cut()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            _, running = await asyncio.wait(tasks, timeout=_START_WAIT)
            for task in running:
                task.cancel()

    async def _relay(self, client_in: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        try:
            server_in, server = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            client.transport.abort()  # as the target would: refused
            return
        link = _Link(client, server)
        link.replies.set()
        self._links.add(link)
        try:
            await asyncio.gather(
                self._pipe(client_in, server, None),
                self._pipe(server_in, client, link.replies),
                return_exceptions=True,
            )
        finally:
            self._links.discard(link)
            link.close()

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        flowing: asyncio.Event | None,
    ) -> None:
        """Copy ``source`` to ``sink``, each chunk ``delay`` late and in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            while (item := await queue.get()) is not None:
                due, data = item
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if flowing is not None:
                    await flowing.wait()
                sink.write(data)
                await sink.drain()
            with contextlib.suppress(OSError):
                sink.write_eof()

        deliverer = asyncio.create_task(deliver())
        try:
            while data := await source.read(_CHUNK):
                queue.put_nowait((loop.time() + self.delay, data))
        finally:
            queue.put_nowait(None)
            await deliverer
