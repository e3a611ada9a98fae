"""A small Toxiproxy HTTP API client (requests): list proxies, add and remove toxics.

API: https://github.com/Shopify/toxiproxy#http-api — ``GET /proxies``, ``GET /proxies/{p}``,
``POST /proxies/{p}/toxics`` (``{"name","type","stream","toxicity","attributes"}``),
``DELETE /proxies/{p}/toxics/{t}`` (204). Errors come back as ``{"error": msg, "status": n}``.
"""
from __future__ import annotations

import requests


class ToxiproxyError(RuntimeError):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(f"Toxiproxy answered {status}: {message}")


class Toxiproxy:
    def __init__(self, url: str, timeout: float = 5.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.http = requests.Session()
        self.http.trust_env = False       # never send loopback API calls through an HTTP proxy

    def _call(self, method: str, path: str, **kw):
        r = self.http.request(method, self.url + path, timeout=self.timeout, **kw)
        if r.status_code >= 400:
            try:
                message = r.json().get("error") or r.json().get("title") or r.text
            except ValueError:
                message = r.text.strip()
            raise ToxiproxyError(r.status_code, message)
        return r

    def version(self) -> str:
        text = self._call("GET", "/version").text.strip()
        return text if not text.startswith("{") else requests.models.complexjson.loads(text).get("version", text)

    def proxies(self) -> dict[str, dict]:
        return self._call("GET", "/proxies").json()

    def proxy(self, name: str) -> dict:
        return self._call("GET", f"/proxies/{name}").json()

    def add_toxic(self, proxy: str, name: str, type: str, attributes: dict, stream: str = "downstream",
                  toxicity: float = 1.0) -> dict:
        body = {"name": name, "type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        return self._call("POST", f"/proxies/{proxy}/toxics", json=body).json()

    def remove_toxic(self, proxy: str, name: str) -> bool:
        """Remove a toxic; False when it was already gone (so recovery is idempotent)."""
        try:
            self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")
        except ToxiproxyError as exc:
            if exc.status == 404 and "toxic" in str(exc):
                return False
            raise
        return True
