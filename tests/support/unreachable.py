"""A store URL on either backend that cannot be reached.

The store connects lazily, so a store on such a URL proves that a spec is judged
before any I/O, and that connection trouble surfaces as a retryable error.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def unreachable_store_url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        blocker = tmp_path / "a-file-not-a-directory"
        blocker.write_text("")
        yield f"sqlite:///{blocker / 'store.db'}"
        return
    # A bound socket that never listens: connecting to it is refused at once.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"postgresql://postgres@127.0.0.1:{sock.getsockname()[1]}/nowhere"
