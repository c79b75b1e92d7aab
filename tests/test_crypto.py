"""Field encryption: round trips, authenticity, binding to the row, rotation, and no leaks."""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gymctl.config import ConfigError, Settings
from gymctl.crypto import (
    DecryptionError,
    FieldCipher,
    Keyring,
    generate_key_setting,
    national_id_cipher,
)

SETTING = "NATIONAL_ID_ENCRYPTION_KEY"
KEY1 = bytes(range(32))
KEY2 = bytes(range(100, 132))
K1 = "k1:" + base64.b64encode(KEY1).decode()
K2 = "k2:" + base64.urlsafe_b64encode(KEY2).decode()
PLACE = {"table": "users", "column": "national_id", "row_id": "0b7c6f1e-row-1"}
SECRET = "19850412-1234"
URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def cipher(setting: str = K1) -> FieldCipher:
    return FieldCipher(Keyring.parse(setting, setting=SETTING))


# -- round trip -------------------------------------------------------------------------------


@given(st.text())
def test_any_text_round_trips(plaintext):
    c = cipher()
    stored = c.encrypt(plaintext, **PLACE)
    assert c.decrypt(stored, **PLACE) == plaintext


@given(plaintext=st.text(max_size=20), row_id=st.text(min_size=1, max_size=20))
def test_any_row_id_round_trips(plaintext, row_id):
    c = cipher()
    place = {**PLACE, "row_id": row_id}
    assert c.decrypt(c.encrypt(plaintext, **place), **place) == plaintext


def test_the_stored_format_names_version_and_key():
    stored = cipher().encrypt(SECRET, **PLACE)
    version, kid, payload = stored.split(".")
    assert (version, kid) == ("v1", "k1")
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    assert len(raw) == 12 + len(SECRET.encode()) + 16  # nonce || ciphertext || tag
    assert SECRET not in stored


def test_the_empty_string_round_trips():
    c = cipher()
    assert c.decrypt(c.encrypt("", **PLACE), **PLACE) == ""


def test_two_encryptions_of_the_same_value_differ():
    c = cipher()
    values = {c.encrypt(SECRET, **PLACE) for _ in range(50)}
    assert len(values) == 50
    nonces = {base64.urlsafe_b64decode(v.split(".")[2] + "==")[:12] for v in values}
    assert len(nonces) == 50


def test_a_lone_surrogate_is_refused_without_echoing_the_plaintext():
    with pytest.raises(ValueError) as caught:
        cipher().encrypt("secret\ud800", **PLACE)
    assert "secret" not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize("missing", ["table", "column", "row_id"])
def test_the_place_must_be_named(missing):
    with pytest.raises(ValueError, match=missing):
        cipher().encrypt(SECRET, **{**PLACE, missing: ""})


# -- authenticity -----------------------------------------------------------------------------


def test_flipping_any_bit_of_the_payload_fails():
    c = cipher()
    stored = c.encrypt("1234", **PLACE)
    prefix, payload = stored.rsplit(".", 1)
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    for index in range(len(raw)):
        for bit in range(8):
            tampered = bytearray(raw)
            tampered[index] ^= 1 << bit
            encoded = base64.urlsafe_b64encode(bytes(tampered)).decode().rstrip("=")
            with pytest.raises(DecryptionError):
                c.decrypt(f"{prefix}.{encoded}", **PLACE)


def test_changing_any_character_of_the_stored_value_fails():
    # Covers the base64 padding bits too: only the canonical encoding is accepted.
    c = cipher()
    stored = c.encrypt("1234", **PLACE)
    for index, original in enumerate(stored):
        for replacement in URLSAFE + ".=+/ ":
            if replacement == original:
                continue
            tampered = stored[:index] + replacement + stored[index + 1 :]
            with pytest.raises(DecryptionError):
                c.decrypt(tampered, **PLACE)


def test_truncating_or_extending_fails():
    c = cipher()
    stored = c.encrypt(SECRET, **PLACE)
    for cut in range(1, len(stored)):
        with pytest.raises(DecryptionError):
            c.decrypt(stored[:cut], **PLACE)
    for extra in ("A", "AA", "AAAA", "=", "==", "\n", " "):
        with pytest.raises(DecryptionError):
            c.decrypt(stored + extra, **PLACE)


@pytest.mark.parametrize(
    "moved",
    [
        {"row_id": "0b7c6f1e-row-2"},
        {"column": "passport_number"},
        {"table": "members"},
        {"table": "users|national_id", "column": "x"},
    ],
)
def test_a_value_moved_to_another_place_fails(moved):
    c = cipher()
    stored = c.encrypt(SECRET, **PLACE)
    with pytest.raises(DecryptionError) as caught:
        c.decrypt(stored, **{**PLACE, **moved})
    assert SECRET not in str(caught.value)
    assert stored not in str(caught.value)


def test_places_that_would_join_alike_do_not_collide():
    c = cipher()
    stored = c.encrypt(SECRET, table="a|b", column="c", row_id="1")
    with pytest.raises(DecryptionError):
        c.decrypt(stored, table="a", column="b|c", row_id="1")


