"""The HTTP door: identity and card-provider webhooks in, the client JSON API out."""
