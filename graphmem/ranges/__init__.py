"""Plans for a range of dims: sizes as formulas of the free dims (``sizes``), one plan
valid at every binding of a box (``plan``: a fixed order, aliases that hold as formulas,
offsets as a stacking order per segment), its evaluation at one binding (``evaluate``)
and its proof (``prove``)."""
