"""Input hunt 12's small ones: messages that repeated the input or named the wrong thing, a URL with no host."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contracts.redis_url import check_url
from locustfiles.script import ScriptError, load_script
from oracle.verdict import GateError, parse_gates

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("url", ["redis://:35851/0", "redis://:pw@:6379/0", "rediss://:6380"])
def test_a_store_url_with_a_port_and_no_host_is_refused(url, tmp_path):
    """`redis://:35851/0` (a host variable left empty) connected to localhost without a word: on a CI runner that
    audits some other Redis, or none."""
    with pytest.raises(ValueError, match=r"no host in ':\d+': redis-py would connect to localhost instead"):
        check_url(url)
    out = subprocess.run([sys.executable, "-m", "oracle", "audit", str(tmp_path), "--store-url", url], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no host in" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "pw" not in out.stderr


@pytest.mark.parametrize("url", ["redis://localhost", "redis://127.0.0.1:6379/0", "redis://[::1]:6379/1",
                                 "redis://u:p@host:1/0", "unix:///tmp/redis.sock"])
def test_urls_with_a_host_still_pass(url):
    check_url(url)


@pytest.mark.parametrize("value, said", [("{n: 2}", "a mapping is not a whole number"),
                                         ("[2]", "a list is not a whole number")])
def test_a_script_number_given_as_a_mapping_says_so(tmp_path, value, said):
    """`repeat: {n: 2}` said "repeat: None is not a whole number"."""
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\nrepeat: {value}\nsteps:\n  - plant: order number\n  - probe: order number\n")
    with pytest.raises(ScriptError, match=f"s.yaml:2: repeat: {said}"):
        load_script(path)


def test_two_profiles_are_refused_without_repeating_the_input_as_the_advice():
    """`--gate strict,strict` was told "give it first, 'strict,strict'": the input itself."""
    with pytest.raises(GateError) as caught:
        parse_gates("strict,strict")
    assert "gives more than one profile" in str(caught.value) and "give it first" not in str(caught.value)
    with pytest.raises(GateError, match="give it first, 'strict,errors=1%'"):  # a profile after a gate: as before
        parse_gates("errors=1%,strict")


def test_a_tls_url_to_a_plain_text_redis_says_tls_may_be_why(redis_server):
    """`rediss://` to a plain-text Redis port timed out after ~14 s with no word of TLS: the server never answers
    the handshake. The reader's check (the audit's, and Locust's start check) now says what rediss:// asked for."""
    from oracle.redis_reader import RedisReader
    from oracle.store import StoreError, StoreOptions

    url = f"rediss://127.0.0.1:{redis_server.port}/0?socket_timeout=1&socket_connect_timeout=1"
    with pytest.raises(StoreError, match=r"cannot reach the store .*the URL asks for TLS, rediss://: a server that "
                                         r"does not speak TLS on this port .* use redis://"):
        RedisReader(StoreOptions(url=url)).check()
    plain = "redis://127.0.0.1:1/0?socket_connect_timeout=1"  # nothing listens: no word of TLS
    with pytest.raises(StoreError) as refused:
        RedisReader(StoreOptions(url=plain)).check()
    assert "TLS" not in str(refused.value)


def test_a_store_url_at_an_http_server_says_it_does_not_speak_redis(tmp_path):
    """`--store-url` at the bot's HTTP port said only `Protocol error, got "<" as reply type byte` (input hunt 13,
    m12): the message now says the port does not speak Redis's protocol and names --http-url."""
    import http.server
    import threading

    from oracle.redis_reader import RedisReader
    from oracle.store import StoreError, StoreOptions

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"redis://127.0.0.1:{server.server_address[1]}/0?socket_timeout=5"
        with pytest.raises(StoreError, match=r"cannot reach the store .*Protocol error.*does not speak Redis's "
                                             r"protocol: is it the bot's HTTP port.*--http-url"):
            RedisReader(StoreOptions(url=url)).check()
    finally:
        server.shutdown()
        server.server_close()


def test_a_history_server_with_a_self_signed_certificate_names_requests_ca_bundle(tmp_path, monkeypatch):
    """Locust's client does not check certificates, so a staging bot with a self-signed one took the whole load, and
    only the audit's --http-url GETs refused it, with OpenSSL's words alone (input hunt 13, m11). The message now
    says why and names REQUESTS_CA_BUNDLE, which makes the same read work."""
    import http.server
    import ssl
    import threading

    from oracle.http_reader import HttpReader
    from test_oracle_units import _Histories
    from oracle.store import StoreError, StoreOptions

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)

    _Histories.store = {"s1": []}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Histories)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}/sessions/{{session}}/history"
    try:
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
        with pytest.raises(StoreError, match=r"CERTIFICATE_VERIFY_FAILED.*self-signed staging certificate\? Locust's "
                                             r"turns do not check it, the audit's reads do: .*REQUESTS_CA_BUNDLE"):
            [list(batch) for batch in HttpReader(StoreOptions(http_url=url, timeout_s=5)).read(["s1"])]
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
        [[raw]] = [list(batch) for batch in HttpReader(StoreOptions(http_url=url, timeout_s=5)).read(["s1"])]
        assert raw.exists and raw.entries == []
    finally:
        server.shutdown()
        server.server_close()
