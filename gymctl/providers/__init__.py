"""Clients of outside systems, each behind a small interface with a real and a local
implementation chosen by a setting."""
