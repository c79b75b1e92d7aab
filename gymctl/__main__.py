"""`python -m gymctl` is the `gymctl` command."""

from gymctl.cli import main

main()
