"""The organization's merchant account and its members' saved cards.

Credentials and card tokens are stored only encrypted (AES-256-GCM, bound to their row and
column), and leave this module only as a `Terminal` or a `SavedCard` handed to the provider.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.crypto import FieldCipher
from gymctl.models import BillingSettings, PaymentMethod, PaymentProviderConfig
from gymctl.providers.card import CardToken, Terminal, same_terminal

CARD_PROVIDER = "card_provider"


@dataclass(frozen=True)
class SavedCard:
    token: str
    expiry: date | None
    terminal: str | None  # the terminal whose token this is
    verified_at: datetime | None = None  # when verify-account proved it on `terminal`

    def verified_on(self, terminal: str) -> bool:
        return self.verified_at is not None and same_terminal(self.terminal, terminal)


# Built once: every charge asks it.
_ACTIVE_CONFIG = select(PaymentProviderConfig).where(
    PaymentProviderConfig.organization_id == bindparam("organization_id"),
    PaymentProviderConfig.active.is_(True),
)


def active_config(session: Session, organization_id: uuid.UUID) -> PaymentProviderConfig | None:
    return session.scalar(_ACTIVE_CONFIG, {"organization_id": organization_id})


def original_account(
    session: Session, organization_id: uuid.UUID, terminal: str | None
) -> PaymentProviderConfig | None:
    """The merchant account a payment went through: the organization's card-provider config on
    that terminal, the active one or one since replaced (its credentials are kept), so an
    operator can still ask about, or refund, what the old terminal took."""
    if not terminal:
        return None
    accounts = session.scalars(
        select(PaymentProviderConfig)
        .where(
            PaymentProviderConfig.organization_id == organization_id,
            PaymentProviderConfig.provider == CARD_PROVIDER,
            PaymentProviderConfig.credentials_ciphertext.is_not(None),
        )
        .order_by(PaymentProviderConfig.active.desc(), PaymentProviderConfig.created_at.desc())
    )
    # Compared here, not in SQL: a terminal the provider reported is its number, leading zeros
    # aside, and the settings keep the owner's text.
    return next((config for config in accounts if same_terminal(config.terminal, terminal)), None)


def configure_provider(
    session: Session,
    organization_id: uuid.UUID,
    *,
    provider: str,
    terminal: str | None,
    api_name: str | None,
    now: datetime,
    cipher: FieldCipher,
    webhook_signature_enforcement: bool | None = None,
    webhook_secret: str | None = None,
) -> PaymentProviderConfig:
    """Make `provider` the organization's active one. A new terminal starts its terminal_since
    clock (the presale card-age rule counts from it); the same terminal keeps its date."""
    previous = active_config(session, organization_id)
    since = now
    if previous is not None:
        if previous.provider == provider and same_terminal(previous.terminal, terminal):
            since = previous.terminal_since or now
        session.execute(
            update(PaymentProviderConfig)
            .where(PaymentProviderConfig.id == previous.id)
            .values(active=False)
        )
        session.flush()
    config = PaymentProviderConfig(
        id=ids.new_id(),
        organization_id=organization_id,
        provider=provider,
        terminal=terminal,
        terminal_since=since if terminal else None,
        active=True,
        webhook_signature_enforcement=webhook_signature_enforcement,
        created_at=now,
    )
    credentials = {"apiName": api_name, "webhookSecret": webhook_secret}
    credentials = {key: value for key, value in credentials.items() if value is not None}
    if credentials:
        config.credentials_ciphertext = cipher.encrypt(
            json.dumps(credentials), **_where_credentials(config.id)
        )
    session.add(config)
    session.flush()
    return config


def credentials_of(config: PaymentProviderConfig, cipher: FieldCipher) -> dict[str, str]:
    if not config.credentials_ciphertext:
        return {}
    return json.loads(
        cipher.decrypt(config.credentials_ciphertext, **_where_credentials(config.id))
    )


def terminal_of(config: PaymentProviderConfig, cipher: FieldCipher) -> Terminal:
    api_name = credentials_of(config, cipher).get("apiName", "")
    return Terminal(number=config.terminal or "", api_name=api_name)


def save_card(
    session: Session,
    *,
    organization_id: uuid.UUID,
    user_id: uuid.UUID,
    card: CardToken,
    terminal: str,
    now: datetime,
    cipher: FieldCipher,
) -> PaymentMethod:
    method = PaymentMethod(
        id=ids.new_id(),
        organization_id=organization_id,
        user_id=user_id,
        last4=card.last4,
        expires_month=card.expiry.strftime("%Y-%m") if card.expiry else None,
        saved_at=now,
    )
    payload = {
        "token": card.token,
        "expiry": card.expiry.isoformat() if card.expiry else None,
        "terminalNumber": terminal,
    }
    method.payload_ciphertext = cipher.encrypt(json.dumps(payload), **_where_card(method.id))
    session.add(method)
    session.flush()
    return method


def card_payload(method_id: uuid.UUID, ciphertext: str, cipher: FieldCipher) -> dict[str, Any]:
    """A saved card's decrypted payload: token, expiry, terminalNumber (and verifiedAt once
    verify-account proved it on that terminal). Never logged, never answered."""
    return json.loads(cipher.decrypt(ciphertext, **_where_card(method_id)))


def saved_card(method: PaymentMethod, cipher: FieldCipher) -> SavedCard:
    payload = card_payload(method.id, method.payload_ciphertext, cipher)
    expiry, verified = payload.get("expiry"), payload.get("verifiedAt")
    return SavedCard(
        token=payload["token"],
        expiry=date.fromisoformat(expiry) if expiry else None,
        terminal=payload.get("terminalNumber"),
        verified_at=datetime.fromisoformat(verified) if verified else None,
    )


def verify_card_terminal(
    method: PaymentMethod, terminal: str, *, now: datetime, cipher: FieldCipher
) -> None:
    """verify-account's write: the card is proven to live on `terminal`, as of `now`."""
    payload = card_payload(method.id, method.payload_ciphertext, cipher)
    payload.update(terminalNumber=terminal, verifiedAt=now.isoformat())
    method.payload_ciphertext = cipher.encrypt(json.dumps(payload), **_where_card(method.id))


def billing_settings(session: Session, organization_id: uuid.UUID) -> BillingSettings:
    """The organization's billing settings (spec B 2.5); defaults when it never set any."""
    found = session.get(BillingSettings, organization_id)
    return found or BillingSettings(
        organization_id=organization_id,
        billing_grace_days=7,
        plan_required_to_book=False,
        timezone="UTC",
    )


def _where_credentials(config_id: uuid.UUID) -> dict[str, str]:
    return {
        "table": "payment_provider_configs",
        "column": "credentials_ciphertext",
        "row_id": str(config_id),
    }


def _where_card(method_id: uuid.UUID) -> dict[str, str]:
    return {"table": "payment_methods", "column": "payload_ciphertext", "row_id": str(method_id)}