def test_relabelling_the_key_id_fails_even_under_the_same_key():
    # The key id is in the associated data, not only in front of the ciphertext.
    same = "a:" + base64.b64encode(KEY1).decode() + ",b:" + base64.b64encode(KEY1).decode()
    c = cipher(same)
    stored = c.encrypt(SECRET, **PLACE)
    assert stored.startswith("v1.a.")
    with pytest.raises(DecryptionError):
        c.decrypt("v1.b." + stored[len("v1.a.") :], **PLACE)


def test_another_key_cannot_decrypt():
    stored = cipher(K1).encrypt(SECRET, **PLACE)
    other = "k1:" + base64.b64encode(KEY2).decode()
    with pytest.raises(DecryptionError):
        cipher(other).decrypt(stored, **PLACE)


def test_an_unknown_key_id_fails():
    stored = cipher(K1).encrypt(SECRET, **PLACE)
    with pytest.raises(DecryptionError, match="unknown key id 'k1'"):
        cipher(K2).decrypt(stored, **PLACE)


def test_an_unknown_version_fails():
    c = cipher()
    stored = c.encrypt(SECRET, **PLACE)
    with pytest.raises(DecryptionError):
        c.decrypt("v2" + stored[2:], **PLACE)


@pytest.mark.parametrize(
    "value",
    [
        "",
        SECRET,  # a plaintext stored by mistake
        "v1",
        "v1.k1",
        "v1.k1.",
        "v1..AAAA",
        "v1.k1.AAAA",
        "v1.k1.!!!!",
        "v1.k1.AAAA.AAAA",
        "v1.this-kid-is-far-too-long.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "v1.k1." + "A" * 37,
        "v1.k1.é",
        "v1.k1.\x00",
    ],
)
def test_malformed_values_fail_without_echoing_them(value):
    with pytest.raises(DecryptionError) as caught:
        cipher().decrypt(value, **PLACE)
    if value:
        assert value not in str(caught.value)


@settings(max_examples=300)
@given(st.text())
def test_arbitrary_strings_fail_only_with_decryption_error(value):
    c = cipher()
    with pytest.raises(DecryptionError):
        c.decrypt(value, **PLACE)
    with pytest.raises(DecryptionError):
        c.needs_rotation(value)


@settings(max_examples=300)
@given(st.text(alphabet=URLSAFE + "=.+/", max_size=80))
def test_arbitrary_payloads_fail_only_with_decryption_error(payload):
    with pytest.raises(DecryptionError):
        cipher().decrypt("v1.k1." + payload, **PLACE)


@given(st.binary(min_size=28, max_size=60))
def test_arbitrary_well_formed_payloads_fail_authentication(raw):
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with pytest.raises(DecryptionError, match="failed authentication"):
        cipher().decrypt("v1.k1." + payload, **PLACE)


def test_decryption_error_is_a_plain_exception():
    assert issubclass(DecryptionError, Exception)
    assert not issubclass(DecryptionError, ValueError | RuntimeError)


# -- rotation ---------------------------------------------------------------------------------


def test_rotation_keeps_old_values_readable_and_moves_them_to_the_new_key():
    old = cipher(K1).encrypt(SECRET, **PLACE)
    rotated = cipher(f"{K2},{K1}")
    assert rotated.keyring.current_kid == "k2"
    assert rotated.keyring.kids == ("k2", "k1")
    assert rotated.decrypt(old, **PLACE) == SECRET
    assert rotated.needs_rotation(old)

    new = rotated.reencrypt(old, **PLACE)
    assert new.startswith("v1.k2.")
    assert not rotated.needs_rotation(new)
    assert rotated.decrypt(new, **PLACE) == SECRET
    # Once re-encrypted, the old key can go.
    assert cipher(K2).decrypt(new, **PLACE) == SECRET
    assert rotated.encrypt(SECRET, **PLACE).startswith("v1.k2.")


def test_reencrypting_a_current_value_returns_it_unchanged():
    c = cipher(f"{K2},{K1}")
    stored = c.encrypt(SECRET, **PLACE)
    assert c.reencrypt(stored, **PLACE) == stored


def test_reencrypt_verifies_the_value_first():
    old = cipher(K1).encrypt(SECRET, **PLACE)
    rotated = cipher(f"{K2},{K1}")
    with pytest.raises(DecryptionError):
        rotated.reencrypt(old, **{**PLACE, "row_id": "another"})
    current = rotated.encrypt(SECRET, **PLACE)
    with pytest.raises(DecryptionError):
        rotated.reencrypt(current, **{**PLACE, "row_id": "another"})


def test_a_value_under_a_retired_key_needs_rotation_but_cannot_be_reencrypted():
    old = cipher(K1).encrypt(SECRET, **PLACE)
    c = cipher(K2)
    assert c.needs_rotation(old)
    with pytest.raises(DecryptionError, match="unknown key id"):
        c.reencrypt(old, **PLACE)


# -- settings ---------------------------------------------------------------------------------


