"""Class types, sessions and bookings (spec B 2.4, 3, 4.3): who may book, waitlists and
promotion, check-in and no-shows."""
