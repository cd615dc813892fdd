"""The three answers of a placement at a fixed capacity (``capacity.fit``), in a module of
their own so that the CLI's parser can name them without importing the search."""

FITS, NO_FIT, UNDECIDED = "fits", "does not fit", "undecided"
