#!/usr/bin/env python3
"""An independent webhook receiver for the HTTP sink's tests (stdlib only).

It verifies each request's Standard Webhooks signature with its own code
(not the connector's), appends one JSON line per request it accepted to
--out, and can be told to misbehave for its first requests (--script).

  receiver.py --out FILE [--secret-file F] [--max-body N] [--script S]

It listens on 127.0.0.1 on a free port and prints "LISTEN <port>" once
ready. --script is a comma-separated list applied to the first POSTs, one
entry each, then every POST is accepted:
  500        answer 500 without keeping the body
  429:N      answer 429 with Retry-After: N
  reset      reset the connection before reading the body
  drop       keep the body, then reset the connection without answering
             (the sender cannot know: it sends the request again)
  ok         accept
A request whose signature does not verify is answered 401 and recorded
with "signature_ok": false. HEAD answers 200 (readiness probes); GET
answers the counts of POSTs seen and accepted, as JSON.
"""
import argparse
import base64
import hashlib
import hmac
import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE = 300  # seconds a webhook-timestamp may be off


def load_secret(path):
    with open(path, "rb") as f:
        s = f.read().rstrip(b"\r\n")
    if s.startswith(b"whsec_"):
        return base64.b64decode(s[len(b"whsec_"):])
    return s


def signature_ok(secret, headers, body):
    msg_id = headers.get("webhook-id", "")
    ts = headers.get("webhook-timestamp", "")
    sigs = headers.get("webhook-signature", "")
    try:
        if abs(time.time() - int(ts)) > TOLERANCE:
            return False
    except ValueError:
        return False
    mac = hmac.new(secret, msg_id.encode() + b"." + ts.encode() + b"." + body, hashlib.sha256).digest()
    want = base64.b64encode(mac).decode()
    for s in sigs.split(" "):
        version, _, value = s.partition(",")
        if version == "v1" and hmac.compare_digest(value, want):
            return True
    return False


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a reset connection is a fault the tests cause


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--secret-file")
    ap.add_argument("--max-body", type=int, default=0)
    ap.add_argument("--script", default="")
    args = ap.parse_args()
    secret = load_secret(args.secret_file) if args.secret_file else None
    script = [s for s in args.script.split(",") if s]
    lock = threading.Lock()
    state = {"posts": 0, "accepted": 0}
    out = open(args.out, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reset(self):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def answer(self, code, headers=()):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):
            self.answer(200)

        def do_GET(self):
            with lock:
                body = json.dumps(state).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            with lock:
                n = state["posts"]
                state["posts"] += 1
            step = script[n] if n < len(script) else "ok"
            if step == "reset":
                return self.reset()
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if step == "500":
                return self.answer(500)
            if step.startswith("429:"):
                return self.answer(429, [("Retry-After", step[4:])])
            headers = {k.lower(): v for k, v in self.headers.items()}
            ok = secret is None or signature_ok(secret, headers, body)
            too_large = args.max_body and length > args.max_body
            if ok and not too_large:
                line = {"path": self.path, "headers": headers, "body": base64.b64encode(body).decode(),
                        "signature_ok": ok, "at": time.time()}
                with lock:
                    out.write(json.dumps(line) + "\n")
                    state["accepted"] += 1
            elif not ok:
                with lock:
                    out.write(json.dumps({"path": self.path, "headers": headers, "signature_ok": False}) + "\n")
            if step == "drop":
                return self.reset()
            if not ok:
                return self.answer(401)
            if too_large:
                return self.answer(413)
            self.answer(204)

    srv = Server(("127.0.0.1", 0), Handler)
    print("LISTEN %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
