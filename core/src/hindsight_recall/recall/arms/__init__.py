"""The built-in retrieval arms."""
