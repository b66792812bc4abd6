"""The mTLS principal is Java's RFC 2253 form of the certificate subject (Kafka's default builder)."""

from kshare_sidecar.auth.principal import rfc2253, tls_principal


def test_most_specific_first_with_keywords():
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
               (("organizationalUnitName", "eng"),), (("commonName", "alice"),))
    assert tls_principal({"subject": subject}) == r"User:CN=alice,OU=eng,O=Acme\, Inc.,C=US"


def test_oid_hex_for_attributes_without_a_keyword_and_multivalued_rdns():
    subject = ((("commonName", "bob"), ("emailAddress", "b@x.io")),)
    assert rfc2253(subject) == "CN=bob+1.2.840.113549.1.9.1=#16066240782e696f"


def test_escapes_and_anonymous():
    assert rfc2253(((("commonName", " #a+b;<c> "),),)) == r"CN=\ #a\+b\;\<c\>\ "
    assert tls_principal(None) == "User:ANONYMOUS"
    assert tls_principal({}) == "User:ANONYMOUS"
