"""The sweep daemons: one table of jobs (jobs.py) and the APScheduler runner (runner.py).

Each job calls one domain sweep. Run with `gymctl daemons run` or `python -m daemons`.
"""
