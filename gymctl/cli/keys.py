"""`gymctl keys generate KIND`: a fresh secret or key in the exact format its setting expects,
printed as a line for an environment file (`NAME=value`)."""

from __future__ import annotations

import secrets
from enum import StrEnum
from pathlib import Path

import typer

from gymctl.cli import codes
from gymctl.cli.output import JSON, err_console, print_json
from gymctl.errors import conflict

app = typer.Typer(no_args_is_help=True)


class Kind(StrEnum):
    invite_secret = "invite-secret"  # noqa: S105 (a name, not a secret)
    national_id_key = "national-id-key"
    billing_key = "billing-key"
    bridge_credentials_key = "bridge-credentials-key"
    storage_signing_secret = "storage-signing-secret"  # noqa: S105
    identity_dev_key = "identity-dev-key"


SETTINGS = {
    Kind.invite_secret: "INVITE_SECRET",
    Kind.national_id_key: "NATIONAL_ID_ENCRYPTION_KEY",
    Kind.billing_key: "GYMCTL_BILLING_ENCRYPTION_KEY",
    Kind.bridge_credentials_key: "GYMCTL_BRIDGE_CREDENTIALS_KEY",
    Kind.storage_signing_secret: "GYMCTL_STORAGE_SIGNING_SECRET",
    Kind.identity_dev_key: "IDENTITY_JWT_KEY",
}


@app.command("generate")
def generate(
    kind: Kind = typer.Argument(..., help="Which secret or key."),
    kid: str = typer.Option(
        "k1", "--kid", help="Key id of an encryption key (rotate: put the new one first)."
    ),
    private_key_out: Path | None = typer.Option(
        None,
        "--private-key-out",
        help="identity-dev-key: where the private half goes "
        "(default: the embedded default's signing key under GYMCTL_HOME).",
    ),
    as_json: bool = JSON,
) -> None:
    """Print NAME=value. Encryption keys are kid:base64 (32 random bytes, AES-256); secrets are
    64 url-safe characters; identity-dev-key prints the public key (IDENTITY_JWT_KEY) and saves
    the private key that signs dev tokens."""
    setting = SETTINGS[kind]
    if kind in (Kind.invite_secret, Kind.storage_signing_secret):
        value = secrets.token_urlsafe(48)
    elif kind is Kind.identity_dev_key:
        value = _identity_key_pair(private_key_out)
    else:
        from gymctl.crypto import generate_key_setting

        try:
            value = generate_key_setting(kid)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--kid") from None
    if as_json:
        print_json({"kind": kind.value, "setting": setting, "value": value})
    elif "\n" in value:
        # A multi-line value in an environment file: double quotes, newlines as \n.
        escaped = value.strip().replace("\n", "\\n")
        print(f'{setting}="{escaped}"')  # noqa: T201
    else:
        print(f"{setting}={value}")  # noqa: T201


def _identity_key_pair(private_key_out: Path | None) -> str:
    """Save a new RSA private key (mode 600; never overwritten) and return its public PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    embedded = private_key_out is None
    if private_key_out is None:
        from gymctl.config import get_settings

        private_key_out = get_settings().dev_signing_key_path
    if private_key_out.exists():
        raise conflict(
            codes.KEY_EXISTS, f"{private_key_out} exists; pass another --private-key-out"
        )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_key_out.parent.mkdir(parents=True, exist_ok=True)
    private_key_out.touch(mode=0o600)
    private_key_out.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if embedded:  # where the embedded default reads the public half without IDENTITY_JWT_KEY
        private_key_out.with_name("public_key.pem").write_bytes(public)
    err_console.print(f"private key written to {private_key_out}", highlight=False)
    return public.decode()
