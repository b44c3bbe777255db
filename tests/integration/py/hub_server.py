"""A local stand-in for a Hugging Face-style model hub, for tests/integration/test_pull.cpp.

It serves the shape `ember pull` reads, from a directory laid out ROOT/OWNER/REPO/FILES:
  GET /api/models/OWNER/REPO/tree/main?recursive=true  a JSON array of entries
      {"type": "file"|"directory", "path", "size", "oid", "lfs": {"oid": SHA256, "size",
      "pointerSize"}} (lfs for .gguf files only), paged with a Link: <...>; rel="next" header
      when --page-size is given;
  GET /OWNER/REPO/resolve/main/PATH  a 302 redirect to /cdn/OWNER/REPO/PATH on --cdn-host;
  GET /cdn/OWNER/REPO/PATH  the bytes, honouring "Range: bytes=N-" with a 206.
Faults on demand: --wrong-sha REPO_PATH publishes a wrong SHA-256, --cut-once / --cut-always
REPO_PATH:BYTES closes the connection after BYTES bytes of the body (the first reply, or every
one), --require-token TOKEN answers 401 to API and resolve requests without it,
--evil-path lists a file named ../escape.gguf, --huge lists a 2 TiB file.
Prints "port N" once listening, then one line per request:
  REQ GET /path range=<Range or -> auth=<Authorization or ->
Standard library only; reaches nothing but the client that calls it.
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--cdn-host", default="127.0.0.1")
    p.add_argument("--wrong-sha", action="append", default=[])
    p.add_argument("--cut-once", action="append", default=[])
    p.add_argument("--cut-always", action="append", default=[])
    p.add_argument("--require-token", default="")
    p.add_argument("--page-size", type=int, default=0)
    p.add_argument("--evil-path", action="store_true")
    p.add_argument("--huge", action="store_true")
    return p.parse_args()


ARGS = parse_args()
CUTS = {}  # repo path -> [bytes, remaining cuts (-1: always)]
for spec in ARGS.cut_once:
    path, n = spec.rsplit(":", 1)
    CUTS[path] = [int(n), 1]
for spec in ARGS.cut_always:
    path, n = spec.rsplit(":", 1)
    CUTS[path] = [int(n), -1]
LOCK = threading.Lock()


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def listing(owner, repo):
    base = os.path.join(ARGS.root, owner, repo)
    if not os.path.isdir(base):
        return None
    entries = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for d in dirnames:
            rel = os.path.relpath(os.path.join(dirpath, d), base)
            entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": rel})
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, base)
            size = os.path.getsize(full)
            entry = {"type": "file", "oid": hashlib.sha1(rel.encode()).hexdigest(),
                     "size": size, "path": rel}
            if name.endswith(".gguf"):
                sha = sha256_of(full)
                if f"{owner}/{repo}/{rel}" in ARGS.wrong_sha:
                    sha = hashlib.sha256(b"not these bytes").hexdigest()
                entry["lfs"] = {"oid": sha, "size": size, "pointerSize": 134}
            entries.append(entry)
    if ARGS.evil_path:
        entries.append({"type": "file", "oid": "1" * 40, "size": 10, "path": "../escape.gguf",
                        "lfs": {"oid": "a" * 64, "size": 10, "pointerSize": 134}})
    if ARGS.huge:
        entries.append({"type": "file", "oid": "2" * 40, "size": 2 << 40, "path": "huge.gguf",
                        "lfs": {"oid": "b" * 64, "size": 2 << 40, "pointerSize": 134}})
    return entries


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if not ARGS.require_token:
            return True
        if self.headers.get("Authorization") == "Bearer " + ARGS.require_token:
            return True
        self.reply(401, b'{"error":"Invalid credentials in Authorization header"}',
                   {"Content-Type": "application/json"})
        return False

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        print(f"REQ GET {url.path} range={self.headers.get('Range', '-')} "
              f"auth={self.headers.get('Authorization', '-')}", flush=True)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4:6] == ["tree", "main"]:
            if self.authorized():
                self.serve_listing(parts[2], parts[3], urllib.parse.parse_qs(url.query))
        elif len(parts) >= 5 and parts[2:4] == ["resolve", "main"]:
            if self.authorized():
                target = "/cdn/" + "/".join(urllib.parse.quote(p) for p in parts[:2] + parts[4:])
                self.reply(302, b"", {"Location":
                                      f"http://{ARGS.cdn_host}:{self.server.server_port}{target}"})
        elif parts[:1] == ["cdn"] and len(parts) >= 4:
            self.serve_file("/".join(parts[1:]))
        else:
            self.reply(404, b'{"error":"Not found"}')

    def serve_listing(self, owner, repo, query):
        entries = listing(owner, repo)
        if entries is None:
            self.reply(404, b'{"error":"Repository not found"}', {"Content-Type": "application/json"})
            return
        headers = {"Content-Type": "application/json"}
        if ARGS.page_size:
            start = int(query.get("cursor", ["0"])[0])
            end = start + ARGS.page_size
            if end < len(entries):
                port = self.server.server_port
                headers["Link"] = (f"<http://127.0.0.1:{port}/api/models/{owner}/{repo}/tree/main"
                                   f"?recursive=true&cursor={end}>; rel=\"next\"")
            entries = entries[start:end]
        self.reply(200, json.dumps(entries).encode(), headers)

    def serve_file(self, repo_path):
        full = os.path.join(ARGS.root, repo_path)
        if ".." in repo_path.split("/") or not os.path.isfile(full):
            self.reply(404, b"Entry not found")
            return
        with open(full, "rb") as f:
            data = f.read()
        start = 0
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
            if start >= len(data):
                self.reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
        body = data[start:]
        cut = None
        with LOCK:
            rule = CUTS.get(repo_path)
            if rule and rule[1] != 0:
                cut = rule[0]
                if rule[1] > 0:
                    rule[1] -= 1
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if cut is not None and cut < len(body):
            self.wfile.write(body[:cut])
            self.wfile.flush()
            # The connection goes away mid-body, as a dropped link would.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"port {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
