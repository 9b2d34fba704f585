"""`python -m ablate [COMMAND] ...`: the same front door as the `ablate` console script (cli/main.py)."""

from ablate.cli import entry

if __name__ == "__main__":
    entry()
