"""Cancellation notices, retention cases, period-end settlement and presale withdrawals
(spec B 2.1, 2.3, 3, 6, 7, 8)."""
