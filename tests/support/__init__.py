"""The test suite's shared helpers: config files, dataset fixtures, generation references, plug-in packages, the
format's reference encoders, the config schema check, and the storage children that are killed mid-write."""
