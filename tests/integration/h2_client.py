"""A raw HTTP/2 gRPC client for the lane's tests (python-hyper's h2: the frames themselves), for what
tritonclient and grpcio cannot do on purpose: reset a stream, stop reading, send a deadline of a
nanosecond, watch a GOAWAY arrive."""

from __future__ import annotations

import socket
import time

import h2.config
import h2.connection
import h2.events
import h2.settings


def frame(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


class H2:
    def __init__(self, port: int, window: int | None = None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.c.initiate_connection()
        if window is not None:
            self.c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()
        self.streams: dict[int, dict] = {}
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.read_data = True  # False: received DATA is never acknowledged (a client that stops reading)

    def flush(self) -> None:
        out = self.c.data_to_send()
        if out:
            self.sock.sendall(out)

    def call(self, path: str, message: bytes | None, headers=(), end: bool = True) -> int:
        sid = self.c.get_next_available_stream_id()
        hs = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.encode()),
            (b":authority", b"127.0.0.1"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            *headers,
        ]
        self.c.send_headers(sid, hs, end_stream=message is None and end)
        self.streams[sid] = {"headers": None, "data": b"", "trailers": None, "ended": False, "reset": None}
        if message is not None:
            self.send(sid, message, end)
        return sid

    def send(self, sid: int, message: bytes, end: bool = False) -> None:
        """The message in frames as large as the peer takes, as its windows open."""
        data = frame(message)
        while True:
            n = min(len(data), self.c.local_flow_control_window(sid), self.c.max_outbound_frame_size)
            if n == 0 and data:
                self.pump(0.1)
                continue
            self.c.send_data(sid, data[:n], end_stream=end and n == len(data))
            self.flush()
            data = data[n:]
            if not data:
                return

    def end(self, sid: int) -> None:
        self.c.end_stream(sid)
        self.flush()

    def reset(self, sid: int) -> None:
        self.c.reset_stream(sid, 8)  # CANCEL
        self.flush()

    def pump(self, timeout: float) -> bool:
        """Read what arrives for up to ``timeout`` s; False once the connection is closed."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return True
        if not data:
            return False
        for ev in self.c.receive_data(data):
            st = self.streams.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived):
                st["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                st["data"] += ev.data
                if self.read_data:
                    self.c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived):
                st["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                st["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                st["reset"] = ev.error_code
                st["ended"] = True
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.terminated = ev
        self.flush()
        return True

    def drain(self, seconds: float) -> None:
        """Read whatever arrives for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and self.pump(max(0.01, end - time.monotonic())):
            pass

    def wait(self, sid: int, timeout: float = 30.0) -> dict:
        """The stream's {headers, data, trailers (the headers of a Trailers-Only answer), reset}."""
        end = time.monotonic() + timeout
        st = self.streams[sid]
        while not st["ended"]:
            if time.monotonic() > end:
                raise AssertionError(f"stream {sid} did not end in {timeout} s: {st}")
            if not self.pump(0.2) and not st["ended"]:
                raise AssertionError(f"the connection closed before stream {sid} ended: {st}")
        if st["trailers"] is None and st["headers"] and b"grpc-status" in st["headers"]:
            st["trailers"] = st["headers"]
        return st

    def status(self, sid: int, timeout: float = 30.0) -> tuple[int, bytes]:
        """(grpc-status, grpc-message) of the stream's answer."""
        t = self.wait(sid, timeout)["trailers"] or {}
        return int(t.get(b"grpc-status", b"-1")), t.get(b"grpc-message", b"")

    def messages(self, sid: int) -> list[bytes]:
        data, out = self.streams[sid]["data"], []
        while len(data) >= 5:
            n = int.from_bytes(data[1:5], "big")
            out.append(data[5 : 5 + n])
            data = data[5 + n :]
        return out

    def __enter__(self) -> H2:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.c.close_connection()
            self.flush()
        except OSError:
            pass
        self.sock.close()
