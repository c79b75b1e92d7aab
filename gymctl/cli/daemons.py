"""`gymctl daemons run`: placeholder replaced by the daemons work."""
