#!/usr/bin/env python3
"""A stand-in of the Hugging Face Hub for halo's tests (standard library only).

    fake_hub.py ROOT [--token T] [--cut-after N] [--cdn-host H] [--log FILE]

ROOT holds repos as ROOT/ORG/NAME/<files> (or ROOT/NAME/<files>). Prints the
port it listens on (127.0.0.1, chosen by the OS) as its first stdout line.

Serves what huggingface_hub and halo use:
  GET  /api/models/{repo}/revision/{rev}  -> {"sha", "siblings": [{"rfilename"}]}
  HEAD/GET /{repo}/resolve/{rev}/{file}   -> ETag (git blob sha1), X-Repo-Commit;
       *.safetensors are "LFS": 302 to http://CDN_HOST:PORT/cdn/{repo}/{file}
       with X-Linked-Etag (sha256) and X-Linked-Size
  GET  /cdn/{repo}/{file}                 -> the bytes, Range supported (206);
       like a pre-signed S3 URL it rejects an Authorization header (400)
Each repo has one commit (a sha1 of its file names and contents), reachable
as "main" or by that sha; other revisions are 404 (RevisionNotFound).
--token: /api and /resolve need "Authorization: Bearer T", else 401.
--cut-after N: the first body download of a *.safetensors file sends N bytes
and closes the connection (once), to test resuming.
--log FILE: one JSON line per request (method, path, range, auth, status).
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Repo:
    def __init__(self, path):
        self.path = path
        self.files = sorted(
            os.path.relpath(os.path.join(d, f), path)
            for d, _, names in os.walk(path, followlinks=True) for f in names)
        h = hashlib.sha1()
        for f in self.files:
            h.update(f.encode() + b"\0" + self.read(f))
        self.sha = h.hexdigest()

    def read(self, f):
        with open(os.path.join(self.path, f), "rb") as fh:
            return fh.read()


class Hub:
    def __init__(self, args):
        self.root = args.root
        self.token = args.token
        self.cut_after = args.cut_after
        self.cdn_host = args.cdn_host
        self.log_path = args.log
        self.lock = threading.Lock()
        self.repos = {}

    def repo(self, repo_id):
        path = os.path.join(self.root, *repo_id.split("/"))
        if ".." in repo_id.split("/") or not os.path.isdir(path):
            return None
        with self.lock:
            if repo_id not in self.repos:
                self.repos[repo_id] = Repo(path)
            return self.repos[repo_id]

    def take_cut(self):
        with self.lock:
            n, self.cut_after = self.cut_after, None
            return n

    def log(self, entry):
        if self.log_path:
            with self.lock, open(self.log_path, "a") as fh:
                fh.write(json.dumps(entry) + "\n")


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None  # set in main

    def log_message(self, fmt, *args):  # quiet: requests go to --log
        pass

    def do_HEAD(self):
        self.route(head=True)

    def do_GET(self):
        self.route(head=False)

    # ------------------------------------------------------------ routing
    def route(self, head):
        self.status = 0
        parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(self.path).path.split("/")[1:]]
        try:
            if parts[:2] == ["api", "models"] and "revision" in parts:
                i = parts.index("revision")
                self.api(head, "/".join(parts[2:i]), "/".join(parts[i + 1:]))
            elif parts[:1] == ["cdn"]:
                self.cdn(head, parts[1:])
            elif "resolve" in parts[1:3]:
                i = parts.index("resolve")
                self.resolve(head, "/".join(parts[:i]), parts[i + 1], "/".join(parts[i + 2:]))
            else:
                self.error(404, "EntryNotFound", "no such route")
        finally:
            self.hub.log({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                          "auth": self.headers.get("Authorization"), "status": self.status})

    def authorized(self, repo_id):
        if not self.hub.token or self.headers.get("Authorization") == "Bearer " + self.hub.token:
            return True
        self.error(401, "GatedRepo", "Access to model %s is restricted; you must be authenticated." % repo_id)
        return False

    def find(self, repo_id, rev):
        repo = self.hub.repo(repo_id)
        if repo is None:
            self.error(404, "RepoNotFound", "Repository Not Found for url: %s" % self.path)
        elif rev not in ("main", repo.sha):
            self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            repo = None
        return repo

    # ------------------------------------------------------------ endpoints
    def api(self, head, repo_id, rev):
        if not self.authorized(repo_id):
            return
        repo = self.find(repo_id, rev)
        if repo:
            body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": repo.sha, "private": False,
                               "siblings": [{"rfilename": f} for f in repo.files]}).encode()
            self.send(200, {"Content-Type": "application/json"}, body, head)

    def resolve(self, head, repo_id, rev, name):
        if not self.authorized(repo_id):
            return
        repo = self.find(repo_id, rev)
        if not repo:
            return
        if name not in repo.files:
            return self.error(404, "EntryNotFound", "%s does not exist at %s" % (name, rev))
        data = repo.read(name)
        headers = {"X-Repo-Commit": repo.sha}
        if name.endswith(".safetensors"):  # LFS: the bytes live on the "CDN"
            port = self.server.server_address[1]
            headers.update({"X-Linked-Etag": '"%s"' % hashlib.sha256(data).hexdigest(),
                            "X-Linked-Size": str(len(data)), "ETag": '"%s"' % git_blob_sha1(data),
                            "Location": "http://%s:%d/cdn/%s/%s" % (self.hub.cdn_host, port, repo_id,
                                                                     urllib.parse.quote(name))})
            return self.send(302, headers, b"", head)
        headers["ETag"] = '"%s"' % git_blob_sha1(data)
        self.send_file(data, headers, head, cut=None)

    def cdn(self, head, parts):
        if self.headers.get("Authorization"):
            return self.error(400, "AuthorizationSentToCdn", "pre-signed URLs take no Authorization header")
        for split in (2, 1):
            repo = self.hub.repo("/".join(parts[:split]))
            name = "/".join(parts[split:])
            if repo and name in repo.files:
                data = repo.read(name)
                cut = None if head else self.hub.take_cut()
                return self.send_file(data, {"ETag": '"%s"' % hashlib.sha256(data).hexdigest()}, head, cut)
        self.error(404, "EntryNotFound", "no such object")

    # ------------------------------------------------------------ responses
    def send_file(self, data, headers, head, cut):
        headers["Accept-Ranges"] = "bytes"
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-") and rng[6:-1].isdigit():
            start = int(rng[6:-1])
            if start >= len(data):
                headers["Content-Range"] = "bytes */%d" % len(data)
                return self.send(416, headers, b"", head)
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
            return self.send(206, headers, data[start:], head, cut)
        self.send(200, headers, data, head, cut)

    def error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send(status, {"X-Error-Code": code, "X-Error-Message": message,
                           "Content-Type": "application/json"}, body, False)

    def send(self, status, headers, body, head, cut=None):
        self.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if cut is not None and cut < len(body):
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True  # the client sees a short body
            return
        self.wfile.write(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--token")
    ap.add_argument("--cut-after", type=int)
    ap.add_argument("--cdn-host", default="localhost",
                    help="host name in LFS redirects; differs from 127.0.0.1 so tokens must not follow")
    ap.add_argument("--log")
    args = ap.parse_args()
    Handler.hub = Hub(args)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
