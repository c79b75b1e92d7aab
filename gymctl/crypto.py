"""The one encryption helper: AES-256-GCM for sensitive columns (national ids first).

A keyring comes from a setting `kid:base64key[,kid:base64key...]`. The first key encrypts and
every key decrypts, so a key is rotated by putting the new one first and keeping the old ones
until every value has been re-encrypted (`needs_rotation`, `reencrypt`).

A stored value is `v1.<kid>.<urlsafe-b64(nonce || ciphertext+tag)>`: a fresh random 12-byte nonce
per encryption, and associated data that binds the version, key id, table, column and row id, so
a value copied to another row, column or table (or relabelled with another key id) fails to
decrypt instead of silently showing someone else's data.

Nothing here ever puts plaintext or key material into an exception message or a repr: errors name
the setting, the key id or the table and column, never the value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gymctl.errors import ConfigError

if TYPE_CHECKING:
    from gymctl.config import Settings

__all__ = [
    "DecryptionError",
    "FieldCipher",
    "Keyring",
    "generate_key_setting",
    "national_id_cipher",
]

VERSION = "v1"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # the GCM standard nonce; random per encryption
TAG_BYTES = 16
NATIONAL_ID_SETTING = "NATIONAL_ID_ENCRYPTION_KEY"

_KID = re.compile(r"[A-Za-z0-9_-]{1,16}")
_TO_STANDARD_B64 = str.maketrans("-_", "+/")


class DecryptionError(Exception):
    """A stored value cannot be decrypted: malformed, tampered, moved or under an unknown key.

    The message names the reason (and the table and column), never the value or a key.
    """


def _valid_kid(kid: str) -> bool:
    return _KID.fullmatch(kid) is not None


def _decode_key(text: str) -> bytes | None:
    """Standard or urlsafe base64, padding optional; None when it is not base64 at all."""
    text = text.translate(_TO_STANDARD_B64).rstrip("=")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


class Keyring:
    """Named AES-256 keys; the first encrypts, all decrypt.

    Built only from validated entries, and its repr shows key ids only, so a keyring can be
    logged or shown in a traceback without leaking a key.
    """

    __slots__ = ("_aeads", "_current")

    def __init__(self, entries: Iterable[tuple[str, bytes]], *, setting: str) -> None:
        aeads: dict[str, AESGCM] = {}
        for position, (kid, key) in enumerate(entries, start=1):
            # Never echo an invalid kid: a pasted key in the wrong place would be printed.
            if not _valid_kid(kid):
                raise ConfigError(
                    f"{setting}: entry {position} has an invalid key id "
                    "(1-16 characters of A-Z, a-z, 0-9, _ and -)"
                )
            if kid in aeads:
                raise ConfigError(f"{setting}: key id {kid!r} appears more than once")
            if len(key) != KEY_BYTES:
                raise ConfigError(
                    f"{setting}: key {kid!r} must be {KEY_BYTES} bytes (AES-256) in base64, "
                    f"got {len(key)} bytes"
                )
            aeads[kid] = AESGCM(key)
        if not aeads:
            raise ConfigError(f"{setting} holds no key (expected kid:base64key[,kid:base64key])")
        self._aeads = aeads
        self._current = next(iter(aeads))

    @classmethod
    def parse(cls, value: str, *, setting: str) -> Keyring:
        """Read `kid:base64key[,kid:base64key...]`; errors name `setting`, never a key."""
        entries: list[tuple[str, bytes]] = []
        text = value.strip()
        if not text:
            raise ConfigError(f"{setting} is empty (expected kid:base64key[,kid:base64key])")
        for position, raw in enumerate(text.split(","), start=1):
            entry = raw.strip()
            if not entry:
                raise ConfigError(f"{setting}: entry {position} is empty (stray comma?)")
            kid, sep, key_text = entry.partition(":")
            if not sep:
                raise ConfigError(f"{setting}: entry {position} is not of the form kid:base64key")
            kid = kid.strip()
            key = _decode_key(key_text.strip())
            if key is None:
                shown = repr(kid) if _valid_kid(kid) else f"in entry {position}"
                raise ConfigError(f"{setting}: key {shown} is not valid base64")
            entries.append((kid, key))
        return cls(entries, setting=setting)

    @property
    def current_kid(self) -> str:
        """The key id new values are encrypted under."""
        return self._current

    @property
    def kids(self) -> tuple[str, ...]:
        """Every key id that can decrypt, the current one first."""
        return tuple(self._aeads)

    def aead(self, kid: str) -> AESGCM | None:
        """The cipher for one key id, or None when the keyring does not hold it."""
        return self._aeads.get(kid)

    def __repr__(self) -> str:
        return f"Keyring(current={self._current!r}, kids={list(self._aeads)!r})"


def _associated_data(kid: str, table: str, column: str, row_id: str) -> bytes:
    """Bind the value to its version, key and place; length-prefixed so no two places collide."""
    parts = [VERSION, kid, table, column, row_id]
    for name, part in zip(("table", "column", "row_id"), parts[2:], strict=True):
        if not isinstance(part, str) or not part:
            raise ValueError(f"{name} must be a non-empty string")
    encoded = [part.encode("utf-8", "surrogatepass") for part in parts]
    return b"gymctl-field|" + b"|".join(b"%d:%s" % (len(part), part) for part in encoded)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes | None:
    """Decode only the canonical unpadded urlsafe form, so every stored character matters."""
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return data if _b64(data) == text else None


class FieldCipher:
    """Encrypts and decrypts one column's values, bound to their table, column and row."""

    __slots__ = ("_keyring",)

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    def encrypt(self, plaintext: str, *, table: str, column: str, row_id: str) -> str:
        """Encrypt under the current key with a fresh random nonce (never reused)."""
        if not isinstance(plaintext, str):
            raise TypeError("plaintext must be a string")
        try:
            data = plaintext.encode("utf-8")
        except UnicodeEncodeError:
            # The UnicodeEncodeError would carry the whole plaintext: drop it.
            raise ValueError("plaintext is not encodable as UTF-8") from None
        kid = self._keyring.current_kid
        aead = self._keyring.aead(kid)
        assert aead is not None
        nonce = os.urandom(NONCE_BYTES)
        sealed = aead.encrypt(nonce, data, _associated_data(kid, table, column, row_id))
        return f"{VERSION}.{kid}.{_b64(nonce + sealed)}"

    def decrypt(self, value: str, *, table: str, column: str, row_id: str) -> str:
        """Decrypt a stored value; DecryptionError if it is not this place's authentic value."""
        kid, payload = self._split(value, where=f"{table}.{column}")
        aead = self._keyring.aead(kid)
        if aead is None:
            raise DecryptionError(f"{table}.{column}: value is under unknown key id {kid!r}")
        ad = _associated_data(kid, table, column, row_id)
        try:
            data = aead.decrypt(payload[:NONCE_BYTES], payload[NONCE_BYTES:], ad)
            return data.decode("utf-8")
        except (InvalidTag, UnicodeDecodeError):
            raise DecryptionError(
                f"{table}.{column}: value failed authentication "
                "(tampered, or copied from another row, column or table)"
            ) from None

    def needs_rotation(self, value: str) -> bool:
        """True when the value is not under the current key (including an unknown key id).

        Raises DecryptionError for a value that is not in the stored format at all.
        """
        kid, _ = self._split(value, where="field value")
        return kid != self._keyring.current_kid

    def reencrypt(self, value: str, *, table: str, column: str, row_id: str) -> str:
        """The value under the current key; returned unchanged (but verified) if already there.

        Returning the same string lets a rotation job skip the write when nothing changed.
        """
        plaintext = self.decrypt(value, table=table, column=column, row_id=row_id)
        if not self.needs_rotation(value):
            return value
        return self.encrypt(plaintext, table=table, column=column, row_id=row_id)

    def _split(self, value: str, *, where: str) -> tuple[str, bytes]:
        """Parse `v1.<kid>.<payload>`; the error never echoes the value (it may be plaintext)."""
        malformed = DecryptionError(f"{where}: value is not an encrypted field value")
        if not isinstance(value, str):
            raise malformed
        parts = value.split(".")
        if len(parts) != 3 or parts[0] != VERSION or not _valid_kid(parts[1]):
            raise malformed
        payload = _unb64(parts[2])
        if payload is None or len(payload) < NONCE_BYTES + TAG_BYTES:
            raise malformed
        return parts[1], payload

    def __repr__(self) -> str:
        return f"FieldCipher({self._keyring!r})"


