"""Writing a frame's pieces (its header, the record batches as views of the backend's answer, the
rest of the body) to a socket transport without joining them: one ``sendmsg`` for all of them.

A piece written on its own is a send of its own, and on loopback every send does the receiver's
TCP work and may wake it: a small ShareFetch answer of three pieces cost three sends, more than
the rest of its handling. Joining them would copy every record byte. A gathering ``writelines``
does neither (asyncio's from Python 3.12, uvloop's); on 3.11's selector transport the pieces go
out with one ``sendmsg`` while its buffer is empty — what 3.12's transport does itself — and
whatever the socket does not take is handed to the transport's ``write``, which buffers it.
"""

from __future__ import annotations

import asyncio
import asyncio.selector_events
from collections.abc import Sequence
from typing import Any

#: the one transport whose socket the pieces may be handed to directly (plain TCP; a TLS
#: transport encrypts what it is given and is written piece by piece)
_SELECTOR_TRANSPORT: Any = getattr(asyncio.selector_events, "_SelectorSocketTransport", None)
#: at most this many pieces in one sendmsg (the kernel's IOV_MAX is 1024)
_MAX_PIECES = 512

Piece = bytes | bytearray | memoryview


def write_pieces(transport: asyncio.WriteTransport, pieces: Sequence[Piece]) -> int:
    """Hand ``pieces`` to ``transport`` in order; the bytes the transport had to buffer (copy)."""
    if type(transport).writelines is not asyncio.WriteTransport.writelines:
        transport.writelines(pieces)  # gathers by itself
        return 0
    before = transport.get_write_buffer_size()
    rest: Sequence[Piece] = pieces
    if not before and 1 < len(pieces) <= _MAX_PIECES and type(transport) is _SELECTOR_TRANSPORT \
            and not transport.is_closing():
        rest = _send_gathered(transport, pieces)
    for piece in rest:
        transport.write(piece)
    return transport.get_write_buffer_size() - before


def _send_gathered(transport: Any, pieces: Sequence[Piece]) -> Sequence[Piece]:
    """One ``sendmsg`` of every piece; the part the socket did not take."""
    try:
        sent = transport._sock.sendmsg(pieces)
    except (BlockingIOError, InterruptedError):
        return pieces
    except OSError:
        return pieces  # the transport's own write meets the error again and closes as it does
    if not sent:
        return pieces
    rest: list[Piece] = []
    for i, piece in enumerate(pieces):
        size = memoryview(piece).nbytes
        if sent >= size:
            sent -= size
            continue
        rest.append(memoryview(piece)[sent:] if sent else piece)
        rest.extend(pieces[i + 1:])
        break
    return rest
