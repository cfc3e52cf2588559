"""The generated reference: ``config`` writes docs/config.md and the dataset columns of docs/datasets.md
(``python -m gencache.docgen.config``), ``schema`` the config's JSON schema, ``datasets`` each recipe's columns.
"""
