"""A stand-in for Kubeflow Trainer's TrainJob status endpoint (KEP-2779):
HTTPS with the given certificate, POST
/apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status only,
"Authorization: Bearer TOKEN" only (else 401). Every request it answers is
appended to OUT as one JSON line {"path", "status", "body"}; the port it
listens on is written to PORT_FILE. Runs until killed.

    trainer_status_stub.py CERT KEY TOKEN PORT_FILE OUT
"""

import http.server
import json
import os
import re
import ssl
import sys

PATH = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/"
                  r"[a-z0-9-]+/trainjobs/[a-z0-9-]+/status$")


def main():
    cert, key, token, port_file, out = sys.argv[1:6]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length).decode("utf-8", "replace")
            if not PATH.match(self.path):
                code = 404
            elif self.headers.get("Authorization") != f"Bearer {token}":
                code = 401
            elif self.headers.get("Content-Type") != "application/json":
                code = 415
            else:
                code = 200
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps({"path": self.path, "status": code,
                                    "body": body}) + "\n")
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    tmp = port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{server.server_address[1]}\n")
    os.rename(tmp, port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
