"""gymctl: the back office of a multi-gym platform."""

__version__ = "0.1.0"
