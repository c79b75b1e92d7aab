"""The ledger of daemon job runs: one row per job and tick, whoever ran it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base


class JobRun(Base):
    """(job_name, tick) is the primary key: a second daemon reaching the same tick finds the row
    and skips, so each tick runs once across all daemon processes."""

    __tablename__ = "job_runs"

    job_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    tick: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    runner: Mapped[str] = mapped_column(String(128))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16))
    result: Mapped[str | None] = mapped_column(Text)