def test_standard_urlsafe_and_unpadded_base64_are_accepted():
    key = bytes([0xFB, 0xFF] * 16)  # encodes with + and / (standard) or - and _ (urlsafe)
    standard = base64.b64encode(key).decode()
    urlsafe = base64.urlsafe_b64encode(key).decode()
    assert "+" in standard or "/" in standard
    stored = cipher("k1:" + standard).encrypt(SECRET, **PLACE)
    for text in (urlsafe, urlsafe.rstrip("="), standard.rstrip("=")):
        assert cipher("k1:" + text).decrypt(stored, **PLACE) == SECRET


def test_whitespace_around_entries_is_ignored():
    c = cipher(f"  {K2} , {K1}\n")
    assert c.keyring.kids == ("k2", "k1")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        (f"{K1},", "entry 2 is empty"),
        (f"{K1},,{K2}", "entry 2 is empty"),
        (base64.b64encode(KEY1).decode(), "not of the form kid:base64key"),
        ("k1:not base64!", "'k1' is not valid base64"),
        ("k1:" + base64.b64encode(KEY1[:16]).decode(), "must be 32 bytes"),
        ("k1:" + base64.b64encode(KEY1 + b"x").decode(), "got 33 bytes"),
        ("k1:" + KEY1.hex(), "must be 32 bytes"),
        (f"{K1},{K1}", "'k1' appears more than once"),
        (f"k1:{base64.b64encode(KEY2).decode()},{K1}", "'k1' appears more than once"),
        (":" + base64.b64encode(KEY1).decode(), "invalid key id"),
        ("k" * 17 + ":" + base64.b64encode(KEY1).decode(), "invalid key id"),
        ("k.1:" + base64.b64encode(KEY1).decode(), "invalid key id"),
        ("kü:" + base64.b64encode(KEY1).decode(), "invalid key id"),
    ],
)
def test_invalid_settings_name_the_setting_and_never_the_key(setting, message):
    with pytest.raises(ConfigError, match=message) as caught:
        Keyring.parse(setting, setting=SETTING)
    text = str(caught.value)
    assert text.startswith(SETTING)
    for entry in setting.split(","):
        key_text = entry.partition(":")[2].strip()
        if len(key_text) > 4:
            assert key_text not in text
            assert key_text[:8] not in text
    assert caught.value.__cause__ is None


def test_a_key_pasted_in_place_of_the_kid_is_not_echoed():
    key_text = base64.b64encode(KEY1).decode()
    with pytest.raises(ConfigError) as caught:
        Keyring.parse(f"{key_text}:k1", setting=SETTING)
    assert key_text not in str(caught.value)
    assert key_text[:8] not in str(caught.value)


def test_national_id_cipher_reads_the_setting():
    c = national_id_cipher(Settings(NATIONAL_ID_ENCRYPTION_KEY=f"{K2},{K1}"))
    assert c.keyring.kids == ("k2", "k1")
    assert c.decrypt(c.encrypt(SECRET, **PLACE), **PLACE) == SECRET


def test_national_id_cipher_refuses_a_missing_setting(monkeypatch):
    monkeypatch.delenv("NATIONAL_ID_ENCRYPTION_KEY", raising=False)
    with pytest.raises(ConfigError, match="NATIONAL_ID_ENCRYPTION_KEY is not set"):
        national_id_cipher(Settings(_env_file=None))


def test_national_id_cipher_refuses_an_invalid_setting_without_echoing_it():
    bad = "k1:" + base64.b64encode(os.urandom(16)).decode()
    with pytest.raises(ConfigError, match="NATIONAL_ID_ENCRYPTION_KEY") as caught:
        national_id_cipher(Settings(NATIONAL_ID_ENCRYPTION_KEY=bad))
    assert bad[3:] not in str(caught.value)


def test_generated_settings_are_fresh_and_usable():
    first, second = generate_key_setting(), generate_key_setting("k2")
    assert first.startswith("k1:")
    assert second.startswith("k2:")
    assert first[3:] != second[3:]
    assert len(base64.urlsafe_b64decode(first[3:])) == 32
    c = cipher(f"{second},{first}")
    assert c.decrypt(c.encrypt(SECRET, **PLACE), **PLACE) == SECRET


@pytest.mark.parametrize("kid", ["", "k" * 17, "k.1", "k:1", "k,1"])
def test_generate_refuses_an_invalid_kid(kid):
    with pytest.raises(ValueError, match="kid"):
        generate_key_setting(kid)


# -- no leaks ---------------------------------------------------------------------------------


def test_reprs_show_key_ids_only():
    c = cipher(f"{K2},{K1}")
    for shown in (repr(c), repr(c.keyring), str(c), str(c.keyring)):
        assert "k2" in shown
        assert "k1" in shown
        for key in (KEY1, KEY2):
            assert base64.b64encode(key).decode() not in shown
            assert base64.urlsafe_b64encode(key).decode() not in shown
            assert base64.b64encode(key).decode()[:8] not in shown
            assert key.hex() not in shown
            assert repr(key) not in shown
    assert repr(c) == "FieldCipher(Keyring(current='k2', kids=['k2', 'k1']))"
