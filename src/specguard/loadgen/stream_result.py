"""What the transport saw of one request, on its own: the record-writer child builds these from the parent's
frames, and importing it from ``loadgen.client`` cost the child aiohttp and the prompt loaders (0.5 s of its
1.3 s of imports, paid by every run)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["StreamResult"]


@dataclass
class StreamResult:
    """What the transport saw of one request: status, error, and the raw reads with their arrival times.

    Times are seconds after the request's actual send. Reads not yet handed to
    ``on_pieces`` are in ``pieces``.
    """

    error: str | None = None
    http_status: int | None = None
    stream_end: float | None = None
    pieces: list[tuple[float, bytes]] = field(default_factory=list)
