"""Billing (spec B 1-3, 5-8): plans and subscriptions, the protected collector, the lifecycle
pass and the card provider's webhooks. No HTTP, no CLI: those are doors into these modules."""
