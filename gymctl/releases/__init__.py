"""Branded apps and their release pipeline (spec A 2.12-2.14, 3, 5.5, 6.4, 8, 9).

identifiers: the validators of the identity lock; branded_apps: the mapping, the public lookup;
associations: the web association files; push: registration and delivery; build_input,
requests, candidates, approvals, checks, evidence, operations, ci_access: the pipeline;
switches: per-organization feature switches; owner: what owners see and do (redacted).
"""
