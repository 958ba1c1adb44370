"""`python -m stead ...` is the `stead` command."""

from stead.cli import main

if __name__ == "__main__":
    main(prog_name="stead")
