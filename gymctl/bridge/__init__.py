"""The bridge to the external gym system (spec B 1, 2.6, 3, 4.6, 8): the connection, the entity
map, the ordered sync queue and its dispatcher, and polling.

Platform areas mirror a change with one call into `gymctl.bridge.mirror`, in their own
transaction (it decides the op, its payload and keys):

    from gymctl.bridge import mirror
    mirror.booking_changed(session, booking, now=now)
"""

from gymctl.bridge.queue import enqueue

__all__ = ["enqueue"]
