"""Read stored histories over HTTP: GET a URL template per session, JSON with a messages list.

For bots whose store the tester cannot reach directly. 404 (or 410) means the session has
no history (the key is gone); other errors stop the read, like a dead Redis would. Requests
run on a small thread pool, in order, one batch at a time, so memory stays bounded.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator
from urllib.parse import quote

import requests

from oracle.decode import message_list
from oracle.store import RawSession, StoreError, StoreOptions, batches


class HttpReader:
    def __init__(self, options: StoreOptions, workers: int = 8):
        self.options = options
        self.http = requests.Session()
        self.workers = workers

    def read(self, sessions: list[str]) -> Iterator[list[RawSession]]:
        with ThreadPoolExecutor(self.workers) as pool:
            for batch in batches(sessions, self.options.batch):
                yield list(pool.map(self._one, batch))

    def _one(self, session: str) -> RawSession:
        url = self.options.http_url.replace("{session}", quote(session, safe=""))  # a bot's own id may need it
        try:
            response = self.http.get(url, timeout=self.options.timeout_s)
        except requests.RequestException as exc:
            raise StoreError(f"GET {url} failed: {exc}") from exc
        if response.status_code in (404, 410):
            return RawSession(session, url, False, None, [], "none")
        if response.status_code >= 400:
            raise StoreError(f"GET {url} answered HTTP {response.status_code}: {response.text[:200]!r}")
        try:
            body = response.json()
        except ValueError:
            return RawSession(session, url, True, None, [response.content], "string")
        messages = message_list(body, self.options.messages_field)
        if messages is None:
            return RawSession(session, url, True, None, [response.content], "string")
        return RawSession(session, url, True, None, list(messages), "http")

    def foreign(self, owned) -> Iterable[dict]:
        return ()  # an HTTP endpoint cannot be listed

    def check(self) -> None:
        pass
