"""Identity: session-token verification, the provider's webhooks, and the signed-in user."""
