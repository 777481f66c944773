"""A tiny HTTP server the harness tests run in pods (it does not use kvbench).

It binds $POD_IP:$PORT and answers:
  /name     the pod's name ($POD_NAME)
  /pid      its process id
  /health   200 while ready, 503 after /unready was called
  /file?p=  the content of a file it can see (to check mounted volumes)
On SIGTERM it writes "SIGTERM" to $MARKER (when set) and exits 0.
"""

import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ready = True


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        global ready
        url = urlsplit(self.path)
        code, body = 200, ""
        if url.path == "/name":
            body = os.environ.get("POD_NAME", "")
        elif url.path == "/pid":
            body = str(os.getpid())
        elif url.path == "/health":
            code = 200 if ready else 503
        elif url.path == "/unready":
            ready = False
        elif url.path == "/file":
            path = Path(parse_qs(url.query)["p"][0])
            code, body = (200, path.read_text()) if path.exists() else (404, "")
        else:
            code = 404
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def on_sigterm(*_: object) -> None:
    marker = os.environ.get("MARKER")
    if marker:
        Path(marker).write_text("SIGTERM")
    os._exit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    server = ThreadingHTTPServer(
        (os.environ["POD_IP"], int(os.environ.get("PORT", "8080"))), Handler
    )
    print(f"serving {os.environ.get('POD_NAME')} on {server.server_address}", flush=True)
    sys.stdout.flush()
    server.serve_forever()
