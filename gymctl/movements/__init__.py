"""The movement library (spec B 2.7, 3, 4.5, 8): one canonical library every gym's workouts
reference, curated by operators. Every write has a dry run and an audit row."""
