"""Blueprints, one per area of the API."""
