"""TLS interception, only for the hosts a session's credentials are bound to.

A credential goes into a request's headers; over HTTPS the proxy can only add it by terminating the
sandbox's TLS. So the agent makes a CA at start (its key only in this process's memory, a new one
each start) and signs, per host, a short-lived leaf the sandbox's client accepts because the
sandbox trusts the CA: a bundle of the system's roots plus the agent's CA, written beside the
proxy's socket and named by SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO and
NODE_EXTRA_CA_CERTS. The proxy then speaks TLS to the real host itself, verifying it against the
system's roots (plus --egress-ca-file). A CONNECT to a host without a binding is never intercepted:
the sandbox's TLS goes through untouched.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dataplane_agent.sandboxes.base import EGRESS_CA_INNER, EGRESS_CA_NAME

_SYSTEM_ROOTS = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
_LEAF_DAYS = 2
_MAX_LEAVES = 1024


def trust_env() -> dict[str, str]:
    """The variables that make a sandbox's TLS clients trust the bundle."""
    names = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS")
    return dict.fromkeys(names, EGRESS_CA_INNER)


class Interception:
    """The agent's CA, the leaves it signs, and the TLS contexts on both sides."""

    def __init__(self, extra_roots: bytes = b"") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "AstraBox egress proxy (this agent's run)")])
        self._name = name
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self._leaves: dict[str, ssl.SSLContext] = {}
        self._upstream = ssl.create_default_context()
        if extra_roots:
            self._upstream.load_verify_locations(cadata=extra_roots.decode("ascii", "replace"))

    @property
    def ca_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write_bundle(self, directory: Path) -> Path:
        """The sandbox's trust bundle (the system's roots and the agent's CA), world-readable:
        nothing secret in it."""
        roots = next((Path(p).read_bytes() for p in _SYSTEM_ROOTS if Path(p).is_file()), b"")
        path = Path(directory) / EGRESS_CA_NAME
        with tempfile.NamedTemporaryFile(dir=directory, delete=False) as handle:
            handle.write(roots.rstrip(b"\n") + b"\n" + self.ca_pem)
        Path(handle.name).chmod(0o644)
        Path(handle.name).replace(path)
        return path

    def upstream(self) -> ssl.SSLContext:
        """How the proxy verifies the real host."""
        return self._upstream

    def for_host(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf for `host` (a canonical name or address)."""
        context = self._leaves.get(host)
        if context is not None:
            return context
        if len(self._leaves) >= _MAX_LEAVES:
            self._leaves.clear()
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alternative: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alternative = x509.DNSName(host)
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=_LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        # The key goes to OpenSSL through a private temporary file, removed at once.
        with tempfile.TemporaryDirectory() as scratch:
            pem = Path(scratch) / "leaf.pem"
            pem.touch(mode=0o600)
            pem.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
                + leaf.public_bytes(serialization.Encoding.PEM)
                + self.ca_pem
            )
            context.load_cert_chain(pem)
        self._leaves[host] = context
        return context
