"""Asset intake: the member-app image pipeline (spec A 2.11, 4 "Asset intake processing rules")."""
