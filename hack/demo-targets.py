#!/usr/bin/env python3
"""HTTP targets for `make demo`, on loopback only.

18080: healthy (200, JSON body), 18081: failing (503), 18082: slow (answers after 1.5 s).
"""
import http.server
import sys
import threading
import time


def handler(code, delay=0.0, body=b'{"status": "ok"}\n'):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if delay:
                time.sleep(delay)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            sys.stderr.write("%s %s %s\n" % (self.server.server_port, self.headers.get("X-Webchecker-Replica", "-"), fmt % args))

    return H


servers = [
    http.server.ThreadingHTTPServer(("127.0.0.1", 18080), handler(200)),
    http.server.ThreadingHTTPServer(("127.0.0.1", 18081), handler(503, body=b'{"status": "down"}\n')),
    http.server.ThreadingHTTPServer(("127.0.0.1", 18082), handler(200, delay=1.5)),
]
for s in servers:
    s.daemon_threads = True
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("demo targets on 127.0.0.1:18080 (healthy), :18081 (503), :18082 (slow)", flush=True)
threading.Event().wait()
