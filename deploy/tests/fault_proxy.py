#!/usr/bin/env python3
"""A fault-injecting HTTP proxy in front of moto_server, for xbench-deploy's tests.

Every AWS call the code under test makes goes through here: it is recorded (service, action,
region: one JSON line per call in RECORD_FILE, which the least-privilege test compares with
`xbench-deploy policy`), then either forwarded to moto or answered with a fault, as the JSON
file CONFIG says at the moment of the call (re-read every call, so a test switches faults by
rewriting it):

  deny             ["globalaccelerator:*", "ec2:DescribeTransitGateways", ...]  (fnmatch
                   patterns of service:Action): AccessDenied in the service's own error format
  throttle         [K, M]: of every M calls (counted over all calls), the first K are throttled
  down_regions     ["ap-southeast-2"]: calls signed for these regions get no answer at all (the
                   connection is closed), like an endpoint that cannot be reached
  stuck_instances  ["i-..."]: DescribeInstances shows them `shutting-down` whatever moto says
  dependency       ["subnet-...", "sg-...", "vpc-...", "igw-..."]: a Delete*/Detach* call naming
                   one of these ids is refused with DependencyViolation (what AWS answers while a
                   stuck instance's network interface still holds them)

Global Accelerator, which moto lacks, is answered here: ListAccelerators is an empty list (the
tests' scenarios make no accelerator), anything else is refused. So are Canonical's public AMI
parameters (/aws/service/canonical/..., which moto lacks and refuses to store): GetParameter
answers UBUNTU_AMI, an id moto accepts like any other.

Usage: fault_proxy.py UPSTREAM_URL CONFIG RECORD_FILE PORT_FILE
(listens on a free loopback port, written to PORT_FILE once it accepts connections).
"""

import fnmatch
import http.client
import http.server
import json
import re
import socketserver
import sys
import threading
import urllib.parse

UPSTREAM = urllib.parse.urlparse(sys.argv[1])
CONFIG = sys.argv[2]
RECORD = sys.argv[3]
PORT_FILE = sys.argv[4]

UBUNTU_AMI = "ami-0c0ffee0123456789"

LOCK = threading.Lock()
COUNT = [0]

CRED = re.compile(r"Credential=[^/]+/\d+/([^/]+)/([^/]+)/aws4_request")


def config():
    try:
        with open(CONFIG) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def s3_action(method, path, query):
    """The S3 API operation of a REST request (path-style: /bucket/key)."""
    parts = path.lstrip("/").split("/", 1)
    bucket = parts[0] if parts and parts[0] else None
    key = parts[1] if len(parts) > 1 and parts[1] else None
    q = set(query)
    if bucket is None:
        return "ListBuckets"
    if key is None:
        sub = {
            "tagging": "BucketTagging",
            "publicAccessBlock": "PublicAccessBlock",
            "policy": "BucketPolicy",
            "encryption": "BucketEncryption",
            "ownershipControls": "BucketOwnershipControls",
            "location": "BucketLocation",
            "lifecycle": "BucketLifecycleConfiguration",
        }
        for k, name in sub.items():
            if k in q:
                return {"GET": "Get", "PUT": "Put", "DELETE": "Delete"}.get(method, method) + name
        if method == "POST" and "delete" in q:
            return "DeleteObjects"
        if method == "PUT":
            return "CreateBucket"
        if method == "DELETE":
            return "DeleteBucket"
        if method == "HEAD":
            return "HeadBucket"
        if "versions" in q:
            return "ListObjectVersions"
        return "ListObjectsV2" if "list-type" in q else "ListObjects"
    return {
        "PUT": "PutObject",
        "GET": "GetObject",
        "HEAD": "HeadObject",
        "DELETE": "DeleteObject",
    }.get(method, method + "Object")


def identify(handler, body):
    """(service, action, region) of a request."""
    auth = handler.headers.get("Authorization", "")
    url = urllib.parse.urlparse(handler.path)
    query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    m = CRED.search(auth)
    if not m and "X-Amz-Credential" in query:  # a presigned URL
        cred = query["X-Amz-Credential"][0].split("/")
        m = (None, cred[2], cred[3]) if len(cred) >= 4 else None
        region, service = (m[1], m[2]) if m else ("?", "?")
    elif m:
        region, service = m.group(1), m.group(2)
    else:
        region, service = "?", "?"
    target = handler.headers.get("X-Amz-Target")
    if target:
        action = target.split(".")[-1]
    elif service == "s3":
        action = s3_action(handler.command, url.path, query)
    else:
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        action = (form.get("Action") or query.get("Action") or ["?"])[0]
    return service, action, region


