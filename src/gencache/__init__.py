"""gencache: immutable teacher-generation caches for knowledge distillation."""
__version__ = "0.1.0"
