"""The mTLS principal, as Kafka's DefaultKafkaPrincipalBuilder makes it with the default
``ssl.principal.mapping.rules``: ``User:`` + the subject's X.500 name in RFC 2253 form
(Java's ``X500Principal.getName()``): most specific RDN first, ``CN=alice,OU=eng,O=Acme,C=US``.

Java names CN, C, L, ST, O, OU, STREET, DC and UID by keyword; every other attribute is written
as its OID with the DER value in hex (``1.2.840.113549.1.9.1=#160d...`` for an e-mail address).
Python's ``getpeercert()`` gives attribute names, not OIDs or string types, so the hex form is
reproduced for the common ones below (with their usual ASN.1 string type) and an attribute not
listed keeps its OpenSSL name — documented in docs/security.md.
"""

from __future__ import annotations

from typing import Any

from . import ANONYMOUS

_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
#: name → (OID, DER tag of the string type it is normally encoded with)
_HEX = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13),
        "title": ("2.5.4.12", 0x0C), "surname": ("2.5.4.4", 0x0C), "givenName": ("2.5.4.42", 0x0C),
        "initials": ("2.5.4.43", 0x0C), "pseudonym": ("2.5.4.65", 0x0C), "postalCode": ("2.5.4.17", 0x0C)}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    data = value.encode()
    n = len(data)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return "#" + (bytes([tag]) + length + data).hex()


def _ava(name: str, value: str) -> str:
    if name in _KEYWORDS:
        return f"{_KEYWORDS[name]}={_escape(value)}"
    if name in _HEX:
        oid, tag = _HEX[name]
        return f"{oid}={_der_hex(tag, value)}"
    return f"{name}={_escape(value)}"


def rfc2253(subject: Any) -> str:
    """``getpeercert()['subject']`` (RDNs in certificate order) → Java's RFC 2253 string."""
    return ",".join("+".join(_ava(n, v) for n, v in rdn) for rdn in reversed(list(subject)))


def tls_principal(peer_cert: dict[str, Any] | None) -> str:
    """``User:<subject DN>`` for a verified client certificate, else Kafka's ``User:ANONYMOUS``."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS
    return "User:" + rfc2253(peer_cert["subject"])
