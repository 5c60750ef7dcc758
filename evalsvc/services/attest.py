"""Signed verdicts a deployment step can verify: a run's verdict as an in-toto Statement in a
DSSE envelope signed with Ed25519.

Contract:
- ``statement(store, run_id)`` is the in-toto Statement v1 of a finished run: one subject per
  candidate (its served model's name; digest ``evalsvc-fingerprint``: the candidate's provenance
  fingerprint, ``evalsvc.domain.provenance_fingerprint``), ``predicateType``
  :data:`PREDICATE_TYPE`, and a predicate with the run id, the verdict and exit code, the
  reasons, every gate, the report's ``basis`` (what the verdict rests on), each suite
  snapshot's fingerprint (SHA-256 of its canonical JSON), the baseline's fingerprint, evalsvc's
  version and when it was made. ``RunNotFinished`` for a queued or running run, ``LookupError``
  for an unknown one. Nothing is stored: the statement is made from the stored run and report
  whenever it is asked for (no migration; two statements of a run differ in ``created`` only).
- ``sign(statement, key)`` is the DSSE envelope (``payloadType``
  ``application/vnd.in-toto+json``, the payload in base64, one signature over the DSSE
  pre-authentication encoding ``PAE(type, payload)`` with its ``keyid``: the SHA-256 of the raw
  public key). ``verify(envelope, public_key, …)`` checks the signature over the exact payload
  bytes, the statement's types, then the pipeline's requirements (``require``: the verdict;
  ``max_age_s``: how old the statement may be; the basis policy of
  ``evalsvc.reports.policy_refusals``), and raises ``AttestationError`` with the reason.
- Keys: ``keygen(private_path)`` writes a PKCS#8 PEM private key (mode 0600, never over an
  existing file) and its SubjectPublicKeyInfo PEM beside it (``.pub``). The service signs with
  ``Settings.attest_key`` (``EVALSVC_ATTEST_KEY``); ``service_key()`` loads it, ``AttestKeyMissing``
  when it is not set.
- Signing uses the ``cryptography`` library's Ed25519; nothing is hand-rolled but the PAE, whose
  bytes the DSSE specification fixes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from evalsvc import __version__
from evalsvc.domain import RunStatus, provenance_fingerprint
from evalsvc.services.history import RunNotFinished, gate

if TYPE_CHECKING:
    from evalsvc.db import Store

__all__ = [
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "AttestKeyMissing",
    "AttestationError",
    "Verified",
    "attest_run",
    "keygen",
    "keyid",
    "load_private_key",
    "load_public_key",
    "pae",
    "service_key",
    "sign",
    "statement",
    "verify",
    "write_after_run",
]

log = logging.getLogger(__name__)

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://evalsvc.dev/attestation/verdict/v1"
#: The subject's digest algorithm name: evalsvc's provenance fingerprint of the candidate.
DIGEST_NAME = "evalsvc-fingerprint"


class AttestationError(ValueError):
    """An envelope that does not verify, or a statement that does not satisfy a requirement."""


class AttestKeyMissing(LookupError):
    """No signing key is configured (``EVALSVC_ATTEST_KEY``)."""


# ---------------------------------------------------------------------------------- keys


def keygen(private_path: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair: ``private_path`` (0600) and ``private_path`` + ``.pub``.
    ``FileExistsError`` when either exists: a key is never overwritten."""
    public_path = private_path.with_name(private_path.name + ".pub")
    for p in (private_path, public_path):
        if p.exists():
            raise FileExistsError(f"{p} exists; keys are never overwritten: choose another path "
                                  "or remove it first")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # O_EXCL and the mode at creation: the private key is never readable by others, even briefly.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public_path.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private_path, public_path


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``path`` (PKCS#8 PEM); ``ValueError`` naming the fix."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise ValueError(f"cannot read the signing key {path}: {exc.strerror or exc}; create "
                         "one with: evalsvc attest keygen") from exc
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path} is not an unencrypted PEM private key ({exc}); create one "
                         "with: evalsvc attest keygen") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 key; create one with: evalsvc attest keygen")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in ``path`` (PEM); ``ValueError`` naming the fix."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the public key {path}: {exc.strerror or exc}") from exc
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        hint = (" (that is a private key: give its .pub)" if b"PRIVATE KEY" in data else "")
        raise ValueError(f"{path} is not a PEM public key{hint}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path} is not an Ed25519 public key")
    return key


