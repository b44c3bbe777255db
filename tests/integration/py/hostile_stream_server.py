"""A hostile OpenAI-compatible server for `ember chat --remote` tests (issue 41 row 20).

python3 hostile_stream_server.py MODE: listens on a free loopback port, prints "port N" and
answers every POST with a 200 event stream that never ends:
  endless   well-formed chunks of one short piece each, forever (no finish_reason)
  longline  "data: " and then 'x' forever, never a newline
  bigpieces well-formed chunks of 1 MiB content each, forever
GET /v1/models names one model, "m". Standard library only; the client going away ends it.
"""
import http.server
import json
import sys

MODE = sys.argv[1]


def chunk(text):
    event = {"id": "c", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return ("data: " + json.dumps(event) + "\n\n").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            if MODE == "longline":
                self.wfile.write(b"data: ")
                block = b"x" * (1 << 20)
                while True:
                    self.wfile.write(block)
            piece = chunk("ab") if MODE == "endless" else chunk("y" * (1 << 20))
            while True:
                self.wfile.write(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("port", server.server_address[1], flush=True)
server.serve_forever()
