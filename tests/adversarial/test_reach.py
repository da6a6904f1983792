"""Reaching inside (issue 37, hole 1): a JSON schema's ``$ref`` to a URL must not make a
rule worker fetch it. An internal HTTP server on loopback counts every connection; the
schema points at it (and at a closed port): it is never contacted, and the answer does
not tell a listening port from a closed one."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager

from tests.adversarial.conftest import AS_A, AS_B


@contextmanager
def internal_server():
    """A loopback server that counts the connections made to it (and answers a schema)."""
    contacts: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(1)
                try:
                    contacts.append(conn.recv(4096))
                    body = b'{"type": "string"}'
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                        + str(len(body)).encode()
                        + b"\r\n\r\n"
                        + body
                    )
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], contacts
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_schema_ref_never_reaches_a_host_and_is_no_port_oracle(attacked):
    dead = closed_port()
    with internal_server() as (port, contacts), attacked.watch(headers=AS_B, against_alone=True):
        errors = {}
        for name, target in (("open", port), ("closed", dead)):
            url = f"http://127.0.0.1:{target}/internal/schema.json"
            rubric = attacked.post(
                "/v1/rubric",
                {
                    "items": [{"response": '"hello"'}],
                    "criteria": [{"name": "s", "fn": "json_schema", "args": {"schema": {"$ref": url}}}],
                },
                headers=AS_A,
            )
            assert rubric.status_code == 200, rubric.text
            (result,) = rubric.json()["results"]
            assert result["valid"] is False
            errors[name] = result["criteria"][0]["error"].replace(str(target), "PORT")
            # The served rule model reads the item's reference as its schema: the same.
            served = attacked.post(
                "/v1/score",
                {"model": "schema", "items": [{"response": '"hello"', "reference": {"$ref": url}}]},
                headers=AS_A,
            )
            (scored,) = served.json()["results"]
            assert served.status_code == 200 and scored["valid"] is False
            assert "never fetched" in scored["error"]
        # A reference inside the schema still resolves.
        inside = attacked.post(
            "/v1/rubric",
            {
                "items": [{"response": '"hello"'}],
                "criteria": [
                    {
                        "name": "s",
                        "fn": "json_schema",
                        "args": {"schema": {"$defs": {"t": {"type": "string"}}, "$ref": "#/$defs/t"}},
                    }
                ],
            },
            headers=AS_A,
        )
        assert inside.json()["results"][0]["score"] == 1.0
    assert contacts == [], contacts
    assert errors["open"] == errors["closed"] and "never fetched" in errors["open"]
