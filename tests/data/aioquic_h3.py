"""A minimal HTTP/3 client and server on aioquic's API, for 0-RTT and
resumption interop with tlslab (tests/h3_interop.rs). Loopback only.

client HOST PORT CAFILE PATH: two connections; the second resumes with the
first's ticket and sends its GET in 0-RTT. Prints one JSON line.
server PORT CERT KEY: answers every GET with 200 and 100 bytes, keeps
tickets in memory (single use), and prints a JSON line per connection
with whether its 0-RTT data was accepted. Exits after 60 s.
"""

import asyncio
import json
import sys

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import HandshakeCompleted


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.h3 = H3Connection(self._quic)
        self.done = asyncio.get_running_loop().create_future()
        self.status = None
        self.body = 0
        self.handshake = None

    def get(self, authority, path):
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", authority.encode()), (b":path", path.encode())],
                             end_stream=True)
        self.transmit()

    def quic_event_received(self, event):
        if isinstance(event, HandshakeCompleted):
            self.handshake = event
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived):
                self.status = dict(e.headers).get(b":status", b"").decode()
            if isinstance(e, DataReceived):
                self.body += len(e.data)
            if getattr(e, "stream_ended", False) and not self.done.done():
                self.done.set_result(True)


async def client(host, port, cafile, path):
    tickets = []
    out = []
    for i in range(2):
        cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
        cfg.load_verify_locations(cafile)
        if tickets:
            cfg.session_ticket = tickets[-1]
        async with connect(host, port, configuration=cfg, create_protocol=Client,
                           session_ticket_handler=tickets.append, wait_connected=False) as c:
            c.get(f"{host}:{port}", path)
            await asyncio.wait_for(c.done, 10)
            for _ in range(200):  # the handshake, then the tickets after it
                if c.handshake and len(tickets) > i:
                    break
                await asyncio.sleep(0.05)
            hs = c.handshake
            out.append({"status": c.status, "body": c.body,
                        "resumed": bool(hs and hs.session_resumed),
                        "early_data_accepted": bool(hs and hs.early_data_accepted)})
    print(json.dumps(out), flush=True)


class Server(QuicConnectionProtocol):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.h3 = None

    def quic_event_received(self, event):
        if isinstance(event, HandshakeCompleted):
            print(json.dumps({"resumed": event.session_resumed,
                              "early_data_accepted": event.early_data_accepted}), flush=True)
        if self.h3 is None:
            self.h3 = H3Connection(self._quic)
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived):
                self.h3.send_headers(e.stream_id, [(b":status", b"200"), (b"content-length", b"100")])
                self.h3.send_data(e.stream_id, b"x" * 100, end_stream=True)
                self.transmit()


async def server(port, cert, key):
    store = {}
    cfg = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    cfg.load_cert_chain(cert, key)
    await serve("127.0.0.1", port, configuration=cfg, create_protocol=Server,
                session_ticket_fetcher=lambda t: store.pop(t, None),
                session_ticket_handler=lambda t: store.__setitem__(t.ticket, t))
    print("ready", flush=True)
    await asyncio.sleep(60)


if __name__ == "__main__":
    if sys.argv[1] == "client":
        asyncio.run(client(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]))
    else:
        asyncio.run(server(int(sys.argv[2]), sys.argv[3], sys.argv[4]))
