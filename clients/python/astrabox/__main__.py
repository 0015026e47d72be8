"""`python -m astrabox …` is the `astrabox` command."""

from astrabox.cli import main

main()
