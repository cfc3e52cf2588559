"""The foundation every other package stands on (errors, canonical JSON, tokenizer state, progress, version, lazy
names, process state); nothing here imports another gencache package."""
