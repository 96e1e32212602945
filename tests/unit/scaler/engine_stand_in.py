"""A stand-in engine process for the local connector's unit tests: /health, and vLLM's in-flight gauges.

Run as ``python engine_stand_in.py PORT BUSY_FILE [--ignore-term]``. ``/metrics`` reports the number in
``BUSY_FILE`` (0 when it is missing) as ``vllm:num_requests_running``, so a test decides when a drain
may finish; with ``--ignore-term`` SIGTERM is ignored, so only the SIGKILL bound stops it. The real
vLLM server is exercised by tests/integration/test_scaler.py.
"""

from __future__ import annotations

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def serve(port: int, busy_file: Path, *, ignore_term: bool) -> None:
    """Answer until stopped."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                body = b""
            elif self.path == "/metrics":
                busy = busy_file.read_text().strip() if busy_file.exists() else "0"
                body = (
                    f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {busy}.0\n'
                    'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n'
                    'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 7.0\n'
                ).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), Path(sys.argv[2]), ignore_term="--ignore-term" in sys.argv[3:])
