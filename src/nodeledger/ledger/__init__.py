"""Pure accounting functions: one function per term, formula and source in the docstring."""
