"""A real Kubernetes-shaped API server over real TLS, on 127.0.0.1, for the collector's HTTPS path.

Its own CA signs its certificate (cryptography), so the client is tested as it runs against EKS: it must trust
that CA and nothing else, send the bearer token, page with limit/continue, and read 401/403 as the API server
answers them. It serves the node and event lists it is given and records every request.

It authorizes as EKS does: a bearer token authenticates as `identity` (the access entry's username and Kubernetes
groups; None: no access entry, 401 Unauthorized), and every request is evaluated against `rbac` (by default the
shipped deploy/kubernetes/gpuaudit-reader.yaml, as `kubectl apply` leaves it) before anything is served: a request
RBAC does not allow gets the API server's 403 Status, so this stand-in is no more lenient than the cluster."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpuaudit.domain.kube_access import READER_GROUP
from tests.helpers.kube_rbac import UNAUTHORIZED, Identity, Rbac, forbidden_status, request_info

# What the stack's access entry makes of the auditor's role (EKS's default username for an IAM role).
AUDITOR = Identity(user="arn:aws:sts::123456789012:assumed-role/GpuAudit-FunctionsInventoryRole/{{SessionName}}",
                   groups=(READER_GROUP, "system:authenticated"))


def _certificate(subject: str, issuer_key: Any, issuer: x509.Name | None, key: Any, ca: bool) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def new_ca() -> tuple[Any, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, _certificate("test-cluster-ca", key, None, key, ca=True)


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class KubeServer:
    url: str
    ca_data: str  # base64 of the CA's PEM, as eks:DescribeCluster's certificateAuthority.data
    nodes: list[dict[str, Any]]
    events: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200  # what every request is answered with when not 200 (401, 403, 500)
    requests: list[tuple[str, dict[str, list[str]], str]] = field(default_factory=list)  # path, query, auth
    identity: Identity | None = AUDITOR  # who a bearer token is; None: EKS knows no access entry for it
    rbac: Rbac = field(default_factory=Rbac.from_manifest)


@contextmanager
def kube_server(nodes: list[dict[str, Any]],
                signed_by: tuple[Any, x509.Certificate] | None = None) -> Iterator[KubeServer]:
    """A server whose certificate is signed by `signed_by` (default: its own new CA, the one `ca_data` names)."""
    ca_key, ca_cert = new_ca()
    signer_key, signer_cert = signed_by or (ca_key, ca_cert)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("localhost", signer_key, signer_cert.subject, key, ca=False)
    state = KubeServer(url="", ca_data=base64.b64encode(pem(ca_cert)).decode(), nodes=nodes)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            query = parse_qs(url.query)
            state.requests.append((url.path, query, self.headers.get("Authorization", "")))
            info = request_info(url.path, query, "GET")
            if state.status == 401 or state.identity is None or \
                    not self.headers.get("Authorization", "").startswith("Bearer "):
                return self._send(401, UNAUTHORIZED)
            if state.status == 403 or not state.rbac.allows(state.identity, info):
                return self._send(403, forbidden_status(state.identity, info))
            items = {"/api/v1/nodes": state.nodes, "/api/v1/events": state.events}.get(url.path)
            if state.status != 200 or items is None:
                code = state.status if state.status != 200 else 404
                body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code,
                        "reason": "NotFound" if code == 404 else "InternalError", "message": "the server could not "
                        "find the requested resource" if code == 404 else "an error on the server"}
                return self._send(code, body)
            start = int(query.get("continue", ["0"])[0])
            limit = int(query.get("limit", [str(len(items) or 1)])[0])
            more = start + limit < len(items)
            self._send(200, {"kind": "List", "items": items[start:start + limit],
                             "metadata": {"continue": str(start + limit)} if more else {}})

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with tempfile.TemporaryDirectory() as tmp:
        chain = Path(tmp) / "server.pem"
        chain.write_bytes(pem(cert) + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(chain)
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        # polled every 50 ms (socketserver's default is 0.5 s): shutdown() waits for the poll, once per test
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        state.url = f"https://127.0.0.1:{server.server_address[1]}"
        try:
            yield state
        finally:
            server.shutdown()
            server.server_close()