def keyid(public: Ed25519PublicKey) -> str:
    """SHA-256 (hex) of the raw 32-byte public key: which key signed, without trusting it."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def service_key() -> Ed25519PrivateKey:
    """The service's signing key (``EVALSVC_ATTEST_KEY``); ``AttestKeyMissing`` when unset."""
    from evalsvc.settings import Settings

    path = Settings().attest_key
    if path is None:
        raise AttestKeyMissing(
            "no signing key is configured: set EVALSVC_ATTEST_KEY to a private key made by "
            "`evalsvc attest keygen` on the server and its workers"
        )
    return load_private_key(path)


# ---------------------------------------------------------------------------------- statement


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode()


def _gates(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"candidate": c.get("role"), "suite": s.get("suite"), "kind": s.get("kind"),
         "verdict": s.get("verdict"), "gated": s.get("gated", True), "metric": s.get("metric"),
         "test": s.get("test"), "baseline": s.get("baseline"), "candidate_value": s.get("candidate"),
         "delta": s.get("delta"), "ci": s.get("ci"), "margin": s.get("margin"),
         "alpha": s.get("alpha"), "p_value": s.get("p_value"), "n": s.get("n"),
         "n_errors": s.get("n_errors")}
        for c in report.get("candidates") or [] for s in c.get("suites") or []
    ]


def statement(store: Store, run_id: str, *, now: datetime | None = None) -> dict[str, Any]:
    """The in-toto Statement of a finished run (module contract)."""
    from evalsvc.endpoints import redact_url, redact_urls_in
    from evalsvc.reports import basis, endpoint_label

    run = store.get_run(run_id)
    if run is None:
        raise LookupError(f"no run {run_id!r} (list them: evalsvc runs list)")
    if run.status in (RunStatus.queued, RunStatus.running):
        raise RunNotFinished(f"run {run.id} is {run.status.value}: it has no verdict to attest "
                             "yet; attest it once it finished (evalsvc runs show " f"{run.id})")
    report = store.get_report(run.id)
    g = gate(run, report)
    snapshots = store.get_endpoint_snapshots(run.id)
    subjects = []
    for i, cand in enumerate(run.spec.candidates):
        role = f"candidate:{i}"
        ref, prov = snapshots.get(role, (cand, None))
        model = (prov.model if prov is not None else None) or cand.model
        subject: dict[str, Any] = {"name": model or cand.name or "unknown"}
        if prov is not None:  # a candidate never probed has no fingerprint to bind
            subject["digest"] = {DIGEST_NAME: provenance_fingerprint(prov)}
        else:
            subject["digest"] = {}
        subject["annotations"] = {
            "role": role, "endpoint": endpoint_label({"name": ref.name, "url": redact_url(ref.url),
                                                      "model": model}),
        }
        subjects.append(subject)
    base = snapshots.get("baseline")
    suites = [
        {"name": s["name"], "kind": s.get("kind"), "version": s.get("version"),
         "sha256": hashlib.sha256(_canonical(s.get("spec"))).hexdigest()}
        for s in store.get_suite_snapshots(run.id)
    ]
    created = (now or datetime.now(UTC)).isoformat()
    predicate = {
        "run_id": run.id,
        "status": run.status.value,
        "verdict": g.verdict,
        "exit_code": g.exit_code,
        "reasons": list(g.reasons),
        "gates": _gates(report or {}),
        "basis": redact_urls_in(basis(report)) if report else None,
        "baseline": None if base is None else {
            "model": base[1].model or base[0].model,
            "endpoint": endpoint_label({"name": base[0].name, "url": redact_url(base[0].url),
                                        "model": base[1].model or base[0].model}),
            "fingerprint": provenance_fingerprint(base[1]),
        },
        "suites": suites,
        "run_finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "evalsvc_version": __version__,
        "created": created,
    }
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
            "predicate": predicate}


# ---------------------------------------------------------------------------------- DSSE


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP
    body``, lengths as ASCII decimal byte counts (github.com/secure-systems-lab/dsse,
    protocol.md)."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign(stmt: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """The DSSE envelope of ``stmt`` signed with ``key`` (module contract)."""
    payload = _canonical(stmt)
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}],
    }


def attest_run(store: Store, run_id: str, key: Ed25519PrivateKey | None = None,
               *, now: datetime | None = None) -> dict[str, Any]:
    """The signed envelope of a finished run, with ``key`` or the service's."""
    return sign(statement(store, run_id, now=now), key if key is not None else service_key())


@dataclass(frozen=True)
class Verified:
    """A verified statement and what the checks found."""

    statement: dict[str, Any]
    keyid: str

    @property
    def predicate(self) -> dict[str, Any]:
        out: dict[str, Any] = self.statement["predicate"]
        return out