def national_id_cipher(settings: Settings) -> FieldCipher:
    """The cipher for national ids, from NATIONAL_ID_ENCRYPTION_KEY; ConfigError if unset."""
    secret = settings.national_id_encryption_key
    if secret is None:
        raise ConfigError(
            f"{NATIONAL_ID_SETTING} is not set (generate one with "
            "gymctl.crypto.generate_key_setting())"
        )
    return FieldCipher(Keyring.parse(secret.get_secret_value(), setting=NATIONAL_ID_SETTING))


def generate_key_setting(kid: str = "k1") -> str:
    """A fresh `kid:base64key` entry (32 random bytes) for the quick start, docs and rotation."""
    if not _valid_kid(kid):
        raise ValueError("kid must be 1-16 characters of A-Z, a-z, 0-9, _ and -")
    return f"{kid}:{base64.urlsafe_b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


BILLING_SETTING = "GYMCTL_BILLING_ENCRYPTION_KEY"


def billing_cipher(settings: Settings) -> FieldCipher:
    """The cipher for saved cards and provider credentials. Outside production, without the
    setting, a key derived from a per-home secret lets the embedded default run."""
    if settings.billing_encryption_key is not None:
        value = settings.billing_encryption_key.get_secret_value()
        return FieldCipher(Keyring.parse(value, setting=BILLING_SETTING))
    seed = settings.home_secret(BILLING_SETTING, None)
    return FieldCipher(Keyring([("home", hashlib.sha256(seed).digest())], setting=BILLING_SETTING))
