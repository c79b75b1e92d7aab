"""The bridge to the external gym system (spec B 1, 2.6, 3, 4.6, 8): the connection, the entity
map, the ordered sync queue and its dispatcher, and polling.

Platform areas mirror a change with one call, in their own transaction:

    from gymctl.bridge import enqueue
    enqueue(session, organization_id=..., op_type="booking.create",
            payload={"memberId": ..., "bookingId": ..., "sessionId": ...}, now=now,
            dedupe_key=f"booking.create:{booking_id}")
"""

from gymctl.bridge.queue import enqueue

__all__ = ["enqueue"]
