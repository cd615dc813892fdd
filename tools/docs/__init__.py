"""The generated tables and pictures of README.md and docs/, the one writer of every
generated section (sections.py) and the check that a table says what its tool computes
today (doctables.py)."""
