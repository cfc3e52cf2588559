"""The data side: config, dataset sources and recipes, prompt templates, semantic keys and samples.

Everything here is model-free: a tokenizer is passed in where prompts are tokenized, never loaded here.
"""
