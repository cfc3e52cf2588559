"""The generated reference (``python -m gencache.docgen.config``): the config schema and the tables of docs/."""
