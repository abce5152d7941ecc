"""The sim's serving certificate. client-go sends a bearer token only over TLS, so the API is
served over HTTPS: with the certificate and key given, or with a self-signed one made at start
(as kube-apiserver makes one when given none), whose PEM a kubeconfig trusts as its
`certificate-authority-data`."""

from __future__ import annotations

import ipaddress
import ssl
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_FOR = timedelta(days=365)


def self_signed(host: str, now: datetime) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for 127.0.0.1, ::1, localhost and `host`, valid from `now`
    (the wall clock's: a certificate is checked against real time, never the sim's)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodewright-sim-apiserver")])
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    try:
        address = ipaddress.ip_address(host)
        if all(not (isinstance(n, x509.IPAddress) and n.value == address) for n in names):
            names.append(x509.IPAddress(address))
    except ValueError:
        if host and host != "localhost":
            names.append(x509.DNSName(host))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def server_context(certificate: bytes, key: bytes) -> ssl.SSLContext:
    """A TLS server context for the PEMs (written to a private temporary folder only for as long
    as `load_cert_chain`, which reads files, needs them)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="nodewright-sim-tls-") as folder:
        cert_path, key_path = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert_path.write_bytes(certificate)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(cert_path, key_path)
    return context
