"""The foundation every other package stands on: nothing here imports another gencache package."""
