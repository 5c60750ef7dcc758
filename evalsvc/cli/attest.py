"""``evalsvc attest``: signed verdicts (``evalsvc.services.attest``; docs/cli.md, "Signed
verdicts").

- ``evalsvc attest RUN [--key PRIVATE] [-o FILE]`` (also ``attest sign RUN``) writes the run's
  in-toto Statement in a DSSE envelope signed with Ed25519 (to stdout, or FILE). Without
  ``--key``, the service's key ``EVALSVC_ATTEST_KEY``. Exit 0 written; 2 no key, a key that
  cannot be read, an unknown run or one not finished yet (with the fix); 4 a database error.
- ``evalsvc attest keygen [PATH]`` writes a key pair: PATH (the private key, mode 0600) and
  PATH.pub. Exit 0, or 2 when either file exists (keys are never overwritten).
- ``evalsvc attest verify FILE --key PUB [--require VERDICT] [--max-age AGE] [--max-reuse-age
  AGE] [--no-allowed-differences]`` exits 0 when the signature verifies with PUB and every
  requirement holds, 1 otherwise (one line saying which check failed), 2 when FILE or PUB cannot
  be read.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ._dbcommon import EXIT_CONFIG, DatabaseUrlOption, fail, fail_store, open_store
from ._policy import MaxReuseAgeOption, NoAllowedDifferencesOption, parse_age
from ._safe import plain


class _SignByDefault(TyperGroup):
    """``evalsvc attest RUN`` is ``evalsvc attest sign RUN``: an argument that names no
    subcommand goes to ``sign``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["sign", *args]
        out: list[str] = super().parse_args(ctx, args)
        return out


app = typer.Typer(
    name="attest",
    cls=_SignByDefault,
    help="Signed verdicts: attest RUN, keygen, verify.",
    no_args_is_help=True,
)


@app.command("sign")
def sign(
    run: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
    key: Annotated[
        Path | None,
        typer.Option("--key", help="Ed25519 private key (PEM); default $EVALSVC_ATTEST_KEY."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the envelope here, not stdout.")
    ] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Write RUN's verdict as a signed in-toto attestation (DSSE envelope)."""
    from evalsvc.db import StoreError
    from evalsvc.services import attest, history

    try:
        private = attest.load_private_key(key) if key is not None else attest.service_key()
    except (ValueError, LookupError) as exc:
        fail(f"{exc} (or pass --key PRIVATE)" if key is None else str(exc), EXIT_CONFIG)
    store = open_store(database_url)
    try:
        info = history.find_run(store, run)
        envelope = attest.attest_run(store, info.id, private)
    except (history.RunNotFound, history.AmbiguousRunId, history.RunNotFinished,
            LookupError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except StoreError as exc:
        fail_store(exc)
    finally:
        store.close()
    text = json.dumps(envelope, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        verdict = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
        typer.echo(f"wrote the attestation of run {info.id} ({verdict['verdict']}) to {out}",
                   err=True)


@app.command("keygen")
def keygen(
    path: Annotated[
        Path, typer.Argument(help="Where to write the private key; the public key is PATH.pub.")
    ] = Path("evalsvc-attest.key"),
) -> None:
    """Write an Ed25519 key pair: PATH (private, mode 0600) and PATH.pub."""
    from evalsvc.services import attest

    try:
        private, public = attest.keygen(path)
    except (FileExistsError, OSError) as exc:
        fail(str(exc), EXIT_CONFIG)
    typer.echo(f"wrote private key {private} (mode 0600; set EVALSVC_ATTEST_KEY={private} on "
               f"the server and workers) and public key {public} (give it to `evalsvc attest "
               "verify --key`)", err=True)


@app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="The attestation (DSSE envelope JSON).")],
    key: Annotated[Path, typer.Option("--key", help="The signer's Ed25519 public key (PEM).")],
    require: Annotated[
        str | None,
        typer.Option("--require", metavar="VERDICT",
                     help="The verdict the run must read (e.g. pass)."),
    ] = None,
    max_age: Annotated[
        str | None,
        typer.Option("--max-age", metavar="AGE",
                     help="Refuse an attestation made longer ago than AGE (e.g. 7d, 12h)."),
    ] = None,
    max_reuse_age: MaxReuseAgeOption = None,
    no_allowed_differences: NoAllowedDifferencesOption = False,
) -> None:
    """Verify an attestation: exit 0 when it is signed by KEY and satisfies every requirement,
    1 otherwise."""
    from evalsvc.services import attest

    try:
        max_age_s, reuse_s = parse_age(max_age), parse_age(max_reuse_age)
    except typer.BadParameter as exc:
        fail(str(exc), EXIT_CONFIG)
    try:
        public = attest.load_public_key(key)
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)
    try:
        text = file.read_bytes()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", EXIT_CONFIG)
    try:
        envelope = json.loads(text)
    except ValueError:
        typer.echo(f"invalid: {plain(str(file))} is not JSON (a DSSE envelope is)", err=True)
        raise typer.Exit(1) from None
    try:
        ok = attest.verify(envelope, public, require=require, max_age_s=max_age_s,
                           max_reuse_age_s=reuse_s,
                           allowed_differences=not no_allowed_differences)
    except attest.AttestationError as exc:
        typer.echo(f"invalid: {plain(str(exc))}", err=True)
        raise typer.Exit(1) from None
    p = ok.predicate
    names = ", ".join(str(s.get("name")) for s in ok.statement.get("subject") or [])
    typer.echo(f"verified: run {plain(str(p.get('run_id')))} reads {plain(str(p.get('verdict')))} "
               f"for {plain(names)} (signed by keyid {ok.keyid[:16]}, made "
               f"{plain(str(p.get('created')))})", err=True)
