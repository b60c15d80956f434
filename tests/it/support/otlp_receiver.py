"""An OTLP/HTTP metrics receiver for the tests: decodes what it is sent with the OpenTelemetry
project's own protobuf definitions (the `opentelemetry-proto` package) and writes it down.

    python otlp_receiver.py OUT_DIR

Listens on a free loopback port and prints it on its first line of stdout. Each
`POST /v1/metrics` (Content-Type application/x-protobuf) is parsed as an
`ExportMetricsServiceRequest`, its raw bytes appended to OUT_DIR/raw.bin and the decoded
request (protobuf's JSON mapping) written as one line of OUT_DIR/requests.jsonl; the answer
is an empty `ExportMetricsServiceResponse`. A body that does not parse gets 400 and is written
to OUT_DIR/errors.txt. Runs until killed.
"""

import http.server
import os
import sys

from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

OUT = sys.argv[1]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/metrics":
            return self.answer(404, b"")
        try:
            request = ExportMetricsServiceRequest.FromString(body)
        except Exception as e:  # a body that is not the message
            with open(os.path.join(OUT, "errors.txt"), "a") as f:
                f.write(f"{self.headers.get('Content-Type')}: {e}\n")
            return self.answer(400, b"")
        with open(os.path.join(OUT, "raw.bin"), "ab") as f:
            f.write(body)
        with open(os.path.join(OUT, "requests.jsonl"), "a") as f:
            f.write(MessageToJson(request, indent=None) + "\n")
        self.answer(200, ExportMetricsServiceResponse().SerializeToString())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
