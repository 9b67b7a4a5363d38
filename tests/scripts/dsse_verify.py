#!/usr/bin/python3
"""Independent check of a repro-audit envelope with securesystemslib (Debian python3-securesystemslib).

usage: dsse_verify.py ENVELOPE.intoto.jsonl PUBLIC_KEY.pem
Builds the DSSE pre-authentication encoding from the DSSE specification (not from repro-audit's
code), verifies the Ed25519 signature with securesystemslib's key API, checks the key id
(SHA-256 of the DER public key) and prints the Statement's type, predicate type and subjects.
Exit 0 when valid, 1 when not.
"""
import base64
import hashlib
import json
import sys

from securesystemslib.exceptions import UnverifiedSignatureError
from securesystemslib.signer import Signature, SSlibKey

ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


def pae(payload_type: str, payload: bytes) -> bytes:
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def main() -> int:
    envelope = json.loads(open(sys.argv[1], encoding="utf-8").readline())
    pem = open(sys.argv[2], encoding="ascii").read()
    der = base64.b64decode("".join(l for l in pem.splitlines() if not l.startswith("-----")))
    if not der.startswith(ED25519_SPKI_PREFIX) or len(der) != 44:
        print("not an Ed25519 SubjectPublicKeyInfo")
        return 1
    keyid = hashlib.sha256(der).hexdigest()
    key = SSlibKey(keyid, "ed25519", "ed25519", {"public": der[12:].hex()})
    payload = base64.b64decode(envelope["payload"])
    message = pae(envelope["payloadType"], payload)
    ok = False
    for s in envelope["signatures"]:
        if s.get("keyid") != keyid:
            continue
        try:
            key.verify_signature(Signature(keyid, base64.b64decode(s["sig"]).hex()), message)
            ok = True
        except UnverifiedSignatureError:
            pass
    statement = json.loads(payload)
    print("payloadType", envelope["payloadType"])
    print("_type", statement["_type"])
    print("predicateType", statement["predicateType"])
    print("result", statement["predicate"]["result"])
    for s in statement["subject"]:
        print("subject", s["name"], s["digest"]["sha256"])
    print("signature", "valid" if ok else "INVALID", "keyid", keyid)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