def error_body(service, code, message):
    """(status, content type, body) of an error in the service's own protocol."""
    if service == "ec2":
        body = (
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>"
            f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>fault-proxy</RequestID></Response>"
        )
        return "text/xml", body
    if service in ("iam", "sts"):
        body = (
            "<ErrorResponse><Error><Type>Sender</Type>"
            f"<Code>{code}</Code><Message>{message}</Message></Error>"
            "<RequestId>fault-proxy</RequestId></ErrorResponse>"
        )
        return "text/xml", body
    if service == "s3":
        body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        return "application/xml", body
    return "application/x-amz-json-1.1", json.dumps({"__type": code, "message": message})


THROTTLE = {
    "ec2": ("RequestLimitExceeded", 503),
    "s3": ("SlowDown", 503),
    "iam": ("Throttling", 400),
    "sts": ("Throttling", 400),
}


def stuck(text, ids):
    """DescribeInstances XML with each of `ids` shown shutting-down."""
    for i in ids:
        start = text.find(f"<instanceId>{i}</instanceId>")
        while start >= 0:
            s = text.find("<instanceState>", start)
            e = text.find("</instanceState>", s)
            if s < 0 or e < 0:
                break
            text = (
                text[:s]
                + "<instanceState><code>32</code><name>shutting-down</name>"
                + text[e:]
            )
            start = text.find(f"<instanceId>{i}</instanceId>", s + 1)
    return text


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, ctype, body, extra=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def fail(self, service, code, status, message):
        ctype, body = error_body(service, code, message)
        extra = {"x-amzn-ErrorType": code} if ctype.startswith("application/x-amz-json") else {}
        self.reply(status, ctype, body, extra)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        service, action, region = identify(self, body)
        cfg = config()
        with LOCK:
            COUNT[0] += 1
            n = COUNT[0]
            with open(RECORD, "a") as f:
                f.write(json.dumps({"service": service, "action": action, "region": region}) + "\n")
        name = f"{service}:{action}"
        if region in cfg.get("down_regions", []):
            self.close_connection = True
            self.connection.close()
            return
        if any(fnmatch.fnmatchcase(name, p) for p in cfg.get("deny", [])):
            code = "AccessDeniedException" if service not in ("ec2", "s3", "iam", "sts") else (
                "UnauthorizedOperation" if service == "ec2" else "AccessDenied"
            )
            return self.fail(service, code, 403 if service != "ec2" else 400,
                             f"fault proxy: not authorized to perform {name}")
        k, m = cfg.get("throttle", [0, 1])
        if k and n % m < k:
            code, status = THROTTLE.get(service, ("ThrottlingException", 400))
            return self.fail(service, code, status, "fault proxy: Rate exceeded")
        deps = cfg.get("dependency", [])
        if deps and (action.startswith("Delete") or action.startswith("Detach")):
            text = body.decode("utf-8", "replace")
            for d in deps:
                if re.search(r"(=|%3D)" + re.escape(d) + r"(&|$)", text):
                    return self.fail(service, "DependencyViolation", 400,
                                     f"fault proxy: resource {d} has a dependent object")
        if service == "ssm" and action == "GetParameter":
            name = json.loads(body or b"{}").get("Name", "")
            if name.startswith("/aws/service/canonical/"):
                return self.reply(200, "application/x-amz-json-1.1", json.dumps({
                    "Parameter": {"Name": name, "Type": "String", "Value": UBUNTU_AMI, "Version": 1}
                }))
        if service == "globalaccelerator":
            if action == "ListAccelerators":
                return self.reply(200, "application/x-amz-json-1.1", json.dumps({"Accelerators": []}))
            return self.fail(service, "UnsupportedOperation", 400, f"fault proxy: no {action}")
        self.forward(body, action, cfg)

    def forward(self, body, action, cfg):
        conn = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        headers["Host"] = self.headers.get("Host", "")
        conn.request(self.command, self.path, body=body if body else None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if action == "DescribeInstances" and cfg.get("stuck_instances"):
            data = stuck(data.decode("utf-8", "replace"), cfg["stuck_instances"]).encode()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    tmp = PORT_FILE + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    import os

    os.replace(tmp, PORT_FILE)
    srv.serve_forever()


if __name__ == "__main__":
    main()
