"""`python -m caten` runs the command line."""

from caten.cli.main import main

main()
