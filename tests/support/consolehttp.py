"""Plain HTTP to the web console's API (tests of gateway/console/): one cookie, and a record
of everything received (to search it for secrets)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any


class Http:
    """Plain HTTP to the gateway, with a cookie jar of one cookie and a record of everything
    received (to search it for secrets)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookie: str | None = None
        self.seen: list[bytes] = []

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None, *, cookie: bool = True
                ) -> tuple[int, dict[str, str], bytes]:
        h = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        if cookie and self.cookie:
            h["Cookie"] = self.cookie
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            self.seen.append(repr(resp.getheaders()).encode() + data)
            return resp.status, hdrs, data
        finally:
            conn.close()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def login(self, access: str, secret: str, origin: str | None = "same",
              accept_json: bool = True) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if accept_json:
            headers["Accept"] = "application/json"
        if origin == "same":
            headers["Origin"] = self.origin
        elif origin is not None:
            headers["Origin"] = origin
        body = urllib.parse.urlencode({"access_key": access, "secret_key": secret}).encode()
        status, hdrs, data = self.request("POST", "/console/api/login", body, headers,
                                          cookie=False)
        if "set-cookie" in hdrs and status in (200, 303):
            self.cookie = hdrs["set-cookie"].split(";", 1)[0]
        return status, hdrs, data

    def get_json(self, path: str) -> tuple[int, Any]:
        status, _, data = self.request("GET", "/console/api/" + path,
                                       headers={"Accept": "application/json"})
        return status, json.loads(data) if data else None