def _b64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise AttestationError(f"the envelope's {what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AttestationError(f"the envelope's {what} is not valid base64: {exc}") from exc


def verify(
    envelope: Any,
    public: Ed25519PublicKey,
    *,
    require: str | None = None,
    max_age_s: float | None = None,
    max_reuse_age_s: float | None = None,
    allowed_differences: bool = True,
    now: datetime | None = None,
) -> Verified:
    """Check ``envelope`` (module contract); ``AttestationError`` says what failed."""
    if not isinstance(envelope, dict):
        raise AttestationError("not a DSSE envelope: expected a JSON object with payloadType, "
                               "payload and signatures")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestationError(f"payloadType is {envelope.get('payloadType')!r}, not "
                               f"{PAYLOAD_TYPE!r}: not an in-toto attestation")
    payload = _b64(envelope.get("payload"), "payload")
    sigs = envelope.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise AttestationError("the envelope has no signatures")
    message = pae(PAYLOAD_TYPE, payload)
    kid = keyid(public)
    for s in sigs:
        if not isinstance(s, dict):
            continue
        try:
            public.verify(_b64(s.get("sig"), "signature"), message)
        except (InvalidSignature, AttestationError):
            continue
        break
    else:
        named = {s.get("keyid") for s in sigs if isinstance(s, dict)}
        who = ("it was signed by another key (keyid "
               + ", ".join(sorted(str(k)[:16] for k in named if k)) + ")"
               if named and kid not in named else "the envelope was changed after it was signed")
        raise AttestationError(f"the signature does not verify with this public key (keyid "
                               f"{kid[:16]}): {who}")
    try:
        stmt = json.loads(payload)
    except ValueError as exc:
        raise AttestationError(f"the signed payload is not JSON: {exc}") from exc
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"the payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    if stmt.get("predicateType") != PREDICATE_TYPE:
        raise AttestationError(f"predicateType is {stmt.get('predicateType')!r}, not an evalsvc "
                               f"verdict ({PREDICATE_TYPE})")
    pred = stmt.get("predicate")
    if not isinstance(pred, dict):
        raise AttestationError("the statement has no predicate")
    if require is not None and pred.get("verdict") != require:
        raise AttestationError(f"run {pred.get('run_id')} reads {pred.get('verdict')!r} "
                               f"(exit {pred.get('exit_code')}), not {require!r} as --require "
                               "asks")
    if max_age_s is not None:
        try:
            created = datetime.fromisoformat(str(pred.get("created")))
        except ValueError as exc:
            raise AttestationError("the statement has no valid 'created' time, so --max-age "
                                   "cannot be checked") from exc
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        age = ((now or datetime.now(UTC)) - created).total_seconds()
        if age > max_age_s:
            from evalsvc.reports import human_age

            raise AttestationError(f"the attestation was made {human_age(age)} ago, older than "
                                   f"--max-age {human_age(max_age_s)}: attest the run again or "
                                   "run the gate again")
    if max_reuse_age_s is not None or not allowed_differences:
        from evalsvc.reports import policy_refusals

        refused = policy_refusals(pred.get("basis") or {}, max_reuse_age_s=max_reuse_age_s,
                                  allowed_differences=allowed_differences)
        if refused:
            raise AttestationError("refused by policy: " + "; ".join(refused))
    return Verified(statement=stmt, keyid=kid)


# ---------------------------------------------------------------------------------- worker


def write_after_run(store: Store, run_id: str) -> Path | None:
    """The worker's attestation of a run it finished: when ``EVALSVC_ATTEST_KEY`` is set, the
    envelope is written to ``<EVALSVC_HOME>/attestations/RUN.intoto.json`` (the same envelope
    ``GET /runs/{id}/attestation`` makes on demand, signed at the run's end). Never raises: an
    attestation that cannot be made is logged, and the run stays as it finished."""
    from evalsvc.settings import Settings

    settings = Settings()
    if settings.attest_key is None:
        return None
    try:
        envelope = attest_run(store, run_id, load_private_key(settings.attest_key))
        out_dir = settings.home / "attestations"
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{run_id}.intoto.json"
        path.write_text(json.dumps(envelope, indent=2) + "\n", encoding="utf-8")
    except Exception:  # noqa: BLE001 - an attestation is never worth failing a finished run
        log.exception("run %s: could not write its attestation", run_id)
        return None
    log.info("run %s: attestation written to %s", run_id, path)
    return path
