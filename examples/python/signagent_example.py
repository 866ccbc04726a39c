#!/usr/bin/env python3
"""A partner system calling the signagent agent: Python 3, standard library only.

It asks the agent for a signature, a session (auth.sid), an authorization
(a business Authorization header) and makes business calls through the
agent's proxy, handling errors by the documented status and the
Signagent-Error header (docs/agent.md, docs/openapi.yaml).

Usage:  signagent_example.py PHONE SERVICE_USER_ID

Where the agent is (environment, never argv, for anything secret):
  SIGNAGENT_AGENT_URL          a TCP listener, e.g. http://127.0.0.1:8700; then
  SIGNAGENT_BEARER_TOKEN_FILE  the file holding the agent's bearer token
  SIGNAGENT_AGENT_SOCK         else the Unix socket (default
                               $XDG_RUNTIME_DIR/signagent/agent.sock)
"""
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse


class AgentError(Exception):
    """An answer the agent wrote itself: {"error": {"code", "message", ...}}."""

    def __init__(self, status, body, retry_after=None):
        err = {}
        try:
            err = json.loads(body).get("error", {})
        except ValueError:
            pass  # not the agent's JSON (a proxy in between?): keep the status
        self.status = status
        self.code = err.get("code", "")
        self.service_code = err.get("serviceCode", "")  # the service's code, on 422
        self.retry_after = retry_after
        super().__init__(f"{status} {self.code}: {err.get('message', body[:200])}")

    @property
    def temporary(self):
        # 429 queue_full and 503 (token_not_ready, busy, ...) say "try again
        # in a moment" (Retry-After); 502/504 are the service's trouble.
        return self.status in (429, 503)


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket: the agent checks the caller's uid."""

    def __init__(self, path, timeout):
        super().__init__("signagent", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Agent:
    def __init__(self):
        self.headers = {}
        url = os.environ.get("SIGNAGENT_AGENT_URL")
        if url:
            u = urllib.parse.urlsplit(url)
            self.connect = lambda: http.client.HTTPConnection(u.hostname, u.port or 80, timeout=35)
            # The bearer token is a secret: from a file (0600), never argv.
            token_file = os.environ.get("SIGNAGENT_BEARER_TOKEN_FILE")
            if not token_file:
                raise OSError("SIGNAGENT_BEARER_TOKEN_FILE names no file")
            with open(token_file) as f:
                self.headers["Authorization"] = "Bearer " + f.read().strip()
        else:
            path = os.environ.get("SIGNAGENT_AGENT_SOCK") or os.path.join(
                os.environ.get("XDG_RUNTIME_DIR", "/run"), "signagent", "agent.sock")
            self.connect = lambda: UnixHTTPConnection(path, timeout=35)

    def request(self, method, path, body=None, headers=None):
        """One HTTP exchange: (status, headers, body text)."""
        conn = self.connect()
        try:
            h = dict(self.headers, **(headers or {}))
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                h["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read().decode()
        finally:
            conn.close()

    def call(self, method, path, body=None):
        """A call to the agent's own API: the JSON answer, or AgentError.
        A temporary refusal is tried again after Retry-After, three times."""
        for attempt in range(3):
            status, headers, text = self.request(method, path, body)
            if status == 200:
                return json.loads(text)
            err = AgentError(status, text, headers.get("Retry-After"))
            if not err.temporary or attempt == 2:
                raise err
            time.sleep(int(err.retry_after or 1))

    def service(self, method, identity):
        """A business call through the proxy. The answer is the service's
        own unless it carries Signagent-Error: then the agent wrote it."""
        status, headers, text = self.request("GET", "/v1/service/" + method,
                                             headers={"Signagent-Identity": identity})
        if headers.get("Signagent-Error"):
            raise AgentError(status, text, headers.get("Retry-After"))
        return status, headers, text


def main(phone, service_user_id):
    agent = Agent()

    # A signature of the trusted-authentication text, made on the token.
    sig = agent.call("POST", "/v1/signatures", {"phone": phone})
    print(f"signature: {len(sig['signature'])} base64 characters of CMS, "
          f"signer certificate {sig['certificateThumbprint']}")

    # A session: the auth.sid is a secret, so print only its length.
    sess = agent.call("POST", "/v1/sessions", {"phone": phone, "serviceUserId": service_user_id})
    print(f"session: an auth.sid of {len(sess['sid'])} characters, cached {str(sess['cached']).lower()}")

    # An Authorization header for your own business calls (legacy scheme,
    # by the session above). The agent gives it only with
    # --expose-legacy-header; else 403: use the proxy below instead.
    auth = agent.call("POST", "/v1/authorizations", {
        "scheme": "legacy", "by": "sid", "credential": {"phone": phone}, "serviceUserId": service_user_id})
    print(f"authorization: a {auth['authorization'].split(' ')[0]} header of "
          f"{len(auth['authorization'])} characters, expires {auth['expiresAt']}")

    # Business calls through the agent's proxy: it adds the header.
    identity = f"trusted phone={phone} serviceUserId={service_user_id}"
    status, _, text = agent.service("GetMyOrganizations?autoRegister=false", identity)
    print(f"business call: GetMyOrganizations answered {status}, "
          f"{len(json.loads(text)['Organizations'])} organization(s)")

    # The service's own refusal comes as the service sent it.
    status, headers, _ = agent.service("GetMyEmployee?boxId=00000000-0000-0000-0000-000000000000", identity)
    print(f"business call: GetMyEmployee answered {status} by the service "
          f"(X-Service-ErrorCode {headers.get('X-Service-ErrorCode')})")

    # The agent's own refusal carries Signagent-Error: here the service
    # knows no user linked to this serviceUserId (422 service_refused).
    try:
        agent.service("GetMyOrganizations?autoRegister=false",
                      f"trusted phone={phone} serviceUserId={service_user_id}-unlinked")
    except AgentError as e:
        if e.status != 422:
            raise
        print(f"business call: the agent answered {e.status} {e.code} ({e.service_code})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: signagent_example.py PHONE SERVICE_USER_ID")
    try:
        main(sys.argv[1], sys.argv[2])
    except AgentError as e:
        sys.exit(f"signagent example: the agent answered {e}")
    except (OSError, http.client.HTTPException) as e:
        sys.exit(f"signagent example: the agent could not be reached: {e}")
